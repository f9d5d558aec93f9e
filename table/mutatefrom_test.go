package table

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/gcrule"
)

// randomEntries is a bulk write of valid and refused entries mixed: empty
// rows, unknown families, bad timestamps, rows given twice, several
// mutations of every kind in one entry.
func randomEntries(rng *rand.Rand) []RowMutation {
	entries := make([]RowMutation, 1+rng.IntN(24))
	for i := range entries {
		row := []byte(fmt.Sprintf("r%02d", rng.IntN(12)))
		if rng.IntN(15) == 0 {
			row = nil
		}
		muts := make([]Mutation, 1+rng.IntN(4))
		for j := range muts {
			q := []byte{byte('a' + rng.IntN(3))}
			ts := int64(1000 * (1 + rng.IntN(5)))
			switch rng.IntN(12) {
			case 0:
				muts[j] = Mutation{Kind: SetCell, Family: "nope", Qualifier: q, Timestamp: ts, Value: []byte("x")}
			case 1:
				muts[j] = Mutation{Kind: SetCell, Family: "cf", Qualifier: q, Timestamp: -5, Value: []byte("x")}
			case 2:
				muts[j] = Mutation{Kind: SetCell, Family: "cf", Qualifier: q, Timestamp: ServerTimestamp, Value: []byte("srv")}
			case 3:
				muts[j] = Mutation{Kind: DeleteFromColumn, Family: "cf", Qualifier: q}
			case 4:
				muts[j] = Mutation{Kind: DeleteFromRow}
			case 5:
				muts[j] = Mutation{Kind: AddToCell, Family: "sum", Qualifier: q, Timestamp: ts, IntInput: int64(rng.IntN(9))}
			default:
				muts[j] = Mutation{Kind: SetCell, Family: "cf", Qualifier: q, Timestamp: ts, Value: fmt.Appendf(nil, "v%d.%d", i, j)}
			}
		}
		entries[i] = RowMutation{Row: row, Mutations: muts}
	}
	return entries
}

func tableCells(t *testing.T, e *Engine, tbl string) []cell.Row {
	t.Helper()
	var rows []cell.Row
	err := e.ReadRows(context.Background(), testInst, tbl, ReadRequest{}, func(r cell.Row) error {
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestMutateRowsFromKeepsEntriesApart checks that MutateRowsFrom, which
// checks each entry once and writes the mutations it kept, writes each
// valid entry's own mutations under its row's lock, and refuses the others
// as they would be refused alone: the same bulk writes, each entry sent as
// its own call into a second table, must leave the same errors and the
// same cells.
func TestMutateRowsFromKeepsEntriesApart(t *testing.T) {
	e, _, m := openStreamed(t)
	u, err := e.CreateTable(testInst, "u", TableSpec{Families: []FamilySpec{{Name: "cf", GC: gcrule.MustParse("never")}, {Name: "sum", Aggregate: AggSum}}})
	if err != nil {
		t.Fatal(err)
	}
	// Every row a bulk write into t records is locked while it commits.
	locked := 0
	e.beforeRecordedCommit = func(recs []changestream.Record) {
		for _, r := range recs {
			mu := &e.rowLocks[e.stripe(m.ID, r.RowKey)]
			if mu.TryLock() {
				mu.Unlock()
				t.Errorf("row %q commits unlocked", r.RowKey)
			}
			locked++
		}
	}
	rng := rand.New(rand.NewPCG(23, 20))
	refused, written := 0, 0
	for call := 0; call < 40; call++ {
		entries := randomEntries(rng)
		errs, err := e.MutateRows(testInst, "t", entries)
		if err != nil {
			t.Fatal(err)
		}
		if len(errs) != len(entries) {
			t.Fatalf("call %d: %d errors for %d entries", call, len(errs), len(entries))
		}
		for i, en := range entries {
			alone, err := e.MutateRows(testInst, "u", []RowMutation{en})
			if err != nil {
				t.Fatal(err)
			}
			got, want := fmt.Sprint(errs[i]), strings.ReplaceAll(fmt.Sprint(alone[0]), " in table "+u.Name, " in table "+m.Name)
			if got != want {
				t.Fatalf("call %d entry %d (%q %+v): error %q, alone %q", call, i, en.Row, en.Mutations, got, want)
			}
			if errs[i] != nil {
				refused++
			} else {
				written++
			}
		}
		if call%8 != 7 {
			continue
		}
		if a, b := tableCells(t, e, "t"), tableCells(t, e, "u"); !reflect.DeepEqual(a, b) {
			t.Fatalf("call %d: the bulk write left\n%v\nthe entries alone\n%v", call, a, b)
		}
	}
	t.Logf("%d entries refused, %d written, %d checked locked", refused, written, locked)
	if refused < 60 || written < 120 || locked < 120 {
		t.Fatalf("only %d entries refused, %d written, %d checked locked", refused, written, locked)
	}
}

// TestMutateRowsFromNamesItsStripes: while a bulk write waits for its WAL
// sync, the durability tracker counts it in flight on the stripe of every
// row it writes (MutateRowsFrom hands the commit the stripes it locked), so
// a point read of any of them waits for the sync.
func TestMutateRowsFromNamesItsStripes(t *testing.T) {
	r := newGateRig(t)
	m, err := r.eng.Table("i", "t")
	if err != nil {
		t.Fatal(err)
	}
	entries := []RowMutation{{Row: []byte("bad"), Mutations: []Mutation{{Kind: SetCell, Family: "nope", Timestamp: 1000}}}}
	for i := range 20 {
		row := fmt.Sprintf("r%02d", i)
		if err := r.set(row, "old"); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, RowMutation{Row: []byte(row), Mutations: []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte("new")}}})
	}
	r.hold.armed.Store(true)
	t.Cleanup(func() {
		select {
		case r.hold.release <- nil:
		default:
		}
	})
	done := make(chan error, 1)
	go func() {
		errs, err := r.eng.MutateRows("i", "t", entries)
		if err == nil && (errs[0] == nil || slices.ContainsFunc(errs[1:], func(e error) bool { return e != nil })) {
			err = fmt.Errorf("entry errors %v", errs)
		}
		done <- err
	}()
	select {
	case <-r.hold.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the write's WAL sync never came")
	}
	for _, en := range entries[1:] {
		if n := r.eng.dur.stripes[r.eng.stripe(m.ID, en.Row)].Load(); n != 1 {
			t.Errorf("row %s: %d commits in flight on its stripe, want 1", en.Row, n)
		}
	}
	r.hold.release <- nil
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, en := range entries[1:] {
		if n := r.eng.dur.stripes[r.eng.stripe(m.ID, en.Row)].Load(); n != 0 {
			t.Errorf("row %s: %d commits in flight after the sync", en.Row, n)
		}
		if v, err := r.read(ReadRequest{Keys: [][]byte{en.Row}}); err != nil || v != "new" {
			t.Errorf("row %s: read %q, %v", en.Row, v, err)
		}
	}
}
