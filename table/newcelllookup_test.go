package table

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/storage"
)

// TestNewCellLookupsFollowPointReads: writes look up that their cells are
// new only while point reads come (newCellLookups). After a period with
// writes and no point read, a write to a new row is not known new, and a
// point read meeting it in flight waits for its sync (and then sees it);
// that read turns looking back on, so the next write's new cell is skipped
// by a point read rather than waited for. A period in which a point read
// started keeps writers looking, and a column a stripe remembers is known
// new while they do not. Both write paths (MutateRow, MutateRowsFrom) ask.
func TestNewCellLookupsFollowPointReads(t *testing.T) {
	period := time.Duration(newCellLookupIdle) * time.Microsecond
	for _, rows := range []bool{false, true} {
		name := "MutateRow"
		if rows {
			name = "MutateRows"
		}
		t.Run(name, func(t *testing.T) {
			r := newGateRig(t)
			r.rows = rows
			m, err := r.eng.Table("i", "t")
			if err != nil {
				t.Fatal(err)
			}
			// skippedAt says whether a write of a cell of row at ts, held
			// before its sync, is one of new cells (RowPending), and checks
			// a point read meanwhile agrees: it answers at once with before
			// (the cell skipped) if so, else it waits for the sync. Either
			// way it then sees the write.
			skippedAt := func(row string, ts int64, before string) bool {
				t.Helper()
				write := r.heldWriteAt(row, "new", ts)
				skip := r.eng.RowPending(m.ID, []byte(row), storage.RowPrefix(m.ID, []byte(row)))
				point := ReadRequest{Keys: [][]byte{[]byte(row)}}
				if !skip {
					r.readWaitsForRelease(t, point, write, "new", "point read of "+row+", a write it cannot skip held")
				} else {
					read := r.readAsync(t, point)
					select {
					case v := <-read:
						if v != before {
							t.Fatalf("point read of %s while a write of new cells is held: %q, want %q", row, v, before)
						}
					case <-time.After(10 * time.Second):
						t.Fatalf("point read of %s waited for a write of new cells", row)
					}
					r.hold.release <- nil
					if err := <-write; err != nil {
						t.Fatal(err)
					}
				}
				if v, err := r.read(point); err != nil || v != "new" {
					t.Fatalf("point read of %s after its write: %q, %v; want new", row, v, err)
				}
				return skip
			}
			// skipped is skippedAt for a row's first cell.
			skipped := func(row string) bool { return skippedAt(row, 2000, "") }
			off := func() {
				t.Helper()
				for _, row := range []string{"d", "e"} {
					r.clock.Advance(period)
					if err := r.set(row, "v"); err != nil {
						t.Fatal(err)
					}
				}
			}
			// The first write starts a period, looking.
			if !skipped("a") {
				t.Fatal("a fresh engine's write of a new row was not skipped by a point read")
			}
			// A period with a point read (skipped's): writers still look.
			r.clock.Advance(period)
			if err := r.set("b", "v"); err != nil {
				t.Fatal(err)
			}
			if !skipped("c") {
				t.Fatal("after a period with point reads, a write of a new row was not skipped")
			}
			// Periods with writes and no point read: writers stop looking,
			// but a column its stripe remembers (c's, written at 2000) is
			// still known new.
			off()
			if !skippedAt("c", 3000, "new") {
				t.Fatal("while writers did not look, a new version of a remembered column was not skipped")
			}
			off()
			if skipped("f") {
				t.Fatal("after a period without point reads, a write still looked up that its cell is new")
			}
			// That point read turned looking back on.
			if !skipped("g") {
				t.Fatal("after a point read, a write of a new row was not skipped")
			}
		})
	}
}

// TestNotLookingBatchIsNotNewCells: while writers do not look, a batch of
// two rows in different row-lock stripes — a new row whose stripe
// remembers no column, and a new version of a column the other's stripe
// remembers — is not a batch of new cells (the new row's cell is not known
// new): a point read of the new row while the batch's sync is held waits
// for it, and neither row is pending as new cells. Either row first.
func TestNotLookingBatchIsNotNewCells(t *testing.T) {
	period := time.Duration(newCellLookupIdle) * time.Microsecond
	for _, newFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("new row first=%v", newFirst), func(t *testing.T) {
			r := newGateRig(t)
			m, err := r.eng.Table("i", "t")
			if err != nil {
				t.Fatal(err)
			}
			// c's column: remembered by its stripe (a fresh engine's first
			// write looks), then a period of writes without point reads.
			if err := r.setAt("c", "v", 1000); err != nil {
				t.Fatal(err)
			}
			r.clock.Advance(period)
			if err := r.setAt("c", "v", 2000); err != nil {
				t.Fatal(err)
			}
			if !r.eng.lookups.off.Load() {
				t.Fatal("writers still look after a period without point reads")
			}
			sc := r.eng.stripe(m.ID, []byte("c"))
			row := ""
			for i := 0; row == "" || r.eng.stripe(m.ID, []byte(row)) == sc; i++ {
				row = fmt.Sprintf("n%d", i)
			}
			if n := len(r.eng.newest[r.eng.stripe(m.ID, []byte(row))].cols); n != 0 {
				t.Fatalf("the new row's stripe remembers %d columns", n)
			}
			set := func(row string) RowMutation {
				return RowMutation{Row: []byte(row), Mutations: []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 3000, Value: []byte("new")}}}
			}
			batch := []RowMutation{set(row), set("c")}
			if !newFirst {
				slices.Reverse(batch)
			}
			write := r.heldWriteBy(row, "new", func() error {
				errs, err := r.eng.MutateRows("i", "t", batch)
				if err == nil {
					err = errors.Join(errs...)
				}
				return err
			})
			for _, k := range []string{row, "c"} {
				if r.eng.RowPending(m.ID, []byte(k), storage.RowPrefix(m.ID, []byte(k))) {
					t.Errorf("row %s is pending as new cells in a batch with a cell not known new", k)
				}
			}
			r.readWaitsForRelease(t, ReadRequest{Keys: [][]byte{[]byte(row)}}, write, "new", "a point read of the new row")
		})
	}
}

// TestNewCellLookupsStopSoonAfterReads: writers stop looking within a
// quarter of a second of writes after the last point read, not a second or
// two (a pure write workload that follows reads pays the lookups' seeks
// only that long), and a point read every tenth of a second keeps them
// looking.
func TestNewCellLookupsStopSoonAfterReads(t *testing.T) {
	r := newGateRig(t)
	step := 50 * time.Millisecond
	point := ReadRequest{Keys: [][]byte{[]byte("a")}}
	if err := r.set("a", "v"); err != nil {
		t.Fatal(err)
	}
	// Reads every 100 ms among writes every 50 ms: writers keep looking.
	for i := range 40 {
		if i%2 == 0 {
			if _, err := r.read(point); err != nil {
				t.Fatal(err)
			}
		}
		r.clock.Advance(step)
		if err := r.set(fmt.Sprintf("w%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
		if r.eng.lookups.off.Load() {
			t.Fatalf("writers stopped looking %v into reads every 100 ms", time.Duration(i+1)*step)
		}
	}
	// Writes only: looking stops within 250 ms.
	for i := range 5 {
		r.clock.Advance(step)
		if err := r.set(fmt.Sprintf("x%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	if !r.eng.lookups.off.Load() {
		t.Fatal("writers still look 250 ms after the last point read")
	}
}
