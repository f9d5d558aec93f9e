package table

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
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
	eng   *Engine
	fatal atomic.Int32
}

func newGateRig(t *testing.T) *gateRig {
	r := &gateRig{t: t, mem: vfs.NewCrashableMem(), hold: newWALHold()}
	r.open(errorfs.Wrap(r.mem, r.hold))
	if _, err := r.eng.CreateTable("i", "t", TableSpec{Families: []FamilySpec{{Name: "cf", GC: gcrule.None()}}}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *gateRig) open(fs vfs.FS) {
	r.t.Helper()
	eng, err := Open(WithFS(Options{Dir: "/data", Clock: clock.NewFake(time.Unix(1_700_000_000, 0)),
		Logger:  slog.New(slog.DiscardHandler),
		OnFatal: func(error) { r.fatal.Add(1) }}, fs))
	if err != nil {
		r.t.Fatal(err)
	}
	r.eng = eng
	r.t.Cleanup(func() { eng.Close() })
}

func (r *gateRig) set(row, val string) error {
	return r.eng.MutateRow("i", "t", []byte(row), []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte(val)}})
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

// heldWrite starts a write of row=val whose WAL sync is held, and returns
// once the write is applied (visible to Pebble readers) and its sync held.
func (r *gateRig) heldWrite(row, val string) <-chan error {
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
	go func() { done <- r.set(row, val) }()
	select {
	case <-r.hold.held:
	case <-time.After(10 * time.Second):
		r.t.Fatal("the write's WAL sync never came")
	}
	return done
}

// TestReadWaitsForSync: a read that could return a write still waiting for
// its sync waits for it; when the sync then fails, neither the reader nor
// anyone after sees the write — not before the restart, not after it.
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
			r := newGateRig(t)
			write := r.heldWrite("r1", "new")
			read := make(chan string, 1)
			go func() {
				v, err := r.read(req)
				if err != nil {
					t.Error(err)
				}
				read <- v
			}()
			select {
			case v := <-read:
				t.Fatalf("the read returned %q while the write's sync was held", v)
			case <-time.After(100 * time.Millisecond):
			}
			r.hold.release <- nil
			if err := <-write; err != nil {
				t.Fatal(err)
			}
			if v := <-read; v != "new" {
				t.Fatalf("read %q, want new", v)
			}
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
