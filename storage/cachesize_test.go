package storage

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestBlockCacheBesideFullMemtable: opened as the server opens it (one
// full-size memtable, the default cache), a database keeps the blocks it
// read from an SSTable in its block cache, so reading the same keys again
// reads no block from the file. Pebble charges every live memtable's size
// to the block cache; a cache of CacheBytes alone was all charged to the
// first memtable and refused every block (no hit, ever).
func TestBlockCacheBesideFullMemtable(t *testing.T) {
	t.Parallel()
	for _, cacheBytes := range []int64{0, 8 << 20} {
		t.Run(fmt.Sprint(cacheBytes), func(t *testing.T) {
			t.Parallel()
			db, err := Open(Options{Dir: t.TempDir(), FullMemtable: true, CacheBytes: cacheBytes})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			v := make([]byte, 1<<10)
			for i := range 2000 {
				if err := db.Set(fmt.Appendf(nil, "k%05d", i), v, pebble.NoSync); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
			read := func() {
				for i := 0; i < 2000; i += 10 {
					v, closer, err := db.Get(fmt.Appendf(nil, "k%05d", i))
					if err != nil || len(v) != 1<<10 {
						t.Fatalf("k%05d: %d bytes, %v", i, len(v), err)
					}
					closer.Close()
				}
			}
			read() // fills the cache
			before := db.Metrics().BlockCache
			read()
			after := db.Metrics().BlockCache
			t.Logf("second read: %d hits, %d misses; %d blocks cached (%d bytes)",
				after.Hits-before.Hits, after.Misses-before.Misses, after.Count, after.Size)
			if after.Misses != before.Misses || after.Hits == before.Hits {
				t.Errorf("reading the same 200 keys again: %d block cache hits, %d misses; want hits only",
					after.Hits-before.Hits, after.Misses-before.Misses)
			}
		})
	}
}
