package storage

import (
	"testing"
)

// TestFullMemtableAtOpen: with FullMemtable, the database opens with one
// memtable of MemTableSize, not Pebble's 256 KiB first step of a ramp of
// eight, and the ramp key is gone; without it, the ramp is there.
func TestFullMemtableAtOpen(t *testing.T) {
	t.Parallel()
	for _, full := range []bool{false, true} {
		db, err := Open(Options{Dir: t.TempDir(), FullMemtable: full})
		if err != nil {
			t.Fatal(err)
		}
		m := db.Metrics()
		size := uint64(db.opts.MemTableSize)
		t.Logf("full %v: %d memtables, %d bytes", full, m.MemTable.Count, m.MemTable.Size)
		if got := m.MemTable.Size >= size; got != full || m.MemTable.Count != 1 {
			t.Errorf("full %v: %d memtables of %d bytes; want one, of %d bytes: %v", full, m.MemTable.Count, m.MemTable.Size, size, full)
		}
		if _, closer, err := db.Get(rampKey); err == nil {
			closer.Close()
			t.Errorf("full %v: the ramp key is set", full)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
