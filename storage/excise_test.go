package storage

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// TestExciseThroughSharedRangeDeletion excises a span out of a shared
// SSTable whose range deletion runs past the span's end, then waits for
// Pebble's table statistics of what remains. Pebble's own DB.Excise gives
// a shared table's remains "loose" bounds that start after the cut range
// deletion, and the statistics loader (which asserts range-deletion
// bounds in every build) panics on them; Store.Excise must not.
func TestExciseThroughSharedRangeDeletion(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	store, err := SharedDir(filepath.Join(root, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	db, err := Open(Options{Dir: filepath.Join(root, "db"), Logger: slog.New(slog.DiscardHandler),
		Shared: &SharedOptions{Store: store, CreatorID: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	row := func(i int) []byte { return RowBound(9, []byte(fmt.Sprintf("row%04d", i))) }
	for i := 0; i < 100; i++ {
		if err := db.Set(CellKey(9, []byte(fmt.Sprintf("row%04d", i)), 1, []byte("q"), 1000), []byte("v"), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	// A snapshot keeps the range deletion (and what it covers) in the
	// bottom level through the compaction.
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	snap := db.NewSnapshot()
	defer snap.Close()
	if err := db.DeleteRange(row(10), row(90), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.DB.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	waitTableStats(t, db)
	if err := db.Excise(context.Background(), pebble.KeyRange{Start: row(20), End: row(50)}); err != nil {
		t.Fatal(err)
	}
	waitTableStats(t, db)
	// What the excise left reads as before: rows outside the span, minus
	// the deleted ones.
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if n != 20 {
		t.Errorf("after the excise %d keys are visible; want 20 (rows 0–9 and 90–99)", n)
	}
}

// waitTableStats waits until Pebble has loaded the statistics of every
// table (it does so on a background goroutine after each version edit; a
// table's statistics read as zero until then).
func waitTableStats(t *testing.T, db *DB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		levels, err := db.SSTables()
		if err != nil {
			t.Fatal(err)
		}
		loaded := true
		for _, level := range levels {
			for _, tbl := range level {
				loaded = loaded && tbl.TableStats.NumEntries > 0
			}
		}
		if loaded {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("table statistics never loaded")
		}
		runtime.Gosched()
	}
}
