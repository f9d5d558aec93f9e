package table_test

// Power loss and I/O errors under the model test. TestModelFaults runs the
// random operations of TestModel on an in-memory filesystem
// (vfs.NewCrashableMem) wrapped in Pebble's errorfs, and now and then:
//
//   - loses power: the filesystem is cloned keeping everything synced and a
//     random share of what was not (CrashClone), the engine reopens on the
//     clone, and every acknowledged write must still be there;
//   - fails file reads at random while one engine call runs: the call may
//     fail, but a read never returns a wrong result and a write that failed
//     changes nothing;
//   - fails the WAL's writes or syncs during one write: that write must
//     fail, the engine must stop serving (table.ErrStorageFailed, OnFatal),
//     the write must never show, before or after the restart that follows;
//   - with -model.openerrors, fails reads while the engine opens after a
//     power loss: the open may fail, but never drops what it could not read.
//
// The model stays as it is across a crash, with one exception: in the
// default visibility mode the collector does not sync the deletion of a cell
// whose eligibility only grows with time (age, TTL: readers never see it, and
// the next pass redoes a lost deletion), so such a collected cell may come
// back after a crash. It is taken back into the model only if it does not
// change what readers see. In until-collected mode a pass syncs its
// deletions, so a collected cell that comes back is a failure. Even seeds
// run in until-collected mode, odd ones in the default mode.
//
//	go test ./table -run 'TestModelFaults$' -v                      # short: seeds 1-2
//	go test ./table -run 'TestModelFaults$' -v -timeout 0 -model.seeds=200 -model.ops=20000
//
// A replay line is printed on failure; Pebble's background flushes and
// compactions make a faulty run less exactly repeatable than TestModel's.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/table"
)

// Off by default: when pebble.Open (v2.1.7) fails after it has flushed the
// replayed WAL, it neither unregisters from its compaction scheduler (a
// goroutine leaks, which TestMain's leak check reports) nor waits for the
// table-statistics job the flush started, which then panics on the closed
// file cache (integer divide by zero in fileCacheKey.Shard).
var modelOpenErrorsFlag = flag.Bool("model.openerrors", false, "TestModelFaults: also fail reads while the engine opens after a power loss")

// The chances of the faults, per operation.
const (
	modelCrashPer1000   = 5    // power loss: about every 200 operations
	modelWALFailPer     = 150  // one write in 150 meets a WAL error
	modelReadErrPerRead = 3    // one read in 3 runs with read errors on
	modelReadErrPerOp   = 10   // one write in 10 runs with read errors on
	modelReadErrRate    = 0.2  // share of file reads that fail while on
	modelOpenErrRate    = 0.01 // the same while an open recovers: it reads many files
)

// WAL error modes.
const (
	walOff int32 = iota
	walWrite
	walSync
)

var walModeName = [...]string{"off", "write", "sync"}

type modelFaults struct {
	mem *vfs.MemFS

	reads     *errorfs.Toggle  // fails a share of file reads while on
	readCount *errorfs.Counter // inside reads: counts what it failed
	openReads *errorfs.Toggle  // the same at modelOpenErrRate, for opens
	wal       atomic.Int32     // a WAL error mode, while one write runs
	walFired  atomic.Uint64
	lastWAL   int32 // the mode of the last armed call

	base     modelShot             // counts when the current call began
	openBase modelShot             // counts when the engine opened
	fatal    atomic.Pointer[error] // what OnFatal was called with

	stats modelFaultStats
}

// modelShot counts injected errors.
type modelShot struct{ reads, wal uint64 }

type modelFaultStats struct {
	ops, crashes, walFailures, readsArmed, failedByReads, lateReadErrors, failStops, collectedBack, expiredLeft int
	opensArmed, opensFailed                                                                                     int
}

func (s *modelFaultStats) add(o modelFaultStats) {
	s.ops += o.ops
	s.crashes += o.crashes
	s.walFailures += o.walFailures
	s.readsArmed += o.readsArmed
	s.failedByReads += o.failedByReads
	s.lateReadErrors += o.lateReadErrors
	s.failStops += o.failStops
	s.collectedBack += o.collectedBack
	s.expiredLeft += o.expiredLeft
	s.opensArmed += o.opensArmed
	s.opensFailed += o.opensFailed
}

func (s modelFaultStats) String() string {
	return fmt.Sprintf("%d ops, %d power losses, %d writes failed by WAL errors (each a fail-stop and restart), "+
		"%d calls with read errors on, %d of them failed, %d calls failed by a read error injected earlier, %d fail-stops after read errors, "+
		"%d collected cells came back (hidden), %d expired cells a collection left stored, %d opens with read errors on, %d of them failed",
		s.ops, s.crashes, s.walFailures, s.readsArmed, s.failedByReads, s.lateReadErrors, s.failStops, s.collectedBack, s.expiredLeft,
		s.opensArmed, s.opensFailed)
}

// setUp prepares r to run on a fresh in-memory filesystem.
func (f *modelFaults) setUp(r *modelRun) {
	r.dir = "/ebb"
	f.mem = vfs.NewCrashableMem()
	f.readCount = &errorfs.Counter{Injector: errorfs.ErrInjected.If(errorfs.And(errorfs.Reads, errorfs.Randomly(modelReadErrRate, int64(r.seed))))}
	f.reads = &errorfs.Toggle{Injector: f.readCount}
	f.openReads = &errorfs.Toggle{Injector: errorfs.ErrInjected.If(errorfs.And(errorfs.Reads, errorfs.Randomly(modelOpenErrRate, int64(r.seed))))}
	r.ref.untilCollected = r.seed%2 == 0
	r.ref.collected = map[refKey]refCell{}
}

// options opens the engine on the current filesystem, through the injectors.
func (f *modelFaults) options(opts table.Options) table.Options {
	opts.CacheBytes = 256 << 10 // small, so that reads reach the files
	// The fake clock jumps hours between operations; stalls are not what
	// this test looks for, and an in-memory filesystem never stalls.
	opts.MaxSyncDuration = -1
	opts.OnFatal = func(err error) { f.fatal.Store(&err) }
	f.fatal.Store(nil)
	f.openBase = f.counts()
	inj := errorfs.Any(f.reads, f.openReads, errorfs.InjectorFunc(f.walError))
	return table.WithFS(opts, errorfs.Wrap(f.mem, inj))
}

func (f *modelFaults) walError(op errorfs.Op) error {
	mode := f.wal.Load()
	if mode == walOff || !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt:
		if mode != walWrite {
			return nil
		}
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		if mode != walSync {
			return nil
		}
	default:
		return nil
	}
	f.walFired.Add(1)
	return errorfs.ErrInjected
}

func (f *modelFaults) counts() modelShot {
	return modelShot{reads: f.readCount.Load(), wal: f.walFired.Load()}
}

// faultsOn arms, by chance, faults for the engine call that follows: WAL
// errors (writes only) or read errors.
func (r *modelRun) faultsOn(write bool) {
	f := r.f
	if f == nil {
		return
	}
	f.base = f.counts()
	f.lastWAL = walOff
	readChance := modelReadErrPerRead
	if write {
		readChance = modelReadErrPerOp
		if r.rng.IntN(modelWALFailPer) == 0 {
			f.lastWAL = walWrite + int32(r.rng.IntN(2))
			r.logf("  (WAL %s errors on)", walModeName[f.lastWAL])
			f.wal.Store(f.lastWAL)
			return
		}
	}
	if r.rng.IntN(readChance) == 0 {
		f.stats.readsArmed++
		r.logf("  (read errors on)")
		f.reads.On()
	}
}

// faultsOff disarms the faults and says which fired during the call.
func (r *modelRun) faultsOff() modelShot {
	f := r.f
	if f == nil {
		return modelShot{}
	}
	f.reads.Off()
	f.wal.Store(walOff)
	c := f.counts()
	return modelShot{reads: c.reads - f.base.reads, wal: c.wal - f.base.wal}
}

// injected says whether err comes from an injected fault (errorfs's
// labelled error cannot be matched with errors.Is: it carries its
// predicate).
func injected(err error) bool {
	return err != nil && strings.Contains(err.Error(), errorfs.ErrInjected.Error())
}

// failedByFault judges the outcome of an engine call made under faultsOn:
// it returns true when the call failed because of an injected fault, after
// checking that nothing of it shows (rows: the rows it would have written)
// and restarting the engine where that is due. The caller then leaves the
// model as it is. It returns false for a call to judge as usual.
func (r *modelRun) failedByFault(what string, err error, shot modelShot, rows ...string) bool {
	r.t.Helper()
	f := r.f
	if f == nil {
		return false
	}
	switch {
	case shot.wal > 0:
		if err == nil {
			r.fatalf("%s succeeded though %d WAL %ss failed: an acknowledged write that is not durable", what, shot.wal, walModeName[f.lastWAL])
		}
		if !injected(err) && !errors.Is(err, table.ErrStorageFailed) {
			r.fatalf("%s under WAL %s errors: got %v, want the injected error or table.ErrStorageFailed", what, walModeName[f.lastWAL], err)
		}
		r.logf("  -> %v", err)
		f.stats.walFailures++
		r.afterWALFailure(what)
		return true
	case err == nil:
		return false
	case errors.Is(err, table.ErrStorageFailed) && (shot.reads > 0 || f.counts() != f.openBase):
		// Stopping on an I/O error is allowed; the call must not have
		// taken effect, which the restart checks.
		f.stats.failStops++
		r.logf("  -> %v; restart", err)
		r.crash("restart after a fail-stop", r.pickKeep())
		return true
	case injected(err) && (shot.reads > 0 || f.lateReadErrorsPossible()):
		if shot.reads > 0 {
			f.stats.failedByReads++
		} else {
			f.stats.lateReadErrors++
		}
		r.logf("  -> %v", err)
		for _, row := range rows {
			r.checkRead(table.ReadRequest{Keys: [][]byte{[]byte(row)}}) // nothing of it was written
		}
		return true
	case shot.reads > 0:
		r.fatalf("%s under read errors: got %v, want the injected error", what, err)
	}
	return false
}

// lateReadErrorsPossible says whether a read error injected earlier may
// still reach a call: a background job (a compaction, the table statistics)
// that met one while read errors were on hands it to the calls that share
// its read, such as the open of an SSTable in Pebble's file cache.
func (f *modelFaults) lateReadErrorsPossible() bool { return f.counts().reads > f.openBase.reads }

// retryLate runs fn, the engine call of a check (which runs without faults),
// again when it fails with a read error injected earlier (see
// lateReadErrorsPossible), a few times.
func (r *modelRun) retryLate(what string, fn func() error) error {
	for i := 0; ; i++ {
		err := fn()
		if err == nil || r.f == nil || i == 3 || !injected(err) || !r.f.lateReadErrorsPossible() {
			return err
		}
		r.f.stats.lateReadErrors++
		r.logf("  %s: %v (injected earlier); again", what, err)
	}
}

// afterWALFailure checks fail-stop after a write failed on a WAL error:
// the engine serves nothing more (reads included), has called OnFatal, and
// never shows the failed write; then it restarts the engine.
func (r *modelRun) afterWALFailure(what string) {
	r.t.Helper()
	f := r.f
	got, err := r.tryRead(table.ReadRequest{})
	if err == nil {
		r.same("read after "+what+" failed on a WAL error (the failed write must not show)", r.ref.read(table.ReadRequest{}, r.now()), got)
		r.fatalf("a read after %s failed on a WAL error succeeded; want table.ErrStorageFailed (fail-stop)", what)
	}
	if !errors.Is(err, table.ErrStorageFailed) {
		r.fatalf("a read after %s failed on a WAL error: got %v, want table.ErrStorageFailed", what, err)
	}
	probe := []table.Mutation{{Kind: table.SetCell, Family: r.fams[0], Qualifier: []byte("probe"), Timestamp: 1000, Value: []byte("probe")}}
	if err := r.eng.MutateRow(modelInstance, modelTable, []byte(r.pickRow()), probe); !errors.Is(err, table.ErrStorageFailed) {
		r.fatalf("a write after %s failed on a WAL error: got %v, want table.ErrStorageFailed", what, err)
	}
	if f.fatal.Load() == nil {
		r.fatalf("%s failed on a WAL error, but Options.OnFatal was not called", what)
	}
	// A failed sync leaves the write in the file's unsynced tail, where a
	// real disk may or may not have it after power loss; no engine can
	// then tell a write it refused from one it acknowledged. Power is lost
	// here right after the failure, dropping that tail, so the rule "a
	// failed write never shows" is tested where it can hold. A failed WAL
	// write never reached the file: any share of unsynced data may stay.
	keep := 0
	if f.lastWAL == walWrite {
		keep = r.pickKeep()
	}
	r.crash("restart after the WAL failure", keep)
}

// pickKeep picks the share of unsynced blocks a power loss keeps.
func (r *modelRun) pickKeep() int { return []int{0, 0, 10, 50, 90, 100}[r.rng.IntN(6)] }

// faultStep runs, by chance, a fault operation in place of a random one.
func (r *modelRun) faultStep() bool {
	switch x := r.rng.IntN(1000); {
	case x < modelCrashPer1000:
		r.crash("power loss", r.pickKeep())
	case x < modelCrashPer1000+2:
		// The collector's deletions are synced only by the next synced
		// write: lose power before one comes.
		r.opCollect()
		r.opAdvance()
		r.crash("power loss just after a collector pass", r.pickKeep())
	case x < modelCrashPer1000+12:
		r.logf("flush")
		if err := r.eng.Flush(); err != nil {
			r.fatalf("flush: %v", err)
		}
	default:
		return false
	}
	return true
}

// crash loses power: the engine reopens on a copy of the filesystem that
// keeps what was synced and keep% of the unsynced blocks, and must hold
// what the model holds.
func (r *modelRun) crash(why string, keep int) {
	r.t.Helper()
	f := r.f
	f.reads.Off()
	f.wal.Store(walOff)
	r.logf("%s: keep %d%% of unsynced blocks", why, keep)

	clone := f.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: keep, RNG: rand.New(rand.NewPCG(r.rng.Uint64(), 1))})
	// Nothing the old engine does from here on reaches the clone; it is
	// closed only to free it.
	func() {
		defer func() { _ = recover() }()
		_ = r.eng.Close()
	}()
	f.mem = clone
	f.stats.crashes++
	if r.rng.IntN(4) == 0 && *modelOpenErrorsFlag {
		// Recovery reads the WAL and the manifest: a read error must fail
		// the open, never drop what it could not read.
		r.logf("  open with read errors on")
		f.stats.opensArmed++
		f.openReads.On()
		err := r.tryOpen()
		f.openReads.Off()
		if err != nil {
			if !injected(err) {
				r.fatalf("open under read errors: got %v, want the injected error", err)
			}
			f.stats.opensFailed++
			r.logf("  -> %v", err)
			r.open()
		}
	} else {
		r.open()
	}
	r.reconcileCollected()
	r.checkAll("after " + why)
}

// checkCollected checks, after a collection, that the engine deleted what
// the model collected, so that a collected cell found after a crash is one
// the crash brought back. An expired cell is the exception: the collector
// finds those with a block-property filter on the cells' expiries, which
// never matches a block of an SSTable (Pebble passes no values to block
// property collectors for SET keys, so the property is always empty), so an
// expired cell that has reached an SSTable stays stored. It is hidden from
// readers forever either way; it is counted and dropped from the list.
func (r *modelRun) checkCollected(what string) {
	r.t.Helper()
	for k, c := range r.storedCollected() {
		coord := fmt.Sprintf("%q %s:%q@%s", k.row, k.fam, k.qual, r.fmtTS(k.ts))
		if c.ExpireAt == 0 || c.ExpireAt > r.now() {
			r.fatalf("after a %s the model collected %s, which the engine still stores (exp %d): a collection left an eligible cell", what, coord, c.ExpireAt)
		}
		r.f.stats.expiredLeft++
		r.logf("  expired cell left stored: %s", coord)
		delete(r.ref.collected, k)
	}
}

// storedCollected returns the cells the model collected (since the last
// crash), has not written again and the engine stores.
func (r *modelRun) storedCollected() map[refKey]table.RawCell {
	r.t.Helper()
	out := map[refKey]table.RawCell{}
	if len(r.ref.collected) == 0 {
		return out
	}
	m, err := r.eng.Table(modelInstance, modelTable)
	if err != nil {
		r.fatalf("table: %v", err)
	}
	err = r.retryLate("raw cells", func() error {
		clear(out)
		return r.eng.RawCells(m, nil, nil, func(c table.RawCell) error {
			k := refKey{string(c.Row), c.Family, string(c.Qualifier), c.Timestamp}
			if _, ok := r.ref.collected[k]; ok {
				if _, ok := r.ref.cells[k]; !ok {
					out[k] = c
				}
			}
			return nil
		})
	})
	if err != nil {
		r.fatalf("raw cells: %v", err)
	}
	return out
}

// reconcileCollected takes back into the model the cells it collected
// since the last crash that the crash brought back (see the top of the
// file), and clears the list.
func (r *modelRun) reconcileCollected() {
	r.t.Helper()
	defer clear(r.ref.collected)
	before := r.ref.rows(r.now())
	var back []string
	for k, rc := range r.storedCollected() {
		c := r.ref.collected[k]
		coord := fmt.Sprintf("%q %s:%q@%s", k.row, k.fam, k.qual, r.fmtTS(k.ts))
		if !bytes.Equal(rc.Value, c.val) || rc.ExpireAt != c.exp {
			r.fatalf("after power loss the store holds %s = %q (exp %d), which the model collected as %q (exp %d) and no acknowledged write set again", coord, rc.Value, rc.ExpireAt, c.val, c.exp)
		}
		if r.ref.untilCollected {
			r.fatalf("collected cell %s came back after power loss; in until-collected mode a collector pass syncs its deletions", coord)
		}
		r.ref.cells[k] = c
		back = append(back, coord)
	}
	if len(back) == 0 {
		return
	}
	slices.Sort(back)
	r.f.stats.collectedBack += len(back)
	r.logf("  %d collected cells came back: %s", len(back), strings.Join(back, ", "))
	r.same("collected cells came back after power loss and changed what readers see", before, r.ref.rows(r.now()))
}

// modelFaultTotals adds up the figures of every seed.
var modelFaultTotals struct {
	sync.Mutex
	modelFaultStats
	seeds int
}

func TestModelFaults(t *testing.T) {
	// Parallel: its engines and fault injectors are its own, and
	// TestModel's skip steps (a package variable) are restored before the
	// parallel tests start.
	t.Parallel()
	t.Cleanup(func() {
		modelFaultTotals.Lock()
		defer modelFaultTotals.Unlock()
		if modelFaultTotals.seeds == 0 {
			return
		}
		t.Logf("%d seeds: %s", modelFaultTotals.seeds, modelFaultTotals.modelFaultStats)
	})
	for _, seed := range modelSeeds(1, 2) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			f := &modelFaults{}
			r := newModelRunWith(t, seed, "TestModelFaults", f)
			defer r.recoverPanic()
			for r.op = 0; r.op < *modelOpsFlag; r.op++ {
				r.step()
			}
			r.op = *modelOpsFlag
			r.opCollect()
			r.crash("power loss at the end", r.pickKeep())
			f.stats.ops = *modelOpsFlag
			t.Logf("visibility %s: %s", map[bool]string{false: "hidden", true: "until-collected"}[r.ref.untilCollected], f.stats)
			modelFaultTotals.Lock()
			modelFaultTotals.add(f.stats)
			modelFaultTotals.seeds++
			modelFaultTotals.Unlock()
		})
	}
}

// TestModelRepro_CollectedVersionReturns is the regression test of a bug
// TestModelFaults found (seed 1): in the default visibility mode the
// collector did not sync its deletions, on the ground that readers never see
// an eligible cell anyway. But a version position counts only unexpired
// cells: once the newer version's native expiry passed, the collected older
// version was no longer eligible, readers had seen it gone, and a power loss
// before the next synced write brought it back.
func TestModelRepro_CollectedVersionReturns(t *testing.T) {
	clk := clock.NewFake(modelStart)
	mem := vfs.NewCrashableMem()
	open := func(fs vfs.FS) (*table.Engine, *collector.Collector) {
		eng, err := table.Open(table.WithFS(table.Options{Dir: "/ebb", Clock: clk, Logger: slog.New(slog.DiscardHandler)}, fs))
		if err != nil {
			t.Fatal(err)
		}
		gc, err := collector.New(eng, collector.Options{Clock: clk, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return eng, gc
	}
	eng, gc := open(mem)
	if _, err := eng.CreateTable("i", "t", table.TableSpec{Families: []table.FamilySpec{{Name: "f", GC: gcrule.MaxVersions(1)}}}); err != nil {
		t.Fatal(err)
	}
	now := modelStart.UnixMicro()
	muts := []table.Mutation{
		{Kind: table.SetCell, Family: "f", Qualifier: []byte("q"), Timestamp: now - 2000, Value: []byte("old")},
		{Kind: table.SetCell, Family: "f", Qualifier: []byte("q"), Timestamp: now - 1000, Value: []byte("new"), ExpireAt: now + time.Minute.Microseconds()},
	}
	if err := eng.MutateRow("i", "t", []byte("r"), muts); err != nil {
		t.Fatal(err)
	}
	values := func(eng *table.Engine) []string {
		var out []string
		err := eng.ReadRows(context.Background(), "i", "t", table.ReadRequest{}, func(r cell.Row) error {
			for _, c := range r.Cells {
				out = append(out, string(c.Value))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if _, err := gc.RunPass(context.Background(), collector.Selector{}); err != nil { // collects "old"
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute) // "new" expires
	if got := values(eng); len(got) != 0 {
		t.Fatalf("before power loss: got %q, want nothing (old collected, new expired)", got)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	eng.Close()
	eng, _ = open(crashed)
	defer eng.Close()
	if got := values(eng); len(got) != 0 {
		t.Fatalf("after power loss: got %q, want nothing: a collected cell readers saw gone came back", got)
	}
}
