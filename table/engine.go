package table

import (
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/bits"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/storage"
)

// Visibility says whether cells that a GC rule makes eligible stay readable
// until the collector removes them.
type Visibility int

const (
	// HideEligible never returns a cell its family's GC rule makes eligible,
	// even before collection. The default.
	HideEligible Visibility = iota
	// UntilCollected returns eligible cells until the collector removes them,
	// as the source system does.
	UntilCollected
)

// String names the mode as the serve flag spells it.
func (v Visibility) String() string {
	if v == UntilCollected {
		return "until-collected"
	}
	return "hidden"
}

// ParseVisibility reads a --gc-visibility value.
func ParseVisibility(s string) (Visibility, error) {
	switch s {
	case "", "hidden", "hide", "hide-eligible":
		return HideEligible, nil
	case "until-collected":
		return UntilCollected, nil
	}
	return 0, fmt.Errorf("%w: gc visibility %q (want hidden or until-collected)", ErrInvalid, s)
}

// Options configures an Engine.
type Options struct {
	// Dir is the data directory (created if missing). Required.
	Dir string
	// Clock tells the time; nil means the real clock.
	Clock clock.Clock
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Visibility of GC-eligible cells to readers.
	Visibility Visibility
	// CacheBytes is Pebble's block cache size; 0 means the storage default.
	CacheBytes int64
	// FullMemtable: storage.Options.FullMemtable.
	FullMemtable bool
	// OnFatal is called once, from whichever goroutine met it, with the
	// first storage error the engine cannot continue after: a WAL write or
	// sync that failed, a disk stall past MaxSyncDuration, corruption met in
	// the background. The engine has already stopped serving (every call
	// fails with ErrStorageFailed); the process should exit (fail-stop).
	// nil: the engine only stops serving.
	OnFatal func(error)
	// MaxSyncDuration is how long a WAL sync or any disk write may take
	// before the engine declares the disk stalled and fails; 0 means
	// DefaultMaxSyncDuration, negative disables the check.
	MaxSyncDuration time.Duration

	// Ballast sizes the emergency ballast that gives a full disk a way
	// back (see storage); zero: none.
	Ballast storage.Ballast

	// Shared, when set, keeps the lower levels' SSTables in a shared
	// object store, so that spans can move between engines by reference
	// (span.go, docs/scale-out.md); nil: all local, as always.
	Shared *storage.SharedOptions

	// UndeleteRetention is how long a deleted table stays restorable
	// (undelete.go); zero: deleted at once.
	UndeleteRetention time.Duration

	// fs, set by tests (WithFS in export_test.go), replaces the OS
	// filesystem under Pebble.
	fs vfs.FS
}

// EnsureDefaults fills unset options.
func (o *Options) EnsureDefaults() {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	if o.Dir == "" {
		return fmt.Errorf("%w: data directory is required", ErrInvalid)
	}
	if o.Visibility != HideEligible && o.Visibility != UntilCollected {
		return fmt.Errorf("%w: unknown visibility %d", ErrInvalid, o.Visibility)
	}
	return nil
}

// DefaultMaxSyncDuration is how long a WAL sync or a disk write may take
// before the engine fails stop, as CockroachDB's storage.max_sync_duration
// (20 s): long enough that a busy but healthy disk never trips it, short
// enough that a stalled disk stops the process before clients' deadlines
// pile up behind it.
const DefaultMaxSyncDuration = 20 * time.Second

const rowLockStripes = 1024

// Engine is the table engine over one Pebble database.
type Engine struct {
	store *storage.DB
	clock clock.Clock
	log   *slog.Logger
	vis   Visibility

	// cellsHint is the cell count (up to 64) of the row a scan last
	// emitted: how large the next row read starts its cell slice.
	cellsHint atomic.Int32

	// iters keeps finished point reads' iterators for the next ones
	// (readiter.go).
	iters iterPool

	// changeTiebreaker is the tiebreaker of this engine's change-stream
	// records (changecluster.go): 0 alone, the node's in a cluster.
	changeTiebreaker atomic.Int32

	mu          sync.RWMutex // guards tables and nextTableID, and serialises schema changes
	tables      map[string]*Meta
	nextTableID uint64
	// reserved holds the names of tables being restored: taken, but not
	// yet in tables.
	reserved map[string]bool

	schemaHook SchemaHook
	schemaGate SchemaGate
	rowExpiry  rowExpiryHook

	seq *commitSeq // change-stream commit timestamps
	// streams maps a table id to its *ChangeStream while it has one. Writers
	// consult it under their row locks; SetChangeStream changes it holding
	// every row lock, so each write is recorded exactly when it commits while
	// the stream is on. (A map writers read without e.mu: the schema hook
	// takes row locks under e.mu, so writers must never take e.mu under one.)
	streams sync.Map
	// beforeRecordedCommit, set by tests, runs between taking a commit
	// timestamp and committing: a slow commit.
	beforeRecordedCommit func([]changestream.Record)
	// newest is, per row-lock stripe, what writes remember of their
	// columns' newest versions (mutate.go); cellGen empties it.
	newest  [rowLockStripes]columnNewest
	cellGen atomic.Uint64
	// lookups says whether writes look up that their cells are new
	// (newcelllookup.go).
	lookups newCellLookups
	// afterSync, set by tests, runs once a synced commit's sync returned,
	// before its durability ticket is given back.
	afterSync func()
	// replCluster holds this cluster's id while the engine replicates (see
	// replica.go); writers read it under their row locks.
	replCluster atomic.Pointer[string]
	// gcGen counts, per table, arrivals of cells the GC agenda does not
	// announce (agenda.go).
	gcGen gcGens
	// agendaMarks remembers, per row-lock stripe, the last agenda entry a
	// write put, which the row's next writes may rely on (agendamarks.go).
	agendaMarks agendaMarks
	// pileHook receives rows reads found piling up hidden versions (piles.go).
	pileHook atomic.Pointer[pileHookBox]
	// hot remembers the columns whose hidden tails reads recently left
	// with a seek (read.go, skipColumn).
	hot hotColumns
	// moves counts span moves (span.go).
	moves moveCounters
	// clog, when set, receives batches of user writes first (commitlog.go).
	clog atomic.Pointer[commitLogBox]
	// instMeta is the in-memory copy of the instance metadata space
	// (instancecache.go).
	instMeta instCache

	seed     maphash.Seed
	rowLocks [rowLockStripes]sync.Mutex
	// closeMu is held shared by every running operation and exclusively
	// by Close, which so waits for them all.
	closeMu sync.RWMutex
	closed  atomic.Bool

	// views is the log of changed rows kept for materialized views (viewlog.go).
	views viewLog
	// dur keeps readers to what is durable (durable.go).
	dur *durability
	// undeleteRetention: see Options.UndeleteRetention.
	undeleteRetention time.Duration
	// failed holds the fatal storage error once the engine has met one
	// (fail-stop: every call then fails with ErrStorageFailed).
	failed  atomic.Pointer[error]
	onFatal func(error)
}

// Open opens the engine on opts.Dir.
func Open(opts Options) (*Engine, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.MaxSyncDuration == 0 {
		opts.MaxSyncDuration = DefaultMaxSyncDuration
	}
	var self atomic.Pointer[Engine]
	var early atomic.Pointer[error] // a fatal error before the engine exists
	dur := newDurability()
	st, err := storage.Open(storage.Options{Dir: opts.Dir, FS: opts.fs, Logger: opts.Logger, CacheBytes: opts.CacheBytes, FullMemtable: opts.FullMemtable,
		MaxSyncDuration: opts.MaxSyncDuration, Ballast: opts.Ballast, Shared: opts.Shared,
		WALMinSyncInterval: dur.walSyncWait,
		OnFatal: func(err error) {
			if e := self.Load(); e != nil {
				e.failedWith(err)
				return
			}
			early.Store(&err)
		}})
	if err != nil {
		return nil, err
	}
	tables, seq, err := loadCatalog(st)
	if err != nil {
		st.Close()
		return nil, err
	}
	last, err := lastCommit(st, tables)
	if err != nil {
		st.Close()
		return nil, err
	}
	e := &Engine{
		seq:         newCommitSeq(last),
		store:       st,
		clock:       opts.Clock,
		log:         opts.Logger,
		vis:         opts.Visibility,
		tables:      tables,
		nextTableID: seq + 1,
		reserved:    map[string]bool{},
		seed:        maphash.MakeSeed(),
		dur:         dur,
		onFatal:     opts.OnFatal,

		undeleteRetention: opts.UndeleteRetention,
	}
	e.iters.seq = visibleSeqNum(st.DB)
	self.Store(e)
	if p := early.Load(); p != nil {
		e.failedWith(*p)
	}
	for _, m := range tables {
		if m.ChangeStream != nil {
			e.streams.Store(m.ID, m.ChangeStream)
		}
	}
	if err := e.cleanRestores(); err != nil {
		st.Close()
		return nil, err
	}
	return e, nil
}

// Close flushes and closes the database. Calls after Close fail with ErrClosed.
func (e *Engine) Close() (err error) {
	if !e.closed.CompareAndSwap(false, true) {
		return nil
	}
	e.closeMu.Lock()
	defer e.closeMu.Unlock()
	if e.Err() != nil {
		// Pebble may panic closing a database whose commit pipeline
		// failed; the error that stopped the engine is the one to report.
		defer func() {
			if p := recover(); p != nil {
				err = e.Err()
			}
		}()
	}
	e.closeIters()
	return e.store.Close()
}

// lockAllRows takes every row lock, in stripe order.
func (e *Engine) lockAllRows() func() {
	for i := range e.rowLocks {
		e.rowLocks[i].Lock()
	}
	return func() {
		for i := range e.rowLocks {
			e.rowLocks[i].Unlock()
		}
	}
}

// Clock returns the engine's clock.
func (e *Engine) Clock() clock.Clock { return e.clock }

// Visibility returns the configured visibility mode.
func (e *Engine) Visibility() Visibility { return e.vis }

// nowMicros is the current time in microseconds.
func (e *Engine) nowMicros() int64 { return clock.Micros(e.clock.Now()) }

// LockRow locks one row of one table for a read-modify-write cycle and
// returns the unlock function.
func (e *Engine) LockRow(tableID uint64, row []byte) func() {
	m := &e.rowLocks[e.stripe(tableID, row)]
	m.Lock()
	return m.Unlock
}

// LockRows locks several rows of one table (in stripe order, so two callers
// never deadlock) and returns the unlock function.
func (e *Engine) LockRows(tableID uint64, rows [][]byte) func() {
	stripes := make([]int, 0, len(rows))
	for _, r := range rows {
		stripes = append(stripes, e.stripe(tableID, r))
	}
	return e.lockSorted(sortedStripes(stripes))
}

// lockStripes is LockRows for rows whose stripes are known, in any order
// and repeated: it sorts a copy in *buf (which the returned unlock uses,
// so *buf must be left alone until then).
func (e *Engine) lockStripes(stripes []int, buf *[]int) func() {
	*buf = sortedStripes(append((*buf)[:0], stripes...))
	return e.lockSorted(*buf)
}

// sortedStripes sorts stripes and drops repeats, in place. Many (a bulk
// write's, one a row) are sorted through a set of all the stripes: one
// pass to mark them, one over the set's 16 words to list them. For 100
// random stripes that is 0.4-0.65 us against sort.Ints' 4.1-4.9 (its
// compares mispredicted: BenchmarkSortedStripes).
func sortedStripes(stripes []int) []int {
	if len(stripes) < sortedStripesBySet {
		sort.Ints(stripes)
		return slices.Compact(stripes)
	}
	var set [rowLockStripes / 64]uint64 // rowLockStripes is a multiple of 64
	for _, s := range stripes {
		set[s/64] |= 1 << (s % 64)
	}
	out := stripes[:0]
	for w, word := range set {
		for word != 0 {
			out = append(out, w*64+bits.TrailingZeros64(word))
			word &= word - 1
		}
	}
	return out
}

// sortedStripesBySet is the fewest stripes sortedStripes sorts through a
// set rather than sort.Ints (for 8 the sort was faster, for 16 the set).
const sortedStripesBySet = 12

// lockSorted locks stripes, sorted and each once, in order.
func (e *Engine) lockSorted(stripes []int) func() {
	for _, s := range stripes {
		e.rowLocks[s].Lock()
	}
	return func() {
		for _, s := range stripes {
			e.rowLocks[s].Unlock()
		}
	}
}

func (e *Engine) stripe(tableID uint64, row []byte) int {
	// One pass over the row (maphash.Bytes); the table's ID is mixed in
	// after, by a multiply that spreads it over the high bits too.
	h := maphash.Bytes(e.seed, row) ^ (tableID+1)*0x9e3779b97f4a7c15
	h ^= h >> 29
	return int(h % rowLockStripes)
}

// enter registers a running operation, failing once Close has begun.
// Operations must not nest enter calls (Close would deadlock between them).
func (e *Engine) enter() error {
	e.closeMu.RLock()
	if e.closed.Load() {
		e.closeMu.RUnlock()
		return ErrClosed
	}
	if err := e.Err(); err != nil {
		e.closeMu.RUnlock()
		return err
	}
	return nil
}

// leave ends an operation registered by enter.
func (e *Engine) leave() { e.closeMu.RUnlock() }

func (e *Engine) checkOpen() error {
	if e.closed.Load() {
		return ErrClosed
	}
	return e.Err()
}

// Err returns ErrStorageFailed, with its cause, once the engine has met a
// fatal storage error; nil before.
func (e *Engine) Err() error {
	if p := e.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// fail reports a storage error the engine cannot continue after (a WAL
// sync that failed) and returns the error calls get from now on.
func (e *Engine) fail(cause error) error {
	e.store.Fail(cause) // reaches failedWith through storage's OnFatal
	return e.Err()
}

// failedWith puts the engine in its failed state: every call fails from now
// on, readers waiting on durability wake with the error, and OnFatal is
// told. Storage calls it once, whatever met the error first.
func (e *Engine) failedWith(cause error) {
	err := fmt.Errorf("%w: %w", ErrStorageFailed, cause)
	if !e.failed.CompareAndSwap(nil, &err) {
		return
	}
	e.dur.fail(err)
	if e.onFatal == nil {
		e.log.Error("fatal storage error: the engine serves nothing more", "err", cause)
		return
	}
	e.onFatal(cause) // the owner logs it, once
}

// recoverFatal turns a panic out of Pebble's commit pipeline into the
// engine's failure. It is called only around Pebble's commit calls, where
// any panic means the pipeline is broken: storage's FatalPanic (Pebble's
// logger reporting a fatal commit error), or Pebble panicking with the WAL
// writer's error (it does, in commitWrite, when a concurrent WAL write
// failed). Either way the batch's fate is unknown and the engine fails stop.
func (e *Engine) recoverFatal(p any) error {
	if fp, ok := p.(storage.FatalPanic); ok {
		return e.fail(fp.Err)
	}
	if err, ok := p.(error); ok {
		return e.fail(fmt.Errorf("pebble's commit pipeline failed: %w", err))
	}
	return e.fail(fmt.Errorf("pebble's commit pipeline failed: %v", p))
}

// Table returns the current schema of a table. The result must not be
// modified; schema changes replace it.
func (e *Engine) Table(instance, name string) (*Meta, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	// catalogKey, built on the stack: its concatenation allocates
	// once it passes 32 bytes (projects/P/instances/I and a table name
	// mostly do), and Table runs on every read.
	var buf [128]byte
	k := append(append(append(buf[:0], instance...), 0), name...)
	e.mu.RLock()
	m, ok := e.tables[string(k)]
	e.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrTableNotFound, name)
	}
	return m, nil
}

// TableByID returns the current schema of the table with the given id.
func (e *Engine) TableByID(id uint64) (*Meta, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	for _, m := range e.tables {
		if m.ID == id {
			return m, true
		}
	}
	return nil, false
}

// Tables lists the tables of an instance ("" for every instance) by name.
func (e *Engine) Tables(instance string) []*Meta {
	e.mu.RLock()
	var out []*Meta
	for _, m := range e.tables {
		if instance == "" || m.Instance == instance {
			out = append(out, m)
		}
	}
	e.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Instance != out[j].Instance {
			return out[i].Instance < out[j].Instance
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// commitVisibleAt applies b, writing the given rows of m, together with the
// change-stream records describing it when m has a stream, and returns a
// function that waits until it is durable (the WAL synced) and releases b.
// Writers drop their row locks before waiting, so concurrent commits share
// one fsync instead of queueing behind each other's. Readers do not return
// the batch's rows before it is durable (durable.go). A recorded commit
// stays in flight (below the stream's closed timestamp) until it is
// durable, so a change-stream reader never returns a record a crash could
// take back. A failed WAL write or sync fails the engine.
//
// ts is a commit timestamp already taken (from writeStamp; 0 for none),
// which it ends. cells, when not nil, are all the cells b writes: new
// cells only, which point reads skip rather than wait for
// (durability.beginCells). stripes, when not nil, are the rows' row-lock
// stripes, sorted, each once (else they are computed from rows); the
// caller must leave them unchanged until the returned wait has succeeded.
func (e *Engine) commitVisibleAt(b *pebble.Batch, m *Meta, rows [][]byte, stripes []int, recs []changestream.Record, ts int64, cells []newCell) (func() error, error) {
	logged, err := e.logViewRows(b, m, rows, nil) // viewlog.go
	defer logged()
	if err != nil {
		if ts != 0 {
			e.seq.end(ts)
		}
		b.Close()
		return nil, err
	}
	recorded := len(recs) > 0 && (ts != 0 || m.ChangeStream != nil)
	if !recorded && ts != 0 {
		e.seq.end(ts)
		ts = 0
	}
	if recorded {
		if ts == 0 {
			ts = e.seq.begin(e.nowMicros())
		}
		if e.beforeRecordedCommit != nil {
			e.beforeRecordedCommit(recs)
		}
		if err := e.addRecords(b, m, ts, recs); err != nil {
			e.seq.end(ts)
			b.Close()
			return nil, err
		}
	}
	finished, err := e.logBatch(b) // commitlog.go
	if err != nil {
		if recorded {
			e.seq.end(ts)
		}
		b.Close()
		return nil, err
	}
	defer finished()
	var synced func() error
	if cells != nil {
		synced, err = e.applySyncedTicket(b, e.dur.beginCells(tableSlot(m.ID), cellStripes(cells), cells))
	} else {
		if stripes == nil {
			stripes = e.stripes(m.ID, rows)
		}
		synced, err = e.applySynced(b, tableSlot(m.ID), stripes, false)
	}
	if err != nil {
		if e.Err() == nil {
			// Refused before it reached the WAL: nothing was applied.
			if recorded {
				e.seq.end(ts)
			}
			b.Close()
		}
		// Otherwise the batch's fate is unknown: its commit timestamp
		// stays in flight, and the engine has failed.
		return nil, err
	}
	return func() error {
		defer b.Close()
		if err := synced(); err != nil {
			return err // the commit timestamp stays in flight
		}
		if recorded {
			e.seq.end(ts)
		}
		return nil
	}, nil
}

// cellStripes returns the row-lock stripes of cells, each once.
func cellStripes(cells []newCell) []int {
	out := make([]int, 0, 1)
	for _, c := range cells {
		if !slices.Contains(out, c.stripe) {
			out = append(out, c.stripe)
		}
	}
	return out
}

// stripes returns the row-lock stripes of rows, each once.
func (e *Engine) stripes(tableID uint64, rows [][]byte) []int {
	out := make([]int, 0, len(rows))
	for _, r := range rows {
		out = append(out, e.stripe(tableID, r))
	}
	return sortedStripes(out)
}

// commit writes a batch durably: the WAL is synced (and group-committed with
// concurrent writers) before the call returns. It names no rows, so until it
// is durable every read that could see it waits.
func (e *Engine) commit(b *pebble.Batch) error {
	return e.commitOpts(b, pebble.Sync)
}

// commitOpts commits b with opts. A synced commit holds a wildcard
// durability ticket until it is durable; an unsynced one gates nothing (it
// is durable only with the next sync); a failed commit fails the engine.
func (e *Engine) commitOpts(b *pebble.Batch, opts *pebble.WriteOptions) error {
	if !opts.Sync {
		return e.commitUngated(b, opts)
	}
	wait, err := e.applySynced(b, -1, nil, false)
	if err != nil {
		return err
	}
	return wait()
}

// commitTable commits b, a change to table m's rows (nil: rows it cannot
// name), with opts: as commitOpts, but a synced commit makes only reads of
// those rows (or of the table) wait for it — or none, without gate.
func (e *Engine) commitTable(b *pebble.Batch, m *Meta, rows [][]byte, opts *pebble.WriteOptions, gate bool) error {
	if !opts.Sync {
		return e.commitOpts(b, opts)
	}
	if !gate {
		return e.commitUngated(b, opts)
	}
	wait, err := e.applySynced(b, tableSlot(m.ID), e.stripes(m.ID, rows), rows == nil)
	if err != nil {
		return err
	}
	return wait()
}

// commitUngated commits b with opts, synced or not, without a durability
// ticket: no read waits for it. For commits whose visibility before their
// sync cannot mislead a reader (see CommitSystem, SyncWAL).
func (e *Engine) commitUngated(b *pebble.Batch, opts *pebble.WriteOptions) (err error) {
	if err := e.Err(); err != nil { // see applySynced
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			err = e.recoverFatal(p)
		}
	}()
	if err := b.Commit(opts); err != nil {
		return fmt.Errorf("ebbtable: commit: %w", err)
	}
	return e.Err() // a sync reported done after the engine failed is not to be trusted
}

// applySynced applies b under a ticket (see durability.begin) and returns
// the wait for its sync; b stays the caller's to close. Once the engine has
// failed nothing more goes into Pebble: its broken pipeline may crash on the
// next commit (rotateWAL panics holding its mutex). A panic out of the
// pipeline fails the engine and leaves the ticket taken (the batch's fate is
// unknown); so does a failed sync, which readers therefore never see.
func (e *Engine) applySynced(b *pebble.Batch, slot int, stripes []int, whole bool) (wait func() error, err error) {
	return e.applySyncedTicket(b, e.dur.begin(slot, stripes, whole))
}

// applySyncedTicket is applySynced under a ticket already taken.
func (e *Engine) applySyncedTicket(b *pebble.Batch, t commitTicket) (wait func() error, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = e.recoverFatal(p)
		}
	}()
	e.dur.sized(&t, b.Len())
	if err := e.Err(); err != nil {
		e.dur.end(t)
		return nil, err
	}
	if err := e.store.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		e.dur.end(t)
		return nil, fmt.Errorf("ebbtable: commit: %w", err)
	}
	return func() error {
		// A failed write(2) left no record; a failed fsync may have left
		// one the disk kept, which a restart replays: the writer must not
		// count on either outcome. Nor on a sync reported done after the
		// engine failed: once Pebble's pipeline has broken, it cannot be
		// trusted (under ext4's shutdown ioctl, Pebble alone acknowledged
		// writes no WAL held).
		err := b.SyncWait()
		if err != nil {
			err = e.fail(fmt.Errorf("WAL write or sync failed: %w", err))
		} else {
			err = e.Err()
		}
		if err != nil {
			return fmt.Errorf("%w (the write may or may not be applied after a restart)", err)
		}
		if e.afterSync != nil {
			e.afterSync()
		}
		e.dur.end(t)
		return nil
	}, nil
}

var errStop = errors.New("stop")
