package table

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Reads see only what is durable.
//
// Pebble makes a batch visible to readers as soon as it is in the memtable,
// before its WAL write and sync finish (group commit: writers drop their
// row locks and wait for the shared fsync together). A reader could so see a
// write whose sync then fails, or that a power loss then erases: a write its
// client never saw acknowledged, or saw fail.
//
// durability closes that window without slowing writers down. Every synced
// commit takes a ticket before it is applied and gives it back once its
// sync returned, counting itself in the stripe of each row it writes and in
// its table's slot (or in a wildcard counter when it cannot say). A reader
// opens its Pebble iterator — its snapshot — and then marks the ticket count:
// every write its snapshot can contain holds a ticket at or below the mark.
// Before it returns anything that an unsynced write could have touched (a
// requested row whose stripe counts a write in flight; any row of a range
// whose table's slot does), it waits until every ticket up to the mark is
// given back. That is at most one group fsync, and only when a write to the
// same rows or table is in flight; otherwise the check is two atomic loads.
// If a sync fails instead, the engine has failed (fail-stop) and the reader
// gets ErrStorageFailed: what it would have returned is never seen.
//
// A point read does not wait for a commit that only puts new cells (a
// SetCell batch whose keys held nothing before; see beginCells): it reads
// at the durable frontier instead, its iterator skipping those cells' keys
// while they are in flight. Hiding them is linearizable: an acknowledged
// write has given its ticket back, so nothing it wrote is skipped, and a
// write not yet acknowledged is concurrent with the read. Since the keys
// were new, skipping one shows what was there before it: nothing, and the
// older versions it would hide. Anything else in flight on the row (a
// delete, an aggregate, an overwrite, a commit naming no rows) makes the
// read wait as above, and so does a read that must see the latest state
// (a read-modify-write answering without writing).
type durability struct {
	inflight atomic.Int64 // tickets taken and not given back
	// bulkInflight: of those, bulk commits (sized), which the sync window
	// waits for.
	bulkInflight atomic.Int64
	wild         atomic.Int32 // of those, commits that named no rows
	stripes      [rowLockStripes]atomic.Int32
	tables       [tableSlots]atomic.Int32
	// whole counts commits to a table that name no rows (a range drop, a
	// batch of the row deletion job): every read of the table waits.
	whole [tableSlots]atomic.Int32

	// cellStripes counts, per row stripe, the cell-only commits in flight
	// (beginCells); cellsInFlight counts them all.
	cellStripes   [rowLockStripes]atomic.Int32
	cellsInFlight atomic.Int32

	next atomic.Uint64 // the last ticket handed out (changed under mu)

	mu      sync.Mutex
	pending []uint64      // tickets not given back, ascending
	cells   []pendingCell // the keys of cell-only commits in flight
	// notify is closed when a ticket is given back or the engine fails;
	// made by the first waiter after the last close (nil: none waits), so
	// a commit no read waits on makes and closes no channel.
	notify chan struct{}
	err    error // the engine's fatal error, once it has one
}

// Group commit. Writers share fsyncs: while one runs, the commits that
// arrive wait for the next, which Pebble starts as soon as the last returns.
// Bulk commits may also wait a little longer: while at least
// syncWindowWriters synced commits of bulkCommitBytes or more are in flight,
// the next WAL sync waits until a while after the last one —
// syncWindowPer for each such commit in flight, up to syncWindow — and the
// commits arriving in between share it. Each such commit carries enough
// work that the wait costs it little, and the fewer syncs save CPU. Small
// commits (single-row writes, hot rows) never open the window (their syncs
// run back to back; they share a window only while bulk commits hold one
// open, as all commits share the WAL): with the WAL's file zeroed ahead
// (storage/walzero.go) a sync is cheap, and the window cost single-row
// writes half their throughput and more CPU (wake-ups, the timer, a WAL
// write per commit while syncs were held) than the syncs it saved
// (docs/performance.md, "Single-row writes, session 19"). Durability is
// unchanged: a commit is acknowledged only after the sync that covers it.
const (
	syncWindow        = time.Millisecond
	syncWindowPer     = 40 * time.Microsecond
	syncWindowWriters = 4
	bulkCommitBytes   = 4 << 10
)

// walSyncWait is the WAL's minimum sync interval, asked after each sync
// (storage.Options.WALMinSyncInterval).
func (d *durability) walSyncWait() time.Duration {
	if n := d.bulkInflight.Load(); n >= syncWindowWriters {
		return min(syncWindow, time.Duration(n)*syncWindowPer)
	}
	return 0
}

// sized notes the size of t's batch before it is applied: a bulk commit
// (bulkCommitBytes or more) counts towards the sync window until end.
func (d *durability) sized(t *commitTicket, batchBytes int) {
	if batchBytes >= bulkCommitBytes && !t.bulk {
		t.bulk = true
		d.bulkInflight.Add(1)
	}
}

// tableSlots is how many counters tables hash into (collisions only cost a
// needless wait).
const tableSlots = 64

func newDurability() *durability {
	return &durability{}
}

// commitTicket is one synced commit in flight.
type commitTicket struct {
	n       uint64
	table   int   // table slot; -1: a wildcard commit
	whole   bool  // the commit names no rows of its table
	stripes []int // row stripes, each counted once
	// cellStripes: a cell-only commit's row stripes, each counted once
	// (its keys are in durability.cells).
	cellStripes []int
	bulk        bool // counted in durability.bulkInflight (sized)
}

// pendingCell is one key a cell-only commit in flight put.
type pendingCell struct {
	n      uint64 // the commit's ticket
	stripe int
	key    []byte
}

// newCell is one cell key a cell-only commit puts, with its row's stripe.
type newCell struct {
	stripe int
	key    []byte
}

// begin takes a ticket for a commit of the given rows' stripes in table
// slot tableSlot; whole: of rows it cannot name; tableSlot -1: of no table
// it can name. It must be called before the batch is applied.
func (d *durability) begin(tableSlot int, stripes []int, whole bool) commitTicket {
	d.mu.Lock()
	t := commitTicket{n: d.next.Add(1), table: tableSlot, whole: whole, stripes: stripes}
	d.pending = append(d.pending, t.n)
	d.mu.Unlock()
	switch {
	case tableSlot < 0:
		d.wild.Add(1)
	default:
		d.tables[tableSlot].Add(1)
		if whole {
			d.whole[tableSlot].Add(1)
		}
		for _, s := range stripes {
			d.stripes[s].Add(1)
		}
	}
	d.inflight.Add(1)
	return t
}

// beginCells takes a ticket for a commit, to table slot tableSlot, that
// only puts the given cells, none of whose keys holds anything now (the
// caller holds their rows' locks and looked). Point reads skip these keys
// instead of waiting for the commit (see durability); range reads of the
// table wait for it as for any commit. stripes are the cells' row stripes,
// each once. It must be called before the batch is applied.
func (d *durability) beginCells(tableSlot int, stripes []int, cells []newCell) commitTicket {
	d.mu.Lock()
	t := commitTicket{n: d.next.Add(1), table: tableSlot, cellStripes: stripes}
	d.pending = append(d.pending, t.n)
	for _, c := range cells {
		d.cells = append(d.cells, pendingCell{n: t.n, stripe: c.stripe, key: c.key})
	}
	d.mu.Unlock()
	d.tables[tableSlot].Add(1)
	for _, s := range stripes {
		d.cellStripes[s].Add(1)
	}
	d.cellsInFlight.Add(1)
	d.inflight.Add(1)
	return t
}

// end gives a ticket back once its commit is durable (or failed: the engine
// then fails, and waiters learn it from d.err).
func (d *durability) end(t commitTicket) {
	// Forget the ticket (and a cell-only commit's keys) first, under one
	// lock, then the counters: until they drop, a read may wait for nothing
	// (a wait that finds the ticket gone returns at once), never the
	// reverse.
	d.mu.Lock()
	if t.cellStripes != nil {
		d.cells = slices.DeleteFunc(d.cells, func(c pendingCell) bool { return c.n == t.n })
	}
	for i, n := range d.pending {
		if n == t.n {
			d.pending = append(d.pending[:i], d.pending[i+1:]...)
			break
		}
	}
	if d.notify != nil {
		close(d.notify)
		d.notify = nil
	}
	d.mu.Unlock()
	if t.cellStripes != nil {
		for _, s := range t.cellStripes {
			d.cellStripes[s].Add(-1)
		}
		d.cellsInFlight.Add(-1)
	}
	if t.table < 0 {
		d.wild.Add(-1)
	} else {
		d.tables[t.table].Add(-1)
		if t.whole {
			d.whole[t.table].Add(-1)
		}
		for _, s := range t.stripes {
			d.stripes[s].Add(-1)
		}
	}
	if t.bulk {
		d.bulkInflight.Add(-1)
	}
	d.inflight.Add(-1)
}

// mark returns the ticket count; call it after opening the snapshot.
func (d *durability) mark() uint64 { return d.next.Load() }

// busyRow says whether a write to the row with this stripe, one to the
// row's table that named no rows, or one that named no table, may be in
// flight; cell-only commits count only with cells.
func (d *durability) busyRow(slot, stripe int, cells bool) bool {
	return d.inflight.Load() > 0 && (d.wild.Load() > 0 || d.whole[slot].Load() > 0 || d.stripes[stripe].Load() > 0 ||
		cells && d.cellStripes[stripe].Load() > 0)
}

// pendingKeys appends to dst the keys that cell-only commits in flight put
// in rows of this stripe.
func (d *durability) pendingKeys(dst [][]byte, stripe int) [][]byte {
	if d.cellStripes[stripe].Load() == 0 {
		return dst
	}
	d.mu.Lock()
	for _, c := range d.cells {
		if c.stripe == stripe {
			dst = append(dst, c.key)
		}
	}
	d.mu.Unlock()
	return dst
}

// pendingUnder says whether a cell-only commit in flight put a key under
// prefix, in a row of this stripe.
func (d *durability) pendingUnder(stripe int, prefix []byte) bool {
	if d.cellStripes[stripe].Load() == 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.cells {
		if c.stripe == stripe && bytes.HasPrefix(c.key, prefix) {
			return true
		}
	}
	return false
}

// busyTable says whether a write to the table with this slot, or one that
// named no rows, may be in flight.
func (d *durability) busyTable(slot int) bool {
	return d.inflight.Load() > 0 && (d.wild.Load() > 0 || d.tables[slot].Load() > 0)
}

// wait returns once every ticket up to mark is given back, or the engine's
// fatal error, or ctx's.
func (d *durability) wait(ctx context.Context, mark uint64) error {
	for {
		d.mu.Lock()
		if d.err != nil {
			err := d.err
			d.mu.Unlock()
			return err
		}
		if len(d.pending) == 0 || d.pending[0] > mark {
			d.mu.Unlock()
			return nil
		}
		if d.notify == nil {
			d.notify = make(chan struct{})
		}
		ch := d.notify
		d.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// fail makes every present and future wait return err.
func (d *durability) fail(err error) {
	d.mu.Lock()
	if d.err == nil {
		d.err = err
		if d.notify != nil {
			close(d.notify)
			d.notify = nil
		}
	}
	d.mu.Unlock()
}

// readGate is one read's view of durability: the mark taken after its
// snapshot opened, and whether it has already waited.
type readGate struct {
	e      *Engine
	mark   uint64
	waited bool
	// skip, when set, is the read's iterator's set of keys to skip: row
	// then adds to it the keys of cell-only commits in flight instead of
	// waiting for them. nil: the read waits for them (it must see the
	// latest state, or its iterator skips nothing).
	skip *skipKeys
}

// skipKeys is the keys a read's iterator skips (IterOptions.SkipPoint): the
// cells of commits that were in flight when the read looked. It is filled
// before the iterator is first positioned and never changes after, so the
// predicate is pure, as Pebble requires.
type skipKeys struct{ keys [][]byte }

// iterOptions returns options whose iterator skips what sk will hold.
func (sk *skipKeys) iterOptions() *pebble.IterOptions {
	return &pebble.IterOptions{SkipPoint: sk.has}
}

func (sk *skipKeys) has(k []byte) bool {
	for _, s := range sk.keys {
		if bytes.Equal(s, k) {
			return true
		}
	}
	return false
}

// readSkip prepares a point read's iterator: it returns the skip set the
// iterator is to be opened with, or nil when no cell-only commit is in
// flight (a commit that begins after this applies after the iterator
// opens, or the read waits for it).
func (e *Engine) readSkip() *skipKeys {
	e.lookups.pointRead() // writers look whether their cells are new
	if e.dur.cellsInFlight.Load() == 0 {
		return nil
	}
	return &skipKeys{}
}

// gate starts a read's gate; call it right after opening the iterator.
// skip is the set the iterator skips (nil: none).
func (e *Engine) gate(skip *skipKeys) readGate {
	return readGate{e: e, mark: e.dur.mark(), skip: skip}
}

// row waits, if needed, before the read returns something of row in table,
// or has the read skip the cells of row's cell-only commits in flight.
// Call it before the iterator is first positioned.
func (g *readGate) row(ctx context.Context, tableID uint64, row []byte) error {
	if g.waited || g.e.dur.inflight.Load() == 0 {
		return nil
	}
	stripe := g.e.stripe(tableID, row)
	if !g.e.dur.busyRow(tableSlot(tableID), stripe, g.skip == nil) {
		if g.skip != nil {
			g.skip.keys = g.e.dur.pendingKeys(g.skip.keys, stripe)
		}
		return nil
	}
	g.waited = true
	g.skip = nil // all it could skip will be durable
	return g.e.dur.wait(ctx, g.mark)
}

// RowPending says whether a write to the row is in flight that point reads
// skip rather than wait for (durability): until it is durable, readers see
// the row as it was before it. The collector leaves such a row alone: the
// new cells could make older ones eligible that readers still see. A
// caller holding the row's lock knows no new one begins. prefix is the
// row's key prefix (storage.RowPrefix).
func (e *Engine) RowPending(tableID uint64, row, prefix []byte) bool {
	return e.dur.pendingUnder(e.stripe(tableID, row), prefix)
}

// table waits, if needed, before the read returns anything of a range of
// table (a row missing from a range may be one an unsynced write deleted).
func (g *readGate) table(ctx context.Context, tableID uint64) error {
	if g.waited || !g.e.dur.busyTable(tableSlot(tableID)) {
		return nil
	}
	g.waited = true
	return g.e.dur.wait(ctx, g.mark)
}

func tableSlot(tableID uint64) int { return int(tableID % tableSlots) }
