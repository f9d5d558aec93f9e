package storage

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Pebble's first memtable after an open is 256 KiB, and each next one
// doubles up to MemTableSize; it flushes none of the small full ones until
// together they pass half of MemTableSize. So for the first ~32 MiB of
// writes after every open the database holds up to eight memtables, and
// every read and every new-cell lookup seeks each of them: in the
// point-read profile of ebbbench (200,000 rows just written) the skiplist
// seeks were 40–49% of the server's CPU.
//
// Pebble has no option for the first memtable's size, but it sizes a new
// memtable to fit the batch that did not fit the last one. skipMemtableRamp
// commits, once at open, one batch that needs more than a quarter of
// MemTableSize (a key set and deleted) — the memtable it lands in is half
// of MemTableSize and the next size becomes MemTableSize — and flushes it:
// the flush leaves one tombstone in an SSTable, and the next memtable is
// full size. The batch is written to the WAL unsynced; the flush makes it
// obsolete at once, and the cleaner deletes it.

// rampKey is the key the ramp batch sets and deletes.
var rampKey = MetaKey("memtable-ramp", "")

// skipMemtableRamp makes the mutable memtable full size (see above). It
// does nothing when MemTableSize is at most 1 MiB (no ramp worth skipping),
// or when the disk holding dir has less than rampRoom times the batch free:
// the batch goes through the WAL, and on a nearly full disk a failed WAL
// write is fatal (a server must still start there, to be given room).
func skipMemtableRamp(db *pebble.DB, fs vfs.FS, dir string, memTableSize uint64) error {
	if memTableSize <= 1<<20 {
		return nil
	}
	if u, err := fs.GetDiskUsage(dir); err != nil || u.AvailBytes < rampRoom*(memTableSize/4+memTableSize/16) {
		return nil
	}
	// More than a quarter of MemTableSize, so the memtable grows to half
	// (the next size then being MemTableSize); less than half, which Pebble
	// would treat as a large batch of its own, not sizing any memtable.
	val := make([]byte, memTableSize/4+memTableSize/16)
	b := db.NewBatch()
	defer b.Close()
	if err := b.Set(rampKey, val, nil); err != nil {
		return err
	}
	if err := b.Delete(rampKey, nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	return db.Flush()
}

// rampRoom is how many times the ramp batch must be free on the disk for
// skipMemtableRamp to write it.
const rampRoom = 8
