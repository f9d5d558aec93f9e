package storage

import (
	"os"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestObsoleteWALsAreDeleted flushes several memtables, each with a WAL of
// its own: once flushed, their WALs are deleted, not kept on disk for
// Pebble to reuse (cleaner.go); only the current WAL is left.
func TestObsoleteWALsAreDeleted(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	value := make([]byte, 64<<10)
	for i := range 8 {
		for j := range 16 {
			if err := db.Set([]byte{byte(i), byte(j)}, value, pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if m := db.Metrics(); m.WAL.ObsoleteFiles != 0 || m.WAL.ObsoletePhysicalSize != 0 {
		t.Errorf("%d obsolete WAL files (%d bytes) kept; want none", m.WAL.ObsoleteFiles, m.WAL.ObsoletePhysicalSize)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".log") {
			logs = append(logs, e.Name())
		}
	}
	if len(logs) != 1 {
		t.Errorf("WAL files after 8 flushes: %v; want only the current one", logs)
	}
}
