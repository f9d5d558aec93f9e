package bench

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// The tests' workloads append a few KB: zero-filling the default 128 MiB
// ahead cost each ceiling-wal start 0.8 s.
func init() { walPrealloc = 1 << 20 }

// TestCeilingWALWrites checks the ceiling-wal target appends every written
// cell to its log, readable back in order with its row, qualifier and
// value.
func TestCeilingWALWrites(t *testing.T) {
	t.Parallel()
	cfg := Config{Table: "t", Rows: 250, BatchSize: 40, Workers: 3, Seed: 5}
	dir := writeThroughCeiling(t, cfg, StartCeilingWAL)
	data, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < walPrealloc {
		t.Fatalf("log is %d bytes, want it zero-filled to %d", len(data), walPrealloc)
	}
	pool := newValuePool(cfg.withDefaults())
	want := map[string][]byte{}
	for i := range cfg.Rows {
		want[cfg.Key(i)] = pool.value(i)
	}
	field := func() []byte {
		n, k := binary.Uvarint(data)
		if k <= 0 || uint64(len(data)-k) < n {
			t.Fatalf("bad length at %d bytes from the end", len(data))
		}
		f := data[k : k+int(n)]
		data = data[k+int(n):]
		return f
	}
	seen := map[string]bool{}
	for len(seen) < cfg.Rows {
		row := field()
		if len(row) == 0 {
			t.Fatalf("log ends after %d of %d cells", len(seen), cfg.Rows)
		}
		qual := field()
		if _, k := binary.Varint(data); k <= 0 {
			t.Fatal("bad timestamp")
		} else {
			data = data[k:]
		}
		val := field()
		if string(qual) != "c" || !bytes.Equal(val, want[string(row)]) || seen[string(row)] {
			t.Fatalf("cell %q: qualifier %q value %x (seen before: %v), want %x", row, qual, val, seen[string(row)], want[string(row)])
		}
		seen[string(row)] = true
	}
	if len(bytes.Trim(data, "\x00")) != 0 {
		t.Fatal("the log holds more than the written cells")
	}
}

// TestGroupLogWaitsForSync checks an append returns only after a sync that
// began after it, and that appends arriving during a sync share the next.
func TestGroupLogWaitsForSync(t *testing.T) {
	t.Parallel()
	l, err := openGroupLog(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	started, release := make(chan int, 10), make(chan struct{})
	l.sync = func(*os.File) error {
		started <- 1
		<-release
		return nil
	}
	add := func(b []byte) []byte { return append(b, 'x') }
	first := make(chan error, 1)
	go func() { first <- l.append(add) }()
	<-started // the first append's sync is running
	const n = 10
	var wg sync.WaitGroup
	rest := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() { defer wg.Done(); rest <- l.append(add) }()
	}
	// Wait until all n have appended (they then wait for a sync).
	for {
		l.mu.Lock()
		a := l.appends
		l.mu.Unlock()
		if a == n+1 {
			break
		}
		runtime.Gosched()
	}
	select {
	case err := <-first:
		t.Fatalf("append returned (%v) before its sync did", err)
	case err := <-rest:
		t.Fatalf("append returned (%v) before any sync covering it", err)
	default:
	}
	release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	<-started // the others' one shared sync
	select {
	case err := <-rest:
		t.Fatalf("append returned (%v) before the sync covering it", err)
	default:
	}
	release <- struct{}{}
	wg.Wait()
	for range n {
		if err := <-rest; err != nil {
			t.Fatal(err)
		}
	}
	if l.syncs != 2 {
		t.Fatalf("%d syncs, want 2 (one, then one shared by the %d appends that arrived during it)", l.syncs, n)
	}
	got, err := os.ReadFile(l.f.Name())
	if err != nil || string(got) != string(bytes.Repeat([]byte("x"), n+1)) {
		t.Fatalf("log %q (%v), want %d x", got, err, n+1)
	}
}
