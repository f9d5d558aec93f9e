package server

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"

	"cloud.google.com/go/bigtable"
)

// TestConcurrentPointReadsKeepTheirRows: point reads through the official
// client, from several goroutines at once, each get exactly the rows they
// asked for. The server's point reads are transient (table.ReadRequest
// .Transient): a row is carved from a scratch its pooled iterator keeps and
// the next read on that iterator, another request's, writes over it once
// the engine's read has returned. So whatever the handler sends must be
// copied out of the row before then; a response encoded later (at the
// flush after the read) would carry another request's bytes. Rows of one to
// five cells, values of a few bytes to past the scratch's 2 KiB, keys and
// qualifiers of differing lengths, read alone and three at a time.
func TestConcurrentPointReadsKeepTheirRows(t *testing.T) {
	env := newTestEnv(t)
	tbl := env.createTable(t, "cpr", map[string]bigtable.GCPolicy{"f": nil, "g": nil})
	ctx := context.Background()
	const rows = 24
	sizes := []int{3, 60, 700, 1500, 2600}
	keys := make([]string, rows)
	want := map[string]bigtable.Row{}
	for i := range rows {
		key := fmt.Sprintf("k%02d-%s", i, bytes.Repeat([]byte{byte('a' + i%26)}, i%7))
		keys[i] = key
		m := bigtable.NewMutation()
		r := bigtable.Row{}
		for j := range 1 + i%5 {
			fam := "f"
			if j%2 == 1 {
				fam = "g"
			}
			col := fmt.Sprintf("q%d-%s", j, bytes.Repeat([]byte{byte('A' + i%26)}, i%4))
			val := bytes.Repeat(fmt.Appendf(nil, "%d.%d;", i, j), sizes[(i+j)%len(sizes)]/5+1)
			m.Set(fam, col, 1000, val)
			r[fam] = append(r[fam], bigtable.ReadItem{Row: key, Column: fam + ":" + col, Timestamp: 1000, Value: val})
		}
		if err := tbl.Apply(ctx, key, m); err != nil {
			t.Fatal(err)
		}
		for _, items := range r {
			slices.SortFunc(items, func(a, b bigtable.ReadItem) int { return bytes.Compare([]byte(a.Column), []byte(b.Column)) })
		}
		want[key] = r
	}

	const goroutines, reads = 8, 150
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for n := range reads {
				if n%3 == 0 {
					// Three rows in one read: the first in the scratch,
					// the others after it.
					list := bigtable.RowList{}
					for _, i := range rng.Perm(rows)[:3] {
						list = append(list, keys[i])
					}
					var got []bigtable.Row
					if err := tbl.ReadRows(ctx, list, func(r bigtable.Row) bool {
						got = append(got, r)
						return true
					}); err != nil {
						errs <- err
						return
					}
					slices.Sort(list)
					if len(got) != len(list) {
						errs <- fmt.Errorf("goroutine %d read %d: ReadRows(%q) returned %d rows, want %d", g, n, list, len(got), len(list))
						return
					}
					for i, k := range list {
						if !reflect.DeepEqual(got[i], want[k]) {
							errs <- fmt.Errorf("goroutine %d read %d: ReadRows(%q) row %d is %v, want %v", g, n, list, i, got[i], want[k])
							return
						}
					}
					continue
				}
				k := keys[rng.IntN(rows)]
				got, err := tbl.ReadRow(ctx, k)
				if err != nil {
					errs <- err
					return
				}
				if !reflect.DeepEqual(got, want[k]) {
					errs <- fmt.Errorf("goroutine %d read %d: ReadRow(%q) = %v, want %v", g, n, k, got, want[k])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
