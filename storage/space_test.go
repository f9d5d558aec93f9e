package storage

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// sizedFS is an in-memory filesystem that reports the disk usage the test
// sets, so the ballast's start-up rules can be tried without a real disk.
type sizedFS struct {
	*vfs.MemFS
	total, avail uint64
}

func (f *sizedFS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	return vfs.DiskUsage{TotalBytes: f.total, AvailBytes: f.avail, UsedBytes: f.total - f.avail}, nil
}

func ballastSize(t *testing.T, fs vfs.FS) int64 {
	t.Helper()
	st, err := fs.Stat("/data/" + BallastName)
	if err != nil {
		return -1
	}
	return st.Size()
}

func TestBallast(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	fs := &sizedFS{MemFS: vfs.NewMem(), total: 1 << 30, avail: 512 << 20}

	// Plenty of room: the ballast (1% of 1 GiB) is created.
	if err := checkSpace(fs, "/data", Ballast{Percent: 1}, log); err != nil {
		t.Fatal(err)
	}
	want := int64(1<<30) / 100
	if got := ballastSize(t, fs); got != want {
		t.Fatalf("ballast is %d bytes, want %d", got, want)
	}

	// The disk filled: start-up is refused, naming the ballast to delete.
	fs.avail = uint64(want / 4)
	err := checkSpace(fs, "/data", Ballast{Percent: 1}, log)
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "/data/"+BallastName) || !strings.Contains(err.Error(), "Delete") {
		t.Fatalf("full disk: %v; want ErrDiskFull naming the ballast to delete", err)
	}

	// The operator deletes it: its space comes back and start-up goes on,
	// without recreating the ballast while that would leave too little.
	if err := fs.Remove("/data/" + BallastName); err != nil {
		t.Fatal(err)
	}
	fs.avail += uint64(want)
	if err := checkSpace(fs, "/data", Ballast{Percent: 1}, log); err != nil {
		t.Fatalf("after deleting the ballast: %v", err)
	}
	if got := ballastSize(t, fs); got != -1 {
		t.Fatalf("ballast recreated (%d bytes) with only %d free", got, fs.avail)
	}

	// Once there is room again, the next start recreates it.
	fs.avail = 512 << 20
	if err := checkSpace(fs, "/data", Ballast{Percent: 1}, log); err != nil {
		t.Fatal(err)
	}
	if got := ballastSize(t, fs); got != want {
		t.Fatalf("ballast is %d bytes after space came back, want %d", got, want)
	}

	// Without a ballast left, a full disk is still refused, saying so.
	fs.Remove("/data/" + BallastName)
	fs.avail = 0
	if err := checkSpace(fs, "/data", Ballast{Bytes: 4 << 20}, log); !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "no ballast") {
		t.Fatalf("full disk, no ballast: %v", err)
	}
	// No ballast configured: nothing is checked.
	if err := checkSpace(fs, "/data", Ballast{}, log); err != nil {
		t.Fatalf("ballast off: %v", err)
	}
}

func TestBallastPercentIsCapped(t *testing.T) {
	if got := (Ballast{Percent: 1}).size(1 << 40); got != MaxPercentBallast {
		t.Fatalf("1%% of 1 TiB: %d, want the cap %d", got, MaxPercentBallast)
	}
	if got := (Ballast{Bytes: 5 << 20, Percent: 1}).size(1 << 40); got != 5<<20 {
		t.Fatalf("explicit bytes: %d", got)
	}
}

func TestOpenRefusesForeignDirectory(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/home", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("/home/thesis.tex", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = Open(Options{Dir: "/home", FS: fs})
	if err == nil || !strings.Contains(err.Error(), "not an ebbtable data directory") || !strings.Contains(err.Error(), "thesis.tex") {
		t.Fatalf("Open on a directory of other files: %v", err)
	}
	// An empty directory, and an existing database, open.
	db, err := Open(Options{Dir: "/fresh", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = Open(Options{Dir: "/fresh", FS: fs})
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	db.Close()
}

func TestOpenRefusesOtherFormat(t *testing.T) {
	// A Pebble database written with another comparer is another
	// program's: ebbtable says so instead of opening it.
	fs := vfs.NewMem()
	db, err := Open(Options{Dir: "/db", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	saved := Comparer.Name
	Comparer.Name = "someone.else.v1"
	defer func() { Comparer.Name = saved }()
	_, err = Open(Options{Dir: "/db", FS: fs})
	if err == nil || !strings.Contains(err.Error(), "another format") {
		t.Fatalf("Open of another format: %v", err)
	}
}
