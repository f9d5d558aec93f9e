package storage

import (
	"context"
	"log/slog"
	"path/filepath"
	"sort"
	"testing"
)

// TestSharedCreatorReuseOverwrites shows why a creator id must never be
// reused by a fresh data directory (docs/scale-out.md, "Creator ids"):
// Pebble names a shared object by its creator id and file number only,
// and a fresh database numbers its files from the start again. A database
// opened on an empty directory under the creator id of one whose objects
// are still referenced (here the old directory itself stands for the node
// a span was moved to) writes objects of the same names, replacing them:
// the old database then reads the new one's data. ebbtable allocates a
// new creator id for every fresh data directory (server/clustercreator.go).
func TestSharedCreatorReuseOverwrites(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	store, err := SharedDir(filepath.Join(root, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	quiet := slog.New(slog.DiscardHandler)
	// The same steps, so the same file numbers, with other values.
	fill := func(dir, value string) {
		t.Helper()
		db, err := Open(Options{Dir: dir, Logger: quiet, Shared: &SharedOptions{Store: store, CreatorID: 9, SecondaryCacheBytes: -1}})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 50; i++ {
			if err := db.Set([]byte{0x01, byte(i)}, []byte(value), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := db.DB.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	old, fresh := filepath.Join(root, "old"), filepath.Join(root, "fresh")
	fill(old, "old")
	before, _ := store.List("", "")
	sort.Strings(before)
	fill(fresh, "new")
	after, _ := store.List("", "")
	sort.Strings(after)
	t.Logf("shared objects: %v, then %v", before, after)
	db, err := Open(Options{Dir: old, Logger: quiet, Shared: &SharedOptions{Store: store, CreatorID: 9, SecondaryCacheBytes: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, closer, err := db.Get([]byte{0x01, 7})
	if err != nil {
		t.Fatalf("the old database's read after a fresh one reused its creator id: %v", err)
	}
	got := string(v)
	closer.Close()
	if got != "new" {
		t.Fatalf("the old database reads %q; the hazard this test shows did not happen (did Pebble's object naming change?)", got)
	}
}
