package storage

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/ebbtable/ebbtable/internal/testkit/poll"
)

// TestObsoleteWALsAreDeleted flushes several memtables, each with a WAL of
// its own: once flushed, their WALs are deleted, not kept on disk for
// Pebble to reuse (cleaner.go); only the current WAL is left.
func TestObsoleteWALsAreDeleted(t *testing.T) {
	t.Parallel()
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
	// Pebble deletes obsolete files in the background after a flush: wait
	// for the WAL the last flush released to go.
	var logs []string
	var m *pebble.Metrics
	gone := poll.Until(10*time.Second, func() bool {
		m = db.Metrics()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		logs = logs[:0]
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".log") {
				logs = append(logs, e.Name())
			}
		}
		return len(logs) == 1 && m.WAL.ObsoleteFiles == 0 && m.WAL.ObsoletePhysicalSize == 0
	})
	if !gone {
		t.Errorf("WAL files after 8 flushes: %v, %d obsolete (%d bytes) kept; want only the current one", logs, m.WAL.ObsoleteFiles, m.WAL.ObsoletePhysicalSize)
	}
}
