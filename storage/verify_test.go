package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"
)

// writeDB makes a database in a temporary directory with two flushed
// SSTables and unflushed writes in the WAL, closes it and returns the
// directory.
func writeDB(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	put := func(from, to int) {
		b := db.NewBatch()
		for i := from; i < to; i++ {
			if err := b.Set([]byte(fmt.Sprintf("key%06d", i)), []byte(fmt.Sprintf("value%06d", i)), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	put(0, 500)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	put(500, 1000)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 1000; i < 1100; i += 10 {
		put(i, i+10)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func filesOf(t *testing.T, dir, glob string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, glob))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func mustVerify(t *testing.T, dir string) *Report {
	t.Helper()
	rep, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestVerifyHealthy(t *testing.T) {
	t.Parallel()
	dir := writeDB(t)
	rep := mustVerify(t, dir)
	for _, f := range rep.Findings {
		t.Errorf("healthy directory: %s", f)
	}
	if rep.Checked[KindSSTable] < 2 || rep.Checked[KindWAL] < 1 || rep.Checked[KindManifest] < 1 || rep.Checked[KindOptions] != 1 {
		t.Errorf("checked %v", rep.Checked)
	}
	// Verify changes nothing: the database opens and holds every key.
	db, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, closer, err := db.Get([]byte("key001099"))
	if err != nil || string(v) != "value001099" {
		t.Fatalf("after verify: %q %v", v, err)
	}
	closer.Close()
}

func TestVerifyInUse(t *testing.T) {
	t.Parallel()
	dir := writeDB(t)
	db, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := Verify(dir); !errors.Is(err, ErrInUse) {
		t.Fatalf("verify of an open database: %v, want ErrInUse", err)
	}
}

func TestVerifyNotADataDir(t *testing.T) {
	if _, err := Verify(t.TempDir()); !errors.Is(err, ErrNotDataDir) {
		t.Fatalf("empty directory: %v", err)
	}
	if _, err := Verify(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("missing directory verified")
	}
}

// wantDamaged checks that rep names path, and only path, as damaged.
func wantDamaged(t *testing.T, rep *Report, path string) {
	t.Helper()
	got := rep.DamagedFiles()
	if len(got) != 1 || got[0] != path {
		t.Fatalf("damaged %v, want [%s]; findings %v", got, path, rep.Findings)
	}
}

func TestVerifySSTableFlip(t *testing.T) {
	dir := writeDB(t)
	sst := filesOf(t, dir, "*.sst")[0]
	st, _ := os.Stat(sst)
	flipByte(t, sst, st.Size()/3)
	rep := mustVerify(t, dir)
	wantDamaged(t, rep, sst)
	if !strings.Contains(rep.Findings[0].Problem, "checksum") {
		t.Errorf("problem %q does not say checksum", rep.Findings[0].Problem)
	}
}

func TestVerifySSTableTruncatedOrMissing(t *testing.T) {
	dir := writeDB(t)
	ssts := filesOf(t, dir, "*.sst")
	st, _ := os.Stat(ssts[0])
	if err := os.Truncate(ssts[0], st.Size()-100); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, mustVerify(t, dir), ssts[0])

	dir = writeDB(t)
	ssts = filesOf(t, dir, "*.sst")
	os.Remove(ssts[1])
	rep := mustVerify(t, dir)
	manifests := filesOf(t, dir, "MANIFEST-*")
	got := rep.DamagedFiles()
	if len(got) != 1 || !strings.HasPrefix(filepath.Base(got[0]), "MANIFEST-") || !strings.Contains(rep.Findings[0].Problem, strings.TrimSuffix(filepath.Base(ssts[1]), ".sst")) {
		t.Fatalf("missing SSTable: damaged %v (manifests %v), findings %v", got, manifests, rep.Findings)
	}
}

func TestVerifyWAL(t *testing.T) {
	dir := writeDB(t)
	logs := filesOf(t, dir, "*.log")
	newest := logs[len(logs)-1]
	offs := recordOffsets(t, dir)
	if len(offs) < 5 {
		t.Fatalf("newest WAL has %d records, want several", len(offs))
	}
	// A cut in the middle of the last record is a torn tail: a note. (The
	// file may go on past its last record with a recycled log's bytes.)
	raw, _ := os.ReadFile(newest)
	if err := os.WriteFile(newest, raw[:offs[len(offs)-1]+20], 0o644); err != nil {
		t.Fatal(err)
	}
	rep := mustVerify(t, dir)
	if d := rep.DamagedFiles(); len(d) != 0 {
		t.Fatalf("torn tail reported as damage: %v", rep.Findings)
	}
	if len(rep.Findings) != 1 || !strings.Contains(rep.Findings[0].Problem, "torn tail") {
		t.Fatalf("torn tail not noted: %v", rep.Findings)
	}
	// A flipped byte in an early record, with synced records after it, is
	// damage.
	if err := os.WriteFile(newest, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	flipByte(t, newest, 100)
	wantDamaged(t, mustVerify(t, dir), newest)
}

// recordOffsets lists the offsets of the records of the newest WAL in dir.
func recordOffsets(t *testing.T, dir string) []int64 {
	t.Helper()
	logs, err := wal.Scan(wal.Dir{FS: vfs.Default, Dirname: dir})
	if err != nil || len(logs) == 0 {
		t.Fatalf("scan WALs: %v", err)
	}
	r := logs[len(logs)-1].OpenForRead()
	defer r.Close()
	var offs []int64
	for {
		_, off, err := r.NextRecord()
		if err != nil {
			return offs
		}
		offs = append(offs, off.Physical)
	}
}

func TestVerifyManifestAndOptions(t *testing.T) {
	t.Parallel()
	dir := writeDB(t)
	mans := filesOf(t, dir, "MANIFEST-*")
	current := mans[len(mans)-1]
	flipByte(t, current, 20)
	wantDamaged(t, mustVerify(t, dir), current)

	dir = writeDB(t)
	opts := filesOf(t, dir, "OPTIONS-*")[0]
	b, _ := os.ReadFile(opts)
	b = []byte(strings.Replace(string(b), "comparer=ebbtable.cells.v1", "comparer=ebbtable.cellz.v1", 1))
	os.WriteFile(opts, b, 0o644)
	wantDamaged(t, mustVerify(t, dir), opts)
}

func TestCheckOnOpen(t *testing.T) {
	t.Parallel()
	dir := writeDB(t)
	if notes, err := CheckOnOpen(dir); err != nil || len(notes) != 0 {
		t.Fatalf("healthy directory: %v, notes %q", err, notes)
	}
	// A torn tail of the newest WAL opens.
	logs := filesOf(t, dir, "*.log")
	newest := logs[len(logs)-1]
	offs := recordOffsets(t, dir)
	raw, _ := os.ReadFile(newest)
	os.WriteFile(newest, raw[:offs[len(offs)-1]+20], 0o644)
	notes, err := CheckOnOpen(dir)
	if err != nil {
		t.Fatalf("torn tail: %v", err)
	}
	// ... and says so, naming the file.
	if len(notes) != 1 || !strings.Contains(notes[0], newest) || !strings.Contains(notes[0], "torn tail") {
		t.Fatalf("torn tail: notes %q, want one naming %s", notes, newest)
	}
	// A flip in a synced record refuses, naming the WAL; so does Open.
	os.WriteFile(newest, raw, 0o644)
	flipByte(t, newest, offs[1]+30)
	if _, err := CheckOnOpen(dir); err == nil || !strings.Contains(err.Error(), newest) {
		t.Fatalf("flipped WAL record: %v", err)
	}
	if db, err := Open(Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "ebbtable verify") {
		if db != nil {
			db.Close()
		}
		t.Fatalf("Open over a flipped WAL record: %v", err)
	}

	// A bad MANIFEST record refuses.
	dir = writeDB(t)
	mans := filesOf(t, dir, "MANIFEST-*")
	flipByte(t, mans[len(mans)-1], 40)
	if _, err := CheckOnOpen(dir); err == nil || !strings.Contains(err.Error(), "MANIFEST") {
		t.Fatalf("flipped MANIFEST: %v", err)
	}
}

// TestVerifySSTEveryByte flips each byte of a small SSTable in turn: every
// flip must fail VerifySST.
func TestVerifySSTEveryByte(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if err := db.Set([]byte(fmt.Sprintf("key%03d", i)), []byte(fmt.Sprintf("value%03d", i)), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	sst := filesOf(t, dir, "*.sst")[0]
	raw, err := os.ReadFile(sst)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := VerifySST(sst); err != nil || n != 20 {
		t.Fatalf("pristine SSTable: %d keys, %v", n, err)
	}
	flipped := filepath.Join(t.TempDir(), "flipped.sst")
	var missed []int
	for i := range raw {
		b := append([]byte(nil), raw...)
		b[i] ^= 0x01
		if err := os.WriteFile(flipped, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := VerifySST(flipped); err == nil {
			missed = append(missed, i)
		}
	}
	if len(missed) > 0 {
		t.Errorf("%d of %d single-bit flips passed VerifySST, at offsets %v", len(missed), len(raw), missed)
	}
	t.Logf("%d single-bit flips, one per byte of a %d-byte SSTable: %d detected", len(raw), len(raw), len(raw)-len(missed))
}
