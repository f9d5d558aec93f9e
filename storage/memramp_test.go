package storage

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestRampFlushesSmallMemtables writes 24 MiB into a fresh database, past
// the memtable sizes Pebble ramps through (256 KiB doubling up to 64 MiB),
// which it holds unflushed until together they pass 32 MiB: without the
// ramp flusher the database ends with seven memtables, each of which every
// read seeks; with it, at most two. Every write is then still there after
// a reopen.
func TestRampFlushesSmallMemtables(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	value := make([]byte, 1<<10)
	const batches, perBatch = 240, 100 // 24 MiB of values
	keys := make([][]byte, 0, batches*perBatch)
	most := int64(0)
	for range batches {
		b := db.NewBatch()
		for range perBatch {
			k := binary.BigEndian.AppendUint64(nil, rng.Uint64())
			keys = append(keys, k)
			if err := b.Set(k, value, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		db.ramp.waitIdle()
		most = max(most, db.Metrics().MemTable.Count)
	}
	if most > 2 {
		t.Errorf("the database held %d memtables at once; want at most 2 (one full, flushing, and the current one)", most)
	}
	if n := db.Metrics().Flush.Count; n == 0 {
		t.Errorf("no flush after 24 MiB of writes")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, k := range keys {
		v, c, err := db.Get(k)
		if err != nil {
			t.Fatalf("key %x after reopen: %v", k, err)
		}
		if len(v) != len(value) {
			t.Fatalf("key %x: %d bytes, want %d", k, len(v), len(value))
		}
		c.Close()
	}
}
