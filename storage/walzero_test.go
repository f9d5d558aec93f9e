package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/cockroachdb/pebble/v2/wal"
)

// newestWAL returns the path and contents of the newest WAL in dir on fs.
func newestWAL(t *testing.T, fs vfs.FS, dir string) (string, []byte) {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	newest := ""
	for _, n := range names {
		if strings.HasSuffix(n, ".log") && n > newest {
			newest = n
		}
	}
	if newest == "" {
		t.Fatalf("no WAL in %s: %v", dir, names)
	}
	p := fs.PathJoin(dir, newest)
	f, err := fs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(f); err != nil {
		t.Fatal(err)
	}
	return p, b.Bytes()
}

// logEnd is where the log's bytes end in b: the zeros after it are the
// tail written ahead.
func logEnd(b []byte) int { return len(bytes.TrimRight(b, "\x00")) }

// recordsEnd reads the newest WAL in dir on fs with Pebble's reader and
// returns where its last record ends and how many records it holds.
func recordsEnd(t *testing.T, fs vfs.FS, dir string) (end int64, records int) {
	t.Helper()
	logs, err := wal.Scan(wal.Dir{FS: fs, Dirname: dir})
	if err != nil || len(logs) == 0 {
		t.Fatalf("scan WALs: %v", err)
	}
	r := logs[len(logs)-1].OpenForRead()
	defer r.Close()
	for {
		rec, off, err := r.NextRecord()
		if err == nil {
			_, err = io.Copy(io.Discard, rec)
		}
		if err != nil {
			return off.Physical, records
		}
		records++
	}
}

// TestWALZeroAhead: small synced writes to a new WAL leave its size alone
// (their syncs commit no new size), and what lies past the log's last
// write is zeros: at least half of minZeroAhead, and after large writes
// between half and all of the log's length (at most walZeroAhead). On the disk and on
// Pebble's memory FS.
func TestWALZeroAhead(t *testing.T) {
	t.Parallel()
	for _, onDisk := range []bool{true, false} {
		t.Run(fmt.Sprintf("disk=%v", onDisk), func(t *testing.T) {
			opts := Options{Dir: t.TempDir(), MaxSyncDuration: -1}
			if !onDisk {
				opts.FS, opts.Dir = vfs.NewMem(), "/db"
			}
			fs := opts.FS
			if fs == nil {
				fs = vfs.Default
			}
			db, err := Open(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			val := bytes.Repeat([]byte("v"), 100)
			var size int
			for i := range 200 { // 27 KB of log: less than half of minZeroAhead
				if err := db.Set(fmt.Appendf(nil, "row%04d", i), val, pebble.Sync); err != nil {
					t.Fatal(err)
				}
				p, b := newestWAL(t, fs, opts.Dir)
				if i == 0 {
					size = len(b)
				}
				if len(b) != size {
					t.Fatalf("write %d: %s is %d bytes, was %d after the first write: the WAL grows with each write", i, p, len(b), size)
				}
				end, n := recordsEnd(t, fs, opts.Dir)
				if n != i+1 || !zeroTail(b, end) || int64(len(b))-end < minZeroAhead/2 {
					t.Fatalf("write %d: %s holds %d records to offset %d, then %d bytes (all zeros: %v), want %d records, then at least %d zeros", i, p, n, end, int64(len(b))-end, zeroTail(b, end), i+1, minZeroAhead/2)
				}
			}
			// Large writes, past the zeros: the zeros ahead follow the log's
			// length up to walZeroAhead.
			big := bytes.Repeat([]byte("b"), 300<<10)
			for i := range 8 {
				if err := db.Set(fmt.Appendf(nil, "big%d", i), big, pebble.Sync); err != nil {
					t.Fatal(err)
				}
				p, b := newestWAL(t, fs, opts.Dir)
				end, _ := recordsEnd(t, fs, opts.Dir)
				ahead := min(max(end, minZeroAhead), walZeroAhead)
				if tail := int64(len(b)) - end; !zeroTail(b, end) || tail < ahead/2 || tail > ahead {
					t.Fatalf("big write %d: %s holds its records to offset %d, then %d bytes (all zeros: %v), want %d to %d zeros", i, p, end, tail, zeroTail(b, end), ahead/2, ahead)
				}
			}
			for i := range 200 {
				if v, c, err := db.Get(fmt.Appendf(nil, "row%04d", i)); err != nil || !bytes.Equal(v, val) {
					t.Fatalf("row%04d: %q, %v", i, v, err)
				} else {
					c.Close()
				}
			}
		})
	}
}

// sstGate holds the creation of SSTables while armed, so a flush waits and
// the WALs it would make obsolete stay needed.
type sstGate struct {
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func (g *sstGate) String() string { return "sstGate" }

func (g *sstGate) MaybeError(op errorfs.Op) error {
	if op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".sst") && g.armed.CompareAndSwap(true, false) {
		g.held <- struct{}{}
		<-g.release
	}
	return nil
}

// TestWALZeroTailPowerLoss: power is lost while two WALs are live, an
// older one closed (its EOF trailer, then the zeros written ahead of it,
// which Pebble's replay reads strictly) and the newest one open (records,
// then zeros: an unclean end Pebble accepts only in the newest WAL). Every
// synced write survives and the database opens. Once with exactly the
// synced state, and with random parts of what was not synced. (The open
// check and verify read the disk, not this memory FS: TestVerifyWALZeroTail
// and TestVerifyObsoleteWALZeroTail check them.)
func TestWALZeroTailPowerLoss(t *testing.T) {
	t.Parallel()
	for _, unsynced := range []int{0, 50} {
		t.Run(fmt.Sprintf("unsynced=%d%%", unsynced), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			gate := &sstGate{held: make(chan struct{}, 1), release: make(chan struct{})}
			db, err := Open(Options{Dir: "/db", FS: errorfs.Wrap(mem, gate), MaxSyncDuration: -1})
			if err != nil {
				t.Fatal(err)
			}
			synced := 0
			write := func(n int, opt *pebble.WriteOptions) {
				for range n {
					if err := db.Set(fmt.Appendf(nil, "row%05d", synced), fmt.Appendf(nil, "value%05d", synced), opt); err != nil {
						t.Fatal(err)
					}
					if opt == pebble.Sync {
						synced++
					}
				}
			}
			write(200, pebble.Sync)
			gate.armed.Store(true)
			if _, err := db.AsyncFlush(); err != nil { // closes the WAL, opens the next
				t.Fatal(err)
			}
			<-gate.held
			write(200, pebble.Sync)
			for i := range 20 { // never acknowledged as durable
				if err := db.Set(fmt.Appendf(nil, "nosync%02d", i), []byte("x"), pebble.NoSync); err != nil {
					t.Fatal(err)
				}
			}
			cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced}
			if unsynced > 0 {
				cfg.RNG = rand.New(rand.NewPCG(1, uint64(unsynced)))
			}
			crashed := mem.CrashClone(cfg)
			close(gate.release)
			db.Close()

			var logs []string
			names, _ := crashed.List("/db")
			for _, n := range names {
				if strings.HasSuffix(n, ".log") {
					logs = append(logs, n)
				}
			}
			if len(logs) != 2 {
				t.Fatalf("WALs after the crash: %v, want the closed one and the open one", logs)
			}
			for _, n := range logs {
				f, err := crashed.Open("/db/" + n)
				if err != nil {
					t.Fatal(err)
				}
				var b bytes.Buffer
				b.ReadFrom(f)
				f.Close()
				if end := logEnd(b.Bytes()); end == 0 || b.Len()-end < minZeroAhead/2 {
					t.Fatalf("%s: %d bytes, log to %d: want a log then a tail of zeros", n, b.Len(), end)
				}
			}

			db2, err := Open(Options{Dir: "/db", FS: crashed, MaxSyncDuration: -1})
			if err != nil {
				t.Fatalf("open after power loss: %v", err)
			}
			defer db2.Close()
			for i := range synced {
				k := fmt.Appendf(nil, "row%05d", i)
				v, c, err := db2.Get(k)
				if err != nil || string(v) != fmt.Sprintf("value%05d", i) {
					t.Fatalf("synced %s after power loss: %q, %v", k, v, err)
				}
				c.Close()
			}
		})
	}
}

// TestVerifyWALZeroTail: a WAL that ends in its records and then zeros,
// as a new WAL does when the process is killed, is a clean end for verify
// and the open check; a torn record before the zeros is still a torn tail.
func TestVerifyWALZeroTail(t *testing.T) {
	t.Parallel()
	dir := writeDB(t)
	logs := filesOf(t, dir, "*.log")
	newest := logs[len(logs)-1]
	offs := recordOffsets(t, dir)
	raw, _ := os.ReadFile(newest)
	last := offs[len(offs)-1]
	hdr := int64(recyclableHeaderSize)
	if typ := raw[last+6]; typ >= walSyncFullChunk && typ <= walSyncLastChunk {
		hdr = walSyncHeaderSize
	}
	end := last + hdr + (int64(raw[last+4]) | int64(raw[last+5])<<8)
	zeros := make([]byte, 3*recordBlockSize)
	// Kill -9 after the last record: no EOF trailer, then the zeros.
	if err := os.WriteFile(newest, append(raw[:end:end], zeros...), 0o644); err != nil {
		t.Fatal(err)
	}
	if rep := mustVerify(t, dir); len(rep.Findings) != 0 {
		t.Fatalf("zero tail: findings %v, want none", rep.Findings)
	}
	if notes, err := CheckOnOpen(dir); err != nil || len(notes) != 0 {
		t.Fatalf("zero tail: %v, notes %q; want a clean end", err, notes)
	}
	db, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if v, c, err := db.Get([]byte("key001099")); err != nil || string(v) != "value001099" {
		t.Fatalf("last record after a zero tail: %q, %v", v, err)
	} else {
		c.Close()
	}
	db.Close()

	// The last record cut short, then zeros: a torn tail, noted.
	dir = writeDB(t)
	logs = filesOf(t, dir, "*.log")
	newest = logs[len(logs)-1]
	offs = recordOffsets(t, dir)
	last = offs[len(offs)-1]
	raw, _ = os.ReadFile(newest)
	if err := os.WriteFile(newest, append(raw[:last+20:last+20], zeros...), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := mustVerify(t, dir)
	if len(rep.DamagedFiles()) != 0 || len(rep.Findings) != 1 || !strings.Contains(rep.Findings[0].Problem, "torn tail") {
		t.Fatalf("torn record then zeros: findings %v, want one torn tail", rep.Findings)
	}
	if notes, err := CheckOnOpen(dir); err != nil || len(notes) != 1 || !strings.Contains(notes[0], filepath.Base(newest)) {
		t.Fatalf("torn record then zeros: %v, notes %q; want one naming %s", err, notes, newest)
	}
}

// copyFiles copies the files of dir (not LOCK) to a new directory: what a
// kill -9 of the process that has dir open leaves, for synced writes.
func copyFiles(t *testing.T, dir string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestVerifyObsoleteWALZeroTail: the only WAL that ends in zeros without
// its EOF trailer and is not the newest is one an open replayed: Pebble
// flushes it, creates the next WAL and deletes it after, so a kill in
// between leaves it beside the new one. It is below the MANIFEST's oldest
// unflushed log, Pebble never reads it again (the database opens), and
// verify must not call it damaged. A live older WAL whose trailer is gone
// (records, then zeros), which Pebble refuses to open, stays damage.
func TestVerifyObsoleteWALZeroTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := Open(Options{Dir: dir, MaxSyncDuration: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := db.Set(fmt.Appendf(nil, "a%02d", i), []byte("v"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	killed := copyFiles(t, dir) // the WAL: records, then zeros
	db.Close()
	replayed := filesOf(t, killed, "*.log")
	if len(replayed) != 1 {
		t.Fatalf("WALs %v, want one", replayed)
	}
	raw, _ := os.ReadFile(replayed[0])

	db, err = Open(Options{Dir: killed, MaxSyncDuration: -1}) // replays, flushes, new WAL
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("b"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	again := copyFiles(t, killed)
	db.Close()
	// Killed before Pebble deleted the replayed WAL.
	if err := os.WriteFile(filepath.Join(again, filepath.Base(replayed[0])), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if logs := filesOf(t, again, "*.log"); len(logs) != 2 {
		t.Fatalf("WALs %v, want the replayed one and the new one", logs)
	}
	rep := mustVerify(t, again)
	if len(rep.DamagedFiles()) != 0 {
		t.Fatalf("obsolete replayed WAL: findings %v, want no damage", rep.Findings)
	}
	db, err = Open(Options{Dir: again, MaxSyncDuration: -1})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	for _, k := range []string{"a09", "b"} {
		if v, c, err := db.Get([]byte(k)); err != nil || string(v) != "v" {
			t.Fatalf("%s: %q, %v", k, v, err)
		} else {
			c.Close()
		}
	}
	db.Close()

	// Two live WALs (a flush held), the older one's trailer zeroed.
	dir = t.TempDir()
	gate := &sstGate{held: make(chan struct{}, 1), release: make(chan struct{})}
	db, err = Open(Options{Dir: dir, FS: errorfs.Wrap(vfs.Default, gate), MaxSyncDuration: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := db.Set(fmt.Appendf(nil, "a%02d", i), []byte("v"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	gate.armed.Store(true)
	if _, err := db.AsyncFlush(); err != nil {
		t.Fatal(err)
	}
	<-gate.held
	if err := db.Set([]byte("b"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	live := copyFiles(t, dir)
	close(gate.release)
	db.Close()
	logs := filesOf(t, live, "*.log")
	if len(logs) != 2 {
		t.Fatalf("WALs %v, want two live ones", logs)
	}
	b, _ := os.ReadFile(logs[0])
	num, _, _ := wal.ParseLogFilename(filepath.Base(logs[0]))
	trailer := make([]byte, recyclableHeaderSize) // no checksum, no length
	trailer[6] = recyclableFullChunk
	binary.LittleEndian.PutUint32(trailer[7:], uint32(num)+1) // the next log's number
	at := bytes.LastIndex(b, trailer)
	if at < 0 || !zeroTail(b, int64(at+len(trailer))) {
		t.Fatalf("%s: no EOF trailer before the zeros", logs[0])
	}
	clear(b[at : at+len(trailer)])
	if err := os.WriteFile(logs[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, mustVerify(t, live), logs[0])
	if db, err := Open(Options{Dir: live, MaxSyncDuration: -1}); err == nil {
		db.Close()
		t.Fatalf("open of a live older WAL without its trailer: no error")
	}
}
