package collector

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/internal/testkit/enginetest"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

// TestPilesAreCollectedBeforeTheNextPass: a read that seeks past many hidden
// versions reports its row, and the collector visits it PileDelay later (on
// the injected clock), long before the next pass is due.
func TestPilesAreCollectedBeforeTheNextPass(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{Pause: -1, Interval: time.Hour})
	e.create(t, "t", map[string]string{"v": "maxversions=1"})
	e.pass(t)
	now := e.now()
	for i := 0; i < 40; i++ {
		e.set(t, "t", "hot", "v", "q", now+int64(i)*1000, 0)
		e.set(t, "t", fmt.Sprint("cold", i%4), "v", "q", now, 0) // one version each: no pile
	}
	read := func(row string) {
		t.Helper()
		n := 0
		err := e.eng.ReadRows(context.Background(), inst, "t", table.ReadRequest{Keys: [][]byte{[]byte(row)}}, func(r cell.Row) error {
			n += len(r.Cells)
			return nil
		})
		if err != nil || n != 1 {
			t.Fatalf("read %s: %d cells, %v", row, n, err)
		}
	}
	read("cold0")
	if n := e.col.PilesWaiting(); n != 0 {
		t.Fatalf("a row of one version reported as a pile (%d waiting)", n)
	}
	read("hot")
	read("hot")
	if n := e.col.PilesWaiting(); n != 1 {
		t.Fatalf("%d piles waiting after reading past 39 hidden versions, want 1", n)
	}
	// Not before its delay.
	if n, err := e.col.CollectPiles(context.Background()); err != nil || n != 0 {
		t.Fatalf("collected %d (%v) before the delay", n, err)
	}
	if d := e.col.PileDelay(); d != 5*time.Second {
		t.Fatalf("PileDelay %v with an hour's interval, want 5s", d)
	}
	e.clock.Advance(e.col.PileDelay())
	n, err := e.col.CollectPiles(context.Background())
	if err != nil || n != 39 {
		t.Fatalf("collected %d (%v), want the 39 hidden versions", n, err)
	}
	if got := e.stored(t, "t"); got != 5 {
		t.Fatalf("%d cells stored, want 5 (hot's newest and four cold rows)", got)
	}
	if n := e.col.PilesWaiting(); n != 0 {
		t.Fatalf("%d piles still waiting", n)
	}
	// The set is bounded.
	for i := 0; i < maxPiles+100; i++ {
		e.col.notePile(1, storage.RowPrefix(1, []byte(fmt.Sprint(i))))
	}
	if n := e.col.PilesWaiting(); n != maxPiles {
		t.Fatalf("%d piles waiting, want the bound %d", n, maxPiles)
	}
}

// TestPileReportedAgainAfterItsVisit: reports of a waiting row are answered
// without the set's mutex (pileSeen), and a row taken for its visit is
// forgotten there too, so its next report puts it back in the set; a
// row of another table with the same key is its own.
func TestPileReportedAgainAfterItsVisit(t *testing.T) {
	e := newEnv(t, table.HideEligible, Options{Pause: -1, Interval: time.Hour})
	row := storage.RowPrefix(1, []byte("hot"))
	for range 3 {
		e.col.notePile(1, row)
	}
	if n := e.col.PilesWaiting(); n != 1 {
		t.Fatalf("%d piles waiting after three reports of one row, want 1", n)
	}
	e.col.notePile(2, row)
	if n := e.col.PilesWaiting(); n != 2 {
		t.Fatalf("%d piles waiting after a report of the row in another table, want 2", n)
	}
	e.clock.Advance(e.col.PileDelay())
	if due := e.col.duePiles(); len(due[1]) != 1 || len(due[2]) != 1 {
		t.Fatalf("due %v, want the row in tables 1 and 2", due)
	}
	e.col.notePile(1, row)
	if n := e.col.PilesWaiting(); n != 1 {
		t.Fatalf("%d piles waiting after the row was reported again past its visit, want 1", n)
	}
}

// BenchmarkNotePile: fifty goroutines reporting rows already waiting, as
// the reads of the hot-row workload do.
//
//	go test -run '^$' -bench NotePile ./collector
func BenchmarkNotePile(b *testing.B) {
	eng, fake := enginetest.Open(b, table.Options{Visibility: table.HideEligible})
	defer eng.Close()
	col, err := New(eng, Options{Pause: -1, Interval: time.Hour, Clock: fake, Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	rows := make([][]byte, 100)
	for i := range rows {
		rows[i] = storage.RowPrefix(1, fmt.Appendf(nil, "row%04d", i))
		col.notePile(1, rows[i])
	}
	b.SetParallelism(25) // 50 goroutines on two cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			col.notePile(1, rows[i%len(rows)])
			i++
		}
	})
}
