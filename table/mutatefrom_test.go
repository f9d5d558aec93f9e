package table

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

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
	for call := 0; call < 80; call++ {
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
		if a, b := tableCells(t, e, "t"), tableCells(t, e, "u"); !reflect.DeepEqual(a, b) {
			t.Fatalf("call %d: the bulk write left\n%v\nthe entries alone\n%v", call, a, b)
		}
	}
	t.Logf("%d entries refused, %d written, %d checked locked", refused, written, locked)
	if refused < 50 || written < 250 || locked < 250 {
		t.Fatalf("only %d entries refused, %d written, %d checked locked", refused, written, locked)
	}
}
