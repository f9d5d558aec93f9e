package table

import (
	"testing"
	"time"
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
			// skippedAt says whether a point read of row, while a write of
			// a cell at ts is held, answers at once with before (the cell
			// skipped) rather than waiting for the write's sync. Either way
			// it then sees the write.
			skippedAt := func(row string, ts int64, before string) bool {
				t.Helper()
				write := r.heldWriteAt(row, "new", ts)
				point := ReadRequest{Keys: [][]byte{[]byte(row)}}
				read := make(chan string, 1)
				go func() {
					v, err := r.read(point)
					if err != nil {
						t.Error(err)
					}
					read <- v
				}()
				skip := false
				select {
				case v := <-read:
					if v != before {
						t.Fatalf("point read of %s while a write is held: %q, want %q", row, v, before)
					}
					skip = true
				case <-time.After(100 * time.Millisecond):
				}
				r.hold.release <- nil
				if err := <-write; err != nil {
					t.Fatal(err)
				}
				if !skip {
					if v := <-read; v != "new" {
						t.Fatalf("point read of %s that waited: %q, want new", row, v)
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
