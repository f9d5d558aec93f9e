package table_test

import (
	"context"
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/table"
)

// TestExportCommitHighWater exports a span again and again while two
// writers commit to rows inside and outside it: each export must hold
// exactly the span's recorded commits at or below its CommitHighWater,
// which is what lets a move ship a tablet's change records without
// reporting a deletion twice (server/clusterchanges.go).
func TestExportCommitHighWater(t *testing.T) {
	t.Parallel()
	src, dst, _ := openSpanPair(t)
	createSpanTable(t, src, dst)
	if _, err := src.SetChangeStream("i", "t", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var n atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			r := rand.New(rand.NewSource(seed))
			for {
				select {
				case <-stop:
					return
				default:
				}
				v := n.Add(1)
				m := table.Mutation{Kind: table.SetCell, Family: "f", Qualifier: []byte("q"), Timestamp: v * 1000, Value: []byte(fmt.Sprintf("w%d", v))}
				if err := src.MutateRow("i", "t", spanRow(r.Intn(200)), []table.Mutation{m}); err != nil {
					t.Error(err)
					return
				}
			}
		}(int64(w))
	}
	var exports []*table.SpanExport
	for i := 0; i < 12; i++ {
		for n.Load() < int64(40*(i+1)) {
			runtime.Gosched()
		}
		x, err := src.ExportSpan(ctx, "i", "t", spanRow(50), spanRow(150))
		if err != nil {
			t.Fatal(err)
		}
		defer x.Release()
		exports = append(exports, x)
	}
	close(stop)
	wg.Wait()

	m, err := src.Table("i", "t")
	if err != nil {
		t.Fatal(err)
	}
	var recs []changestream.Record
	lower := changestream.TableStart(m.ID)
	for {
		b, err := src.ReadChanges(m, lower, 10000)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, b.Records...)
		if !b.Full {
			break
		}
		lower = changestream.After(m.ID, b.Records[len(b.Records)-1].Position)
	}
	if len(recs) < 400 {
		t.Fatalf("only %d records were written", len(recs))
	}
	for i, x := range exports {
		if err := dst.IngestSpan(ctx, x); err != nil {
			t.Fatal(err)
		}
		held := map[string]bool{}
		err := dst.ReadRows(ctx, "i", "t", table.ReadRequest{Ranges: []table.RowRange{{Start: spanRow(50), End: spanRow(150)}}}, func(r cell.Row) error {
			for _, c := range r.Cells {
				held[string(c.Value)] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		high, below, above := x.CommitHighWater(), 0, 0
		for _, r := range recs {
			if string(r.RowKey) < string(spanRow(50)) || string(r.RowKey) >= string(spanRow(150)) {
				continue
			}
			v := string(r.Mods[0].Value)
			switch {
			case r.Commit <= high && !held[v]:
				t.Errorf("export %d (high-water %d): commit %d (%s) is at or below it and not in the export", i, high, r.Commit, v)
			case r.Commit > high && held[v]:
				t.Errorf("export %d (high-water %d): commit %d (%s) is above it and in the export", i, high, r.Commit, v)
			case r.Commit <= high:
				below++
			default:
				above++
			}
		}
		if i == 0 && above == 0 || i == len(exports)-1 && below == 0 {
			t.Errorf("export %d: %d span commits at or below the high-water, %d above: the writers did not overlap the exports", i, below, above)
		}
	}
}
