package table

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
)

// TestVisibleSeqNumFound: the engine finds Pebble's visible sequence
// number (else no point read's iterator is pooled, silently), and it moves
// with a commit.
func TestVisibleSeqNumFound(t *testing.T) {
	e := openPlain(t)
	if e.iters.seq == nil {
		t.Fatal("visibleSeqNum found nothing in this Pebble: point reads' iterators are not pooled")
	}
	before := e.iters.seq.Load()
	if err := e.MutateRow(testInst, "t", []byte("r"), []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if after := e.iters.seq.Load(); after <= before {
		t.Fatalf("visible sequence number %d after a write, %d before", after, before)
	}
}

var pooledSeeds = flag.Int("pooled.seeds", 1, "TestPooledPointReadsMatchFresh: run seeds 1..N")

// TestPooledPointReadsMatchFresh: random writes (rows, versions, two
// families, one under a GC rule), deletes of columns and rows, dropped row
// ranges and flushes, each followed by point reads (one or two keys,
// forward and reversed, many in a row so pooled iterators serve them),
// which must return what the same rows read as closed ranges (a fresh
// iterator each) return. A pooled iterator handed out after a commit
// would return the rows as they were before it.
//
// The default runs seed 1 (600 steps; a handed-out stale iterator fails it
// within a few steps); -pooled.seeds=3 is the default before session 15.
func TestPooledPointReadsMatchFresh(t *testing.T) {
	for seed := range uint64(max(*pooledSeeds, 1)) {
		seed++
		t.Run(fmt.Sprint(seed), func(t *testing.T) { pooledVsFresh(t, seed) })
	}
}

func pooledVsFresh(t *testing.T, seed uint64) {
	e, err := Open(Options{Dir: t.TempDir(), Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if _, err := e.CreateTable(testInst, "t", TableSpec{Families: []FamilySpec{{Name: "cf"}, {Name: "g", GC: gcrule.MaxVersions(2)}}}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	row := func() []byte { return fmt.Appendf(nil, "r%02d", rng.IntN(12)) }
	read := func(req ReadRequest) string {
		t.Helper()
		var b []byte
		if err := e.ReadRows(context.Background(), testInst, "t", req, func(r cell.Row) error {
			b = fmt.Appendf(b, "%q:", r.Key)
			for _, c := range r.Cells {
				b = fmt.Appendf(b, " %s/%q@%d=%q", c.Family, c.Qualifier, c.Timestamp, c.Value)
			}
			b = append(b, '\n')
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	pooled := 0
	for step := range 600 {
		r := row()
		switch n := rng.IntN(100); {
		case n < 50:
			fam := "cf"
			if rng.IntN(2) == 0 {
				fam = "g"
			}
			m := Mutation{Kind: SetCell, Family: fam, Qualifier: []byte{'q', byte('0' + rng.IntN(3))}, Timestamp: int64(1+rng.IntN(20)) * 1000, Value: fmt.Appendf(nil, "v%d", step)}
			if err := e.MutateRow(testInst, "t", r, []Mutation{m}); err != nil {
				t.Fatal(err)
			}
		case n < 58:
			if err := e.MutateRow(testInst, "t", r, []Mutation{{Kind: DeleteFromColumn, Family: "cf", Qualifier: []byte{'q', byte('0' + rng.IntN(3))}}}); err != nil {
				t.Fatal(err)
			}
		case n < 63:
			if err := e.MutateRow(testInst, "t", r, []Mutation{{Kind: DeleteFromRow}}); err != nil {
				t.Fatal(err)
			}
		case n < 66:
			if err := e.DropRowRange(testInst, "t", r[:2], false); err != nil {
				t.Fatal(err)
			}
		case n < 70:
			if err := e.store.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		// Reads after every step, several of them back to back.
		for range 1 + rng.IntN(4) {
			keys := [][]byte{row()}
			if rng.IntN(4) == 0 {
				keys = append(keys, row())
			}
			rev := rng.IntN(4) == 0
			var ranges []RowRange
			for _, k := range keys {
				ranges = append(ranges, RowRange{Start: k, End: k, EndClosed: true})
			}
			want := read(ReadRequest{Ranges: ranges, Reversed: rev})
			if got := read(ReadRequest{Keys: keys, Reversed: rev}); got != want {
				t.Fatalf("step %d: point read of %q (reversed %v):\n%s\nthe same rows read as ranges:\n%s", step, keys, rev, got, want)
			}
			e.iters.mu.Lock()
			pooled += e.iters.n
			e.iters.mu.Unlock()
		}
	}
	if pooled == 0 {
		t.Fatal("no point read left its iterator in the pool: the test compared nothing pooled")
	}
}

// TestPooledPointReadsSeeAcknowledgedWrites: while readers keep the pool
// full, a writer reads its own row right after each write returns and
// must see that write (a stale pooled iterator would show the one before).
func TestPooledPointReadsSeeAcknowledgedWrites(t *testing.T) {
	e := openPlain(t)
	ctx := context.Background()
	readRow := func(k []byte) (string, error) {
		var v string
		err := e.ReadRows(ctx, testInst, "t", ReadRequest{Keys: [][]byte{k}, Filter: nil}, func(r cell.Row) error {
			v = string(r.Cells[0].Value)
			return nil
		})
		return v, err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := readRow(fmt.Appendf(nil, "o%d", (g+i)%8)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for i := range 200 {
		w := fmt.Appendf(nil, "w%d", i%4)
		val := fmt.Sprint(i)
		if err := e.MutateRow(testInst, "t", w, []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: int64(i+1) * 1000, Value: []byte(val)}}); err != nil {
			t.Fatal(err)
		}
		got, err := readRow(w)
		if err != nil {
			t.Fatal(err)
		}
		if got != val {
			close(stop)
			wg.Wait()
			t.Fatalf("write %d: read %q after the write returned", i, got)
		}
	}
	close(stop)
	wg.Wait()
}

// TestIterPoolClosesIdleIterators: iterators left in the pool past
// iterMaxAge are closed by expireIters, and Settle closes them all (they
// would hold tables a compaction replaced). An emptied pool's timer is
// set again when an iterator next comes back.
func TestIterPoolClosesIdleIterators(t *testing.T) {
	e := openPlain(t)
	if err := e.ReadRows(context.Background(), testInst, "t", ReadRequest{Keys: [][]byte{[]byte("x")}}, func(cell.Row) error { return nil }); err != nil {
		t.Fatal(err)
	}
	p := &e.iters
	p.mu.Lock()
	if p.n != 1 {
		p.mu.Unlock()
		t.Fatalf("pool holds %d iterators after one point read, want 1", p.n)
	}
	p.its[0].born = p.its[0].born.Add(-iterMaxAge)
	p.mu.Unlock()
	e.expireIters()
	p.mu.Lock()
	n := p.n
	p.mu.Unlock()
	if n != 0 {
		t.Fatalf("pool holds %d iterators past their age, want 0", n)
	}
	// The timer is set again once the emptied pool holds one more.
	if p.armed {
		t.Fatal("the pool's timer is marked set after the pool emptied")
	}
	if err := e.ReadRows(context.Background(), testInst, "t", ReadRequest{Keys: [][]byte{[]byte("x")}}, func(cell.Row) error { return nil }); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	n, armed := p.n, p.armed
	p.mu.Unlock()
	if n != 1 || !armed {
		t.Fatalf("pool holds %d iterators, its timer set: %v; want 1, set (else nothing closes them)", n, armed)
	}
}

func TestSettleDropsPooledIterators(t *testing.T) {
	e := openPlain(t)
	if err := e.ReadRows(context.Background(), testInst, "t", ReadRequest{Keys: [][]byte{[]byte("x")}}, func(cell.Row) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Settle(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	e.iters.mu.Lock()
	n := e.iters.n
	e.iters.mu.Unlock()
	if n != 0 {
		t.Fatalf("pool holds %d iterators after Settle, want 0", n)
	}
}
