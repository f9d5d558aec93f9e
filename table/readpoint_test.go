package table

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/ebbtable/ebbtable/cell"
)

// TestPointReadOneRow: a read of one row key (pointIntervals' one-row
// interval and its bounds) returns that row and nothing else, as the same
// row read as a closed range does, for keys whose escaped forms are
// neighbours: zero and 0xFF bytes, a key and its successor, prefixes.
func TestPointReadOneRow(t *testing.T) {
	e := openPlain(t)
	keys := []string{"a", "a\x00", "a\x00\x00", "a\x00\x01", "a\x01", "a\xff", "a\xff\x00", "ab", "\x00", "\x00\xff", "\xff", "\xff\xff", "\xff\x00", "b", "bb"}
	for i, k := range keys {
		if err := e.MutateRow(testInst, "t", []byte(k), []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte(fmt.Sprint(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(req ReadRequest) []string {
		t.Helper()
		var got []string
		if err := e.ReadRows(context.Background(), testInst, "t", req, func(r cell.Row) error {
			for _, c := range r.Cells {
				got = append(got, fmt.Sprintf("%q=%s", r.Key, c.Value))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	probes := append(append([]string{}, keys...), "", "a\x00\x00\x00", "a\xfe", "aa", "\x00\x00", "c")
	for i, k := range probes {
		want := read(ReadRequest{Ranges: []RowRange{{Start: []byte(k), End: []byte(k), EndClosed: true}}})
		if i < len(keys) && (len(want) != 1 || want[0] != fmt.Sprintf("%q=%d", k, i)) {
			t.Fatalf("range read of %q: %v", k, want)
		}
		for _, rev := range []bool{false, true} {
			if got := read(ReadRequest{Keys: [][]byte{[]byte(k)}, Reversed: rev}); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("point read of %q (reversed %v): %v, want %v", k, rev, got, want)
			}
		}
	}
}

// TestPointReadRowInValueChunk: a point read carves its row key and
// qualifiers from the value chunk (scanner.point); the rows it returns are
// the ones a range read of the same row returns (keys and qualifiers with
// zero bytes, a qualifier and a value too long for the chunk, several
// versions and columns), and each piece is capped at its length: appending
// to the returned key or a qualifier leaves the other pieces as they were.
func TestPointReadRowInValueChunk(t *testing.T) {
	e := openPlain(t)
	long := bytes.Repeat([]byte{'q', 0}, 1500)
	rows := map[string][]Mutation{}
	for _, k := range []string{"r", "r\x00", "\x00\xff", string(bytes.Repeat([]byte("k"), 200))} {
		var ms []Mutation
		for i, q := range [][]byte{[]byte("a"), {0, 1, 0}, nil, long} {
			for v := range 3 {
				ms = append(ms, Mutation{Kind: SetCell, Family: "cf", Qualifier: q, Timestamp: int64(1000 * (v + 1)),
					Value: bytes.Repeat([]byte{byte('0' + i), byte(v)}, 1+i*600)})
			}
		}
		rows[k] = ms
		if err := e.MutateRow(testInst, "t", []byte(k), ms); err != nil {
			t.Fatal(err)
		}
	}
	read := func(req ReadRequest) []cell.Row { return readRowsOf(t, e, req) }
	for k := range rows {
		want := read(ReadRequest{Ranges: []RowRange{{Start: []byte(k), End: []byte(k), EndClosed: true}}})
		got := read(ReadRequest{Keys: [][]byte{[]byte(k)}})
		if len(got) != 1 || len(want) != 1 || !reflect.DeepEqual(got[0], want[0]) {
			t.Fatalf("point read of %q: %v, want %v", k, got, want)
		}
		if len(got[0].Cells) != 12 {
			t.Fatalf("point read of %q: %d cells, want 12", k, len(got[0].Cells))
		}
		// Append to every piece; the rest must not move.
		r := got[0]
		_ = append(r.Key, "XXXXXXXX"...)
		for _, c := range r.Cells {
			_ = append(c.Qualifier, "XXXXXXXX"...)
		}
		if !reflect.DeepEqual(r, want[0]) {
			t.Fatalf("point read of %q: appending to its key or qualifiers changed the row: %v, want %v", k, r, want[0])
		}
	}
	// Every row in one point read: their keys, qualifiers and values share
	// chunks, and each row is still the one a range read of it returns.
	keys := slices.Sorted(maps.Keys(rows))
	var want []cell.Row
	for _, k := range keys {
		want = append(want, read(ReadRequest{Ranges: []RowRange{{Start: []byte(k), End: []byte(k), EndClosed: true}}})...)
	}
	var req ReadRequest
	for _, k := range keys {
		req.Keys = append(req.Keys, []byte(k))
	}
	got := read(req)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("point read of every row: %v, want %v", got, want)
	}
}

// TestTransientPointReads: point reads that declare their rows transient
// (ReadRequest.Transient) carve them from memory the pooled iterator keeps
// for the next read (pointScratch). Each such read returns the rows a range
// read returns, every row of a read of several keys intact until the read
// returns (rows of one, one cell, twenty cells, a value past what the
// scratch keeps, in random orders and back to back), and the rows a read
// without Transient returned (every tenth) are never written over by the
// reads after it. A transient read allocates less than one that keeps its rows
// (else the scratch served nothing).
func TestTransientPointReads(t *testing.T) {
	e := openPlain(t)
	shapes := map[string]struct{ cells, size int }{
		"a": {1, 10}, "b": {3, 40}, "c": {20, 8}, "d": {1, 3000}, "e": {2, 100}, "f\x00g": {1, 1},
	}
	for k, sh := range shapes {
		var ms []Mutation
		for i := range sh.cells {
			ms = append(ms, Mutation{Kind: SetCell, Family: "cf", Qualifier: fmt.Appendf(nil, "q%02d", i), Timestamp: 1000,
				Value: bytes.Repeat([]byte{k[0], byte('0' + i%10)}, (sh.size+1)/2)})
		}
		if err := e.MutateRow(testInst, "t", []byte(k), ms); err != nil {
			t.Fatal(err)
		}
	}
	read := func(req ReadRequest) []cell.Row { return readRowsOf(t, e, req) }
	keys := slices.Sorted(maps.Keys(shapes))
	want := map[string]cell.Row{}
	for _, k := range keys {
		rs := read(ReadRequest{Ranges: []RowRange{{Start: []byte(k), End: []byte(k), EndClosed: true}}})
		if len(rs) != 1 || len(rs[0].Cells) != shapes[k].cells {
			t.Fatalf("range read of %q: %v", k, rs)
		}
		want[k] = rs[0]
	}
	// Every tenth read keeps its rows (no Transient); they are checked
	// once all the transient reads after them are done.
	type keptRead struct {
		keys [][]byte
		rows []cell.Row
	}
	var kept []keptRead
	rng := rand.New(rand.NewPCG(3, 4))
	pooled := 0
	for i := range 300 {
		var req ReadRequest
		req.Transient = i%10 != 5
		for _, j := range rng.Perm(len(keys))[:1+rng.IntN(3)] {
			req.Keys = append(req.Keys, []byte(keys[j]))
		}
		req.Reversed = rng.IntN(4) == 0
		sorted := slices.Clone(req.Keys)
		slices.SortFunc(sorted, bytes.Compare)
		if req.Reversed {
			slices.Reverse(sorted)
		}
		// The rows, not copied, are compared at the last one: intact
		// until the read returns (a transient read's, no longer).
		var got []cell.Row
		if err := e.ReadRows(context.Background(), testInst, "t", req, func(r cell.Row) error {
			if got = append(got, r); len(got) < len(sorted) {
				return nil
			}
			for n, k := range sorted {
				if !reflect.DeepEqual(got[n], want[string(k)]) {
					return fmt.Errorf("row %d is %v, want %v", n, got[n], want[string(k)])
				}
			}
			return nil
		}); err != nil {
			t.Fatalf("read %d: point read of %q (transient %v): %v", i, req.Keys, req.Transient, err)
		}
		if len(got) != len(sorted) {
			t.Fatalf("read %d: point read of %q: %d rows, want %d", i, req.Keys, len(got), len(sorted))
		}
		if !req.Transient {
			kept = append(kept, keptRead{sorted, got})
		}
		e.iters.mu.Lock()
		pooled += e.iters.n
		e.iters.mu.Unlock()
	}
	if pooled == 0 {
		t.Fatal("no point read left its iterator in the pool: nothing was read from a scratch")
	}
	for _, kr := range kept {
		for n, k := range kr.keys {
			if !reflect.DeepEqual(kr.rows[n], want[string(k)]) {
				t.Fatalf("a row a point read without Transient returned changed under the reads after it: %v, want %v", kr.rows[n], want[string(k)])
			}
		}
	}
	allocs := func(transient bool) float64 {
		return testing.AllocsPerRun(200, func() {
			n := 0
			if err := e.ReadRows(context.Background(), testInst, "t", ReadRequest{Keys: [][]byte{[]byte("b")}, Transient: transient}, func(r cell.Row) error {
				n += len(r.Cells)
				return nil
			}); err != nil || n != 3 {
				t.Fatalf("read %d cells: %v", n, err)
			}
		})
	}
	if tr, kp := allocs(true), allocs(false); tr >= kp {
		t.Fatalf("a transient point read allocates %.1f times, one that keeps its row %.1f: the scratch served nothing", tr, kp)
	}
}

// readRowsOf is every row req reads from table "t", as the callback got it.
func readRowsOf(t *testing.T, e *Engine, req ReadRequest) []cell.Row {
	t.Helper()
	var got []cell.Row
	if err := e.ReadRows(context.Background(), testInst, "t", req, func(r cell.Row) error {
		got = append(got, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestConcurrentTransientPointReads: transient point reads from several
// goroutines at once each see their own rows, every row of a read intact
// until the read returns (checked at its last row, the earlier rows not
// copied), while the pooled iterators and their scratches pass between
// the goroutines. A scratch two reads use at once (one given back to the
// pool while its read still writes to it) is a data race under -race, and
// rows written over by another read fail the comparison.
func TestConcurrentTransientPointReads(t *testing.T) {
	e := openPlain(t)
	const rows = 16
	keys := make([][]byte, rows)
	want := map[string]cell.Row{}
	for i := range rows {
		keys[i] = fmt.Appendf(nil, "r%02d%s", i, bytes.Repeat([]byte{'x'}, i%5))
		var ms []Mutation
		for j := range 1 + i%4 {
			ms = append(ms, Mutation{Kind: SetCell, Family: "cf", Qualifier: fmt.Appendf(nil, "q%d", j), Timestamp: 1000,
				Value: bytes.Repeat(fmt.Appendf(nil, "%d.%d;", i, j), []int{2, 60, 500}[(i+j)%3])})
		}
		if err := e.MutateRow(testInst, "t", keys[i], ms); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		if err := e.ReadRows(context.Background(), testInst, "t", ReadRequest{Keys: [][]byte{k}}, func(r cell.Row) error {
			want[string(k)] = r
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	const goroutines, reads = 4, 300
	done := make(chan struct{})
	for g := range goroutines {
		go func() {
			defer func() { done <- struct{}{} }()
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			for n := range reads {
				req := ReadRequest{Transient: true}
				for _, i := range rng.Perm(rows)[:1+rng.IntN(3)] {
					req.Keys = append(req.Keys, keys[i])
				}
				sorted := slices.SortedFunc(slices.Values(req.Keys), bytes.Compare)
				var got []cell.Row
				err := e.ReadRows(context.Background(), testInst, "t", req, func(r cell.Row) error {
					got = append(got, r)
					if len(got) < len(sorted) {
						return nil
					}
					for i, k := range sorted {
						if !reflect.DeepEqual(got[i], want[string(k)]) {
							return fmt.Errorf("row %d is %v, want %v", i, got[i], want[string(k)])
						}
					}
					return nil
				})
				if err == nil && len(got) != len(sorted) {
					err = fmt.Errorf("%d rows, want %d", len(got), len(sorted))
				}
				if err != nil {
					t.Errorf("goroutine %d read %d of %q: %v", g, n, req.Keys, err)
					return
				}
			}
		}()
	}
	for range goroutines {
		<-done
	}
}

// TestTransientPointReadLeavesNoLargeRowBehind: after a transient point
// read of a row whose value is past the scratch's chunk (its own
// allocation), the pooled iterator's scratch points at nothing of it: no
// chunk over scratchArenaMax, and no cell slot holding a value (keep
// clears them), so the pool does not keep a large row alive for as long
// as the iterator stays pooled.
func TestTransientPointReadLeavesNoLargeRowBehind(t *testing.T) {
	e := openPlain(t)
	for k, size := range map[string]int{"small": 10, "big": 64 << 10} {
		if err := e.MutateRow(testInst, "t", []byte(k), []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 1000,
			Value: bytes.Repeat([]byte{'v'}, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"small", "big"} { // the first gives the scratch its cells, the second reads into them
		n := 0
		if err := e.ReadRows(context.Background(), testInst, "t", ReadRequest{Keys: [][]byte{[]byte(k)}, Transient: true}, func(r cell.Row) error {
			for _, c := range r.Cells {
				n += len(c.Value)
			}
			return nil
		}); err != nil || n == 0 {
			t.Fatalf("read %s: %d value bytes, %v", k, n, err)
		}
	}
	p := &e.iters
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n != 1 || p.its[0].scratch == nil {
		t.Fatalf("pool holds %d iterators after two point reads, want 1 with its scratch", p.n)
	}
	ps := p.its[0].scratch
	if cap(ps.arena) > scratchArenaMax {
		t.Fatalf("the scratch keeps a chunk of %d bytes, more than %d", cap(ps.arena), scratchArenaMax)
	}
	if cap(ps.cells) == 0 {
		t.Fatal("the scratch has no cells: the big row was not read into it")
	}
	for i, c := range ps.cells[:cap(ps.cells)] {
		if c.Value != nil || c.Labels != nil || c.Qualifier != nil {
			t.Fatalf("the scratch's cell slot %d still points at the last read's cell (value of %d bytes)", i, len(c.Value))
		}
	}
}
