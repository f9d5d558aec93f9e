package table

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
)

// walHold is an errorfs injector that, while armed, holds the next WAL sync
// until the test releases it with the sync's outcome.
type walHold struct {
	armed   atomic.Bool
	held    chan struct{} // receives when a sync is being held
	release chan error    // the held sync's result
}

func newWALHold() *walHold {
	return &walHold{held: make(chan struct{}, 1), release: make(chan error)}
}

func (h *walHold) String() string { return "walHold" }

func (h *walHold) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
	default:
		return nil
	}
	if !strings.HasSuffix(op.Path, ".log") || !h.armed.CompareAndSwap(true, false) {
		return nil
	}
	h.held <- struct{}{}
	return <-h.release
}

type gateRig struct {
	t     *testing.T
	mem   *vfs.MemFS
	hold  *walHold
	clock *clock.Fake
	eng   *Engine
	fatal atomic.Int32
	// rows: writes go through MutateRows (MutateRowsFrom, the server's
	// MutateRow path) rather than MutateRow.
	rows bool
}

func newGateRig(t *testing.T) *gateRig {
	r := &gateRig{t: t, mem: vfs.NewCrashableMem(), hold: newWALHold(), clock: clock.NewFake(time.Unix(1_700_000_000, 0))}
	r.open(errorfs.Wrap(r.mem, r.hold))
	if _, err := r.eng.CreateTable("i", "t", TableSpec{Families: []FamilySpec{{Name: "cf", GC: gcrule.None()}}}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *gateRig) open(fs vfs.FS) {
	r.t.Helper()
	eng, err := Open(WithFS(Options{Dir: "/data", Clock: r.clock,
		Logger:  slog.New(slog.DiscardHandler),
		OnFatal: func(error) { r.fatal.Add(1) }}, fs))
	if err != nil {
		r.t.Fatal(err)
	}
	r.eng = eng
	r.t.Cleanup(func() { eng.Close() })
}

func (r *gateRig) set(row, val string) error {
	return r.setAt(row, val, 1000)
}

// setAt writes row's cell at timestamp ts: a new cell unless one is there.
func (r *gateRig) setAt(row, val string, ts int64) error {
	muts := []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: ts, Value: []byte(val)}}
	if r.rows {
		errs, err := r.eng.MutateRows("i", "t", []RowMutation{{Row: []byte(row), Mutations: muts}})
		if err == nil {
			err = errs[0]
		}
		return err
	}
	return r.eng.MutateRow("i", "t", []byte(row), muts)
}

// read returns the value of row's cell, "" for none.
func (r *gateRig) read(req ReadRequest) (string, error) {
	var got string
	err := r.eng.ReadRows(context.Background(), "i", "t", req, func(row cell.Row) error {
		got = string(row.Cells[0].Value)
		return nil
	})
	return got, err
}

// readAsync starts a read of req and returns the channel its answer comes
// on (an error fails the test).
func (r *gateRig) readAsync(t *testing.T, req ReadRequest) <-chan string {
	read := make(chan string, 1)
	go func() {
		v, err := r.read(req)
		if err != nil {
			t.Error(err)
		}
		read <- v
	}()
	return read
}

// readWaitsForRelease checks that a read of req does not answer while
// write's sync is held (for 100 ms), and that once the sync is released
// the write succeeds and the read answers want.
func (r *gateRig) readWaitsForRelease(t *testing.T, req ReadRequest, write <-chan error, want, what string) {
	t.Helper()
	read := r.readAsync(t, req)
	select {
	case v := <-read:
		t.Fatalf("%s: the read returned %q while the write's sync was held", what, v)
	case <-time.After(100 * time.Millisecond):
	}
	r.hold.release <- nil
	if err := <-write; err != nil {
		t.Fatal(err)
	}
	if v := <-read; v != want {
		t.Fatalf("%s: read %q, want %q", what, v, want)
	}
}

// heldWrite starts a write of row=val whose WAL sync is held, and returns
// once the write is applied (visible to Pebble readers) and its sync held.
// It writes at timestamp 1000 (replacing a cell set there).
func (r *gateRig) heldWrite(row, val string) <-chan error {
	return r.heldWriteAt(row, val, 1000)
}

// heldWriteAt is heldWrite at timestamp ts.
func (r *gateRig) heldWriteAt(row, val string, ts int64) <-chan error {
	return r.heldWriteBy(row, val, func() error { return r.setAt(row, val, ts) })
}

// heldWriteBy starts write, whose WAL sync is held, and returns once the
// write is applied (Pebble shows val in row) and its sync held.
func (r *gateRig) heldWriteBy(row, val string, write func() error) <-chan error {
	r.hold.armed.Store(true)
	// A test that fails while the sync is held must still let it go, or
	// closing the engine would wait for the write forever.
	r.t.Cleanup(func() {
		select {
		case r.hold.release <- nil:
		default:
		}
	})
	done := make(chan error, 1)
	go func() { done <- write() }()
	select {
	case <-r.hold.held:
	case <-time.After(10 * time.Second):
		r.t.Fatal("the write's WAL sync never came")
	}
	// The WAL may start its sync before the batch reaches the memtable:
	// wait until Pebble itself (below the gate) shows the row.
	m, err := r.eng.Table("i", "t")
	if err != nil {
		r.t.Fatal(err)
	}
	prefix := storage.RowPrefix(m.ID, []byte(row))
	for deadline := time.Now().Add(10 * time.Second); ; {
		it, err := r.eng.store.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
		if err != nil {
			r.t.Fatal(err)
		}
		found := false
		for ok := it.First(); ok; ok = it.Next() {
			if bytes.Contains(it.Value(), []byte(val)) {
				found = true
			}
		}
		it.Close()
		if found {
			return done
		}
		if time.Now().After(deadline) {
			r.t.Fatal("the held write never became visible in Pebble")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReadWaitsForSync: a read that could return a write still waiting for
// its sync waits for it; when the sync then fails, neither the reader nor
// anyone after sees the write — not before the restart, not after it. The
// write replaces a cell (same timestamp) or, in the "sync succeeds" cases,
// writes the row's first cell: a point read, which skips a write of new
// cells in flight (TestPointReadSkipsNewCells), is not among those.
func TestReadWaitsForSync(t *testing.T) {
	reads := map[string]ReadRequest{
		"point": {Keys: [][]byte{[]byte("r1")}},
		"range": {Ranges: []RowRange{{Start: []byte("r0"), End: []byte("r9")}}},
		"table": {},
	}
	for name, req := range reads {
		t.Run(name+"/sync fails", func(t *testing.T) {
			r := newGateRig(t)
			if err := r.set("r1", "old"); err != nil {
				t.Fatal(err)
			}
			write := r.heldWrite("r1", "new")
			type result struct {
				v   string
				err error
			}
			read := make(chan result, 1)
			go func() {
				v, err := r.read(req)
				read <- result{v, err}
			}()
			select {
			case res := <-read:
				t.Fatalf("the read returned %q, %v while the write's sync was held", res.v, res.err)
			case <-time.After(100 * time.Millisecond):
			}
			r.hold.release <- errors.New("injected sync failure")
			if err := <-write; !errors.Is(err, ErrStorageFailed) {
				t.Fatalf("write: %v, want ErrStorageFailed", err)
			}
			if res := <-read; !errors.Is(res.err, ErrStorageFailed) || res.v != "" {
				t.Fatalf("read: %q, %v; want ErrStorageFailed and nothing", res.v, res.err)
			}
			if _, err := r.read(req); !errors.Is(err, ErrStorageFailed) {
				t.Fatalf("a later read: %v, want ErrStorageFailed", err)
			}
			if err := r.set("r2", "x"); !errors.Is(err, ErrStorageFailed) {
				t.Fatalf("a later write: %v, want ErrStorageFailed", err)
			}
			if n := r.fatal.Load(); n != 1 {
				t.Fatalf("OnFatal called %d times, want 1", n)
			}
			// Power loss now: what was synced survives, the failed write
			// does not.
			r.open(r.mem.CrashClone(vfs.CrashCloneCfg{}))
			if v, err := r.read(req); err != nil || v != "old" {
				t.Fatalf("after restart: %q, %v; want old", v, err)
			}
		})
		t.Run(name+"/sync succeeds", func(t *testing.T) {
			if name == "point" {
				t.Skip("a point read skips the new cell: TestPointReadSkipsNewCells")
			}
			r := newGateRig(t)
			write := r.heldWrite("r1", "new")
			r.readWaitsForRelease(t, req, write, "new", "a write in flight")
		})
	}
}

// TestReadOfOtherRowsDoesNotWait: a point read of a row no write in flight
// touches answers at once.
func TestReadOfOtherRowsDoesNotWait(t *testing.T) {
	r := newGateRig(t)
	if err := r.set("other", "v"); err != nil {
		t.Fatal(err)
	}
	if r.eng.stripe(1, []byte("other")) == r.eng.stripe(1, []byte("r1")) {
		t.Skip("the two rows share a lock stripe with this seed")
	}
	write := r.heldWrite("r1", "new")
	if v, err := r.read(ReadRequest{Keys: [][]byte{[]byte("other")}}); err != nil || v != "v" {
		t.Fatalf("read: %q, %v", v, err)
	}
	r.hold.release <- nil
	if err := <-write; err != nil {
		t.Fatal(err)
	}
}

// TestCheckAndMutateWaitsForSync: a CheckAndMutate that writes nothing
// answers from what it read, so it waits too.
func TestCheckAndMutateWaitsForSync(t *testing.T) {
	r := newGateRig(t)
	write := r.heldWrite("r1", "new")
	var wg sync.WaitGroup
	wg.Add(1)
	var matched bool
	var err error
	go func() {
		defer wg.Done()
		matched, err = r.eng.CheckAndMutate("i", "t", []byte("r1"), nil, nil, nil)
	}()
	time.Sleep(100 * time.Millisecond)
	r.hold.release <- errors.New("injected sync failure")
	<-write
	wg.Wait()
	if !errors.Is(err, ErrStorageFailed) {
		t.Fatalf("CheckAndMutate: matched %v, %v; want ErrStorageFailed", matched, err)
	}
}

// TestFailedEngineCloses: a failed engine closes without hanging.
func TestFailedEngineCloses(t *testing.T) {
	r := newGateRig(t)
	write := r.heldWrite("r1", "new")
	r.hold.release <- errors.New("injected sync failure")
	<-write
	done := make(chan error, 1)
	go func() { done <- r.eng.Close() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung on a failed engine")
	}
}

// TestPointReadSkipsNewCells: a point read does not wait for a write in
// flight that only puts new cells: it answers at once with the row as it
// was before the write (the durable frontier). Once the sync succeeds the
// write is seen; when it fails, the write is never seen, not after a
// restart either. A write replacing a cell is waited for instead (the
// skipped key would hide the replaced cell too).
func TestPointReadSkipsNewCells(t *testing.T) {
	point := ReadRequest{Keys: [][]byte{[]byte("r1")}}
	for _, fails := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync fails=%v", fails), func(t *testing.T) {
			r := newGateRig(t)
			if err := r.setAt("r1", "old", 1000); err != nil {
				t.Fatal(err)
			}
			write := r.heldWriteAt("r1", "new", 2000)
			m, err := r.eng.Table("i", "t")
			if err != nil {
				t.Fatal(err)
			}
			if !r.eng.RowPending(m.ID, []byte("r1"), storage.RowPrefix(m.ID, []byte("r1"))) {
				t.Error("RowPending is false while the new cell's sync is held")
			}
			// The newest version read is the old one: the new cell is
			// skipped, not waited for.
			type result struct {
				v   string
				err error
			}
			pr := make(chan result, 1)
			go func() {
				v, err := r.read(point)
				pr <- result{v, err}
			}()
			select {
			case res := <-pr:
				if res.err != nil || res.v != "old" {
					t.Fatalf("point read while the write is held: %q, %v; want old", res.v, res.err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the point read waited for the write of a new cell")
			}
			// A range read still waits (a row missing from a range may be
			// one an unsynced write deleted: it waits for any write).
			rng := make(chan error, 1)
			go func() {
				_, err := r.read(ReadRequest{Ranges: []RowRange{{Start: []byte("r0"), End: []byte("r9")}}})
				rng <- err
			}()
			select {
			case err := <-rng:
				t.Fatalf("the range read returned (%v) while the write's sync was held", err)
			case <-time.After(100 * time.Millisecond):
			}
			if fails {
				r.hold.release <- errors.New("injected sync failure")
				if err := <-write; !errors.Is(err, ErrStorageFailed) {
					t.Fatalf("write: %v, want ErrStorageFailed", err)
				}
				if err := <-rng; !errors.Is(err, ErrStorageFailed) {
					t.Fatalf("range read: %v, want ErrStorageFailed", err)
				}
				if _, err := r.read(point); !errors.Is(err, ErrStorageFailed) {
					t.Fatalf("a later read: %v, want ErrStorageFailed", err)
				}
				r.open(r.mem.CrashClone(vfs.CrashCloneCfg{}))
				if v, err := r.read(point); err != nil || v != "old" {
					t.Fatalf("after restart: %q, %v; want old", v, err)
				}
				return
			}
			r.hold.release <- nil
			if err := <-write; err != nil {
				t.Fatal(err)
			}
			if err := <-rng; err != nil {
				t.Fatal(err)
			}
			if v, err := r.read(point); err != nil || v != "new" {
				t.Fatalf("point read after the write: %q, %v; want new", v, err)
			}
			if r.eng.RowPending(m.ID, []byte("r1"), storage.RowPrefix(m.ID, []byte("r1"))) {
				t.Error("RowPending is true after the write returned")
			}
		})
	}
	t.Run("replacing a cell waits", func(t *testing.T) {
		r := newGateRig(t)
		if err := r.setAt("r1", "old", 1000); err != nil {
			t.Fatal(err)
		}
		write := r.heldWriteAt("r1", "new", 1000)
		r.readWaitsForRelease(t, point, write, "new", "a replacing write")
	})
}

// TestAnswersOnSkippedWritesWait: a CheckAndMutate or ReadModifyWrite that
// read a write of new cells still in flight answers from it, so it returns
// only once point reads see that write too, even when its own write is
// durable first. A write is held here after its sync returned, before its
// ticket is given back: the window in which reads still skip it.
func TestAnswersOnSkippedWritesWait(t *testing.T) {
	// Each call answers from the held cell; want is the newest cell of
	// column q after it.
	wants := map[string]string{"CheckAndMutate": "new", "ReadModifyWrite": "new+"}
	calls := map[string]func(e *Engine) error{
		"CheckAndMutate": func(e *Engine) error {
			// Matched on the held cell: sets another column.
			pred := filterFunc(func(row cell.Row) cell.Row { return row })
			matched, err := e.CheckAndMutate("i", "t", []byte("r1"), pred,
				[]Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte("other"), Timestamp: 3000, Value: []byte("x")}}, nil)
			if err == nil && !matched {
				err = errors.New("the predicate did not match the held cell")
			}
			return err
		},
		"ReadModifyWrite": func(e *Engine) error {
			out, err := e.ReadModifyWrite("i", "t", []byte("r1"), []RMWRule{{Family: "cf", Qualifier: []byte("q"), Append: []byte("+"), IsAppend: true}})
			if err == nil && (len(out.Cells) != 1 || string(out.Cells[0].Value) != "new+") {
				err = fmt.Errorf("ReadModifyWrite wrote %v, want new+", out.Cells)
			}
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			r := newGateRig(t)
			var held atomic.Bool
			hold, release := make(chan struct{}), make(chan struct{})
			r.eng.afterSync = func() {
				if held.CompareAndSwap(false, true) {
					close(hold)
					<-release
				}
			}
			t.Cleanup(func() {
				select {
				case <-release:
				default:
					close(release)
				}
			})
			write := make(chan error, 1)
			go func() { write <- r.setAt("r1", "new", 2000) }()
			<-hold
			point := ReadRequest{Keys: [][]byte{[]byte("r1")}, Filter: filterFunc(func(row cell.Row) cell.Row {
				row.Cells = slices.DeleteFunc(row.Cells, func(c cell.Cell) bool { return string(c.Qualifier) != "q" })
				return row
			})}
			if v, err := r.read(point); err != nil || v != "" {
				t.Fatalf("point read while the write's ticket is held: %q, %v; want nothing (skipped)", v, err)
			}
			answered := make(chan error, 1)
			go func() { answered <- call(r.eng) }()
			select {
			case err := <-answered:
				v, rerr := r.read(point)
				t.Fatalf("%s returned (%v) while a read still skips the write it read (read %q, %v)", name, err, v, rerr)
			case <-time.After(200 * time.Millisecond):
			}
			close(release)
			if err := <-write; err != nil {
				t.Fatal(err)
			}
			if err := <-answered; err != nil {
				t.Fatal(err)
			}
			if v, err := r.read(point); err != nil || v != wants[name] {
				t.Fatalf("point read: %q, %v; want %s", v, err, wants[name])
			}
		})
	}
}

// filterFunc is a RowFilter from a function.
type filterFunc func(cell.Row) cell.Row

func (f filterFunc) Apply(r cell.Row) cell.Row { return f(r) }

// TestRememberedColumnForgetsRepairedCells: a write knows it puts a new
// cell from what it remembers of its column's newest version; a cell that
// came another way (here a repaired one, newer than any remembered) makes
// it look again, so a write replacing that cell is waited for rather than
// skipped (skipping it would hide the repaired cell as well).
func TestRememberedColumnForgetsRepairedCells(t *testing.T) {
	r := newGateRig(t)
	if err := r.setAt("r1", "old", 1000); err != nil { // remembered: 1000
		t.Fatal(err)
	}
	m, err := r.eng.Table("i", "t")
	if err != nil {
		t.Fatal(err)
	}
	wrote, err := r.eng.RepairCell(m, RawCell{Row: []byte("r1"), Family: "cf", Qualifier: []byte("q"), Timestamp: 5000,
		Value: []byte("repaired"), Stamp: storage.Stamp{Commit: 1, Cluster: "peer"}})
	if err != nil || !wrote {
		t.Fatalf("RepairCell: %v, %v", wrote, err)
	}
	point := ReadRequest{Keys: [][]byte{[]byte("r1")}}
	if v, err := r.read(point); err != nil || v != "repaired" {
		t.Fatalf("read %q, %v; want repaired", v, err)
	}
	write := r.heldWriteAt("r1", "new", 5000)
	r.readWaitsForRelease(t, point, write, "new", "a write replacing the repaired cell")
}

// TestSyncWindowCountsBulkCommits: a commit through the engine counts
// towards the sync window while its sync is awaited when its batch is bulk
// (bulkCommitBytes or more), not when it is a small single-row write.
func TestSyncWindowCountsBulkCommits(t *testing.T) {
	r := newGateRig(t)
	var seen atomic.Int64
	r.eng.afterSync = func() { seen.Store(r.eng.dur.bulkInflight.Load()) }
	if err := r.set("small", "v"); err != nil {
		t.Fatal(err)
	}
	if got := seen.Load(); got != 0 {
		t.Fatalf("a small write awaiting its sync counts %d bulk commits in flight, want 0", got)
	}
	if err := r.set("big", strings.Repeat("v", bulkCommitBytes)); err != nil {
		t.Fatal(err)
	}
	if got := seen.Load(); got != 1 {
		t.Fatalf("a bulk write awaiting its sync counts %d bulk commits in flight, want 1", got)
	}
	if got := r.eng.dur.bulkInflight.Load(); got != 0 {
		t.Fatalf("%d bulk commits in flight after the writes returned, want 0", got)
	}
}

// TestSyncWindow: the WAL's next sync waits for the group window only while
// several bulk commits are in flight; a lone writer never waits, nor do any
// number of small commits (single-row writes).
func TestSyncWindow(t *testing.T) {
	d := newDurability()
	var ts []commitTicket
	for i := range 100 {
		tk := d.begin(0, []int{i}, false)
		d.sized(&tk, bulkCommitBytes-1)
		ts = append(ts, tk)
	}
	if got := d.walSyncWait(); got != 0 {
		t.Fatalf("with %d small commits in flight the next sync waits %v, want 0", len(ts), got)
	}
	var bulk []commitTicket
	for i := range syncWindowWriters {
		if got := d.walSyncWait(); got != 0 {
			t.Fatalf("with %d bulk commits in flight the next sync waits %v, want 0", i, got)
		}
		tk := d.begin(0, []int{i}, false)
		d.sized(&tk, bulkCommitBytes)
		d.sized(&tk, bulkCommitBytes) // counted once
		bulk = append(bulk, tk)
	}
	if got, want := d.walSyncWait(), time.Duration(len(bulk))*syncWindowPer; got != want {
		t.Fatalf("with %d bulk commits in flight the next sync waits %v, want %v", len(bulk), got, want)
	}
	for i := range 100 {
		tk := d.begin(0, []int{i}, false)
		d.sized(&tk, 1<<20)
		bulk = append(bulk, tk)
	}
	if got := d.walSyncWait(); got != syncWindow {
		t.Fatalf("with %d bulk commits in flight the next sync waits %v, want the cap %v", len(bulk), got, syncWindow)
	}
	for _, tk := range bulk {
		d.end(tk)
	}
	if got := d.walSyncWait(); got != 0 {
		t.Fatalf("with only small commits in flight the next sync waits %v", got)
	}
	for _, tk := range ts {
		d.end(tk)
	}
	if got := d.walSyncWait(); got != 0 {
		t.Fatalf("with no commit in flight the next sync waits %v", got)
	}
}

// TestDurabilityNotify: a wait blocked on a ticket returns once the ticket
// is given back (or the engine fails), and a commit that no read waits on
// makes no notify channel.
func TestDurabilityNotify(t *testing.T) {
	d := newDurability()
	for i := range 3 {
		d.end(d.begin(0, []int{i}, false))
	}
	d.mu.Lock()
	made := d.notify != nil
	d.mu.Unlock()
	if made {
		t.Fatal("commits that no read waited on made a notify channel")
	}
	for _, fail := range []bool{false, true} {
		tk := d.begin(0, []int{0}, false)
		done := make(chan error, 1)
		go func() { done <- d.wait(context.Background(), tk.n) }()
		for deadline := time.Now().Add(30 * time.Second); ; { // until the wait blocks on the channel
			d.mu.Lock()
			waiting := d.notify != nil
			d.mu.Unlock()
			if waiting {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("fail %v: the wait made no channel to block on", fail)
			}
			runtime.Gosched()
		}
		failure := errors.New("planted failure")
		if fail {
			d.fail(failure)
		} else {
			d.end(tk)
		}
		select {
		case err := <-done:
			if want := map[bool]error{false: nil, true: failure}[fail]; err != want {
				t.Fatalf("fail %v: the wait returned %v, want %v", fail, err, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("fail %v: the wait did not return once its ticket was given back", fail)
		}
	}
}

// TestDurabilityWakesLateWaiters: waits that begin while their ticket is
// being given back — before end, during it, or after — all return, none
// before end began, none blocked on a channel no one closes: a wait that
// slips in while end runs must either find the ticket gone or block on the
// channel end closes. Each round takes a ticket, which the waiters start
// waiting for at once, and gives it back after 0 to 7 yields, so that over
// many rounds some waits land inside end; a round ends when every waiter
// has seen its ticket given back. Under -race, an access to notify outside
// the lock is also reported.
func TestDurabilityWakesLateWaiters(t *testing.T) {
	const rounds, waiters = 40000, 4
	d := newDurability()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		current atomic.Uint64 // the round's ticket
		ending  atomic.Uint64 // the last ticket end began for
		done    = make(chan error, waiters)
	)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for range waiters {
		wg.Go(func() {
			var last uint64
			for ctx.Err() == nil {
				n := current.Load()
				if n == last {
					runtime.Gosched()
					continue
				}
				err := d.wait(ctx, n)
				if err == nil && ending.Load() < n {
					err = fmt.Errorf("the wait for ticket %d returned before it was given back", n)
				}
				if err != nil && ctx.Err() != nil {
					return
				}
				last = n
				done <- err
			}
		})
	}
	for round := range rounds {
		tk := d.begin(0, []int{0}, false)
		current.Store(tk.n)
		for range round % 8 { // end at different points of the waits
			runtime.Gosched()
		}
		ending.Store(tk.n)
		d.end(tk)
		deadline := time.After(10 * time.Second)
		for range waiters {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			case <-deadline:
				t.Fatalf("round %d: a wait did not return once its ticket was given back", round)
			}
		}
	}
}
