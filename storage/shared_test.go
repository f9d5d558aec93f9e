package storage

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

// TestSharedOptions: shared storage needs a store and a creator id; a data
// directory keeps its creator id; L6 SSTables land in the shared store and
// L0 stays local; a leftover temporary SSTable is removed at open.
func TestSharedOptions(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	store, err := SharedDir(filepath.Join(root, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	quiet := slog.New(slog.DiscardHandler)
	dir := filepath.Join(root, "db")
	for _, bad := range []*SharedOptions{{CreatorID: 1}, {Store: store}} {
		if _, err := Open(Options{Dir: dir, Logger: quiet, Shared: bad}); err == nil {
			t.Errorf("Open with %+v succeeded", *bad)
		}
	}
	db, err := Open(Options{Dir: dir, Logger: quiet, Shared: &SharedOptions{Store: store, CreatorID: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if !db.Shared() {
		t.Errorf("Shared() is false")
	}
	for i := 0; i < 100; i++ {
		if err := db.Set([]byte{0x01, byte(i)}, []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	names, _ := store.List("", "")
	if len(names) != 0 {
		t.Errorf("a flush (to L0) wrote %v to the shared store", names)
	}
	if err := db.DB.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	names, _ = store.List("", "")
	if len(names) == 0 || !strings.Contains(strings.Join(names, " "), "-3-") {
		t.Errorf("after a compaction to L6 the shared store holds %v; want objects of creator 3", names)
	}
	p, _, err := db.WriteTempSST([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// verify reads the local files and counts the shared ones.
	rep, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	noted := false
	for _, f := range rep.Findings {
		if f.Damaged {
			t.Errorf("verify of a database on shared storage: %s", f)
		}
		noted = noted || strings.Contains(f.Problem, "in shared storage")
	}
	if !noted {
		t.Errorf("verify did not note the shared SSTables: %v", rep.Findings)
	}
	if _, err := Open(Options{Dir: dir, Logger: quiet, Shared: &SharedOptions{Store: store, CreatorID: 4}}); err == nil {
		t.Errorf("reopening with another creator id succeeded")
	}
	db, err = Open(Options{Dir: dir, Logger: quiet, Shared: &SharedOptions{Store: store, CreatorID: 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.opts.FS.Stat(p); err == nil {
		t.Errorf("the leftover %s survived an open", p)
	}
	if v, closer, err := db.Get([]byte{0x01, 7}); err != nil || string(v) != "v" {
		t.Errorf("a key read back through the shared store: %q, %v", v, err)
	} else {
		closer.Close()
	}
}
