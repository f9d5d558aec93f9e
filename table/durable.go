package table

import (
	"context"
	"sync"
	"sync/atomic"
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
type durability struct {
	inflight atomic.Int64 // tickets taken and not given back
	wild     atomic.Int32 // of those, commits that named no rows
	stripes  [rowLockStripes]atomic.Int32
	tables   [tableSlots]atomic.Int32
	// whole counts commits to a table that name no rows (a range drop, a
	// batch of the row deletion job): every read of the table waits.
	whole [tableSlots]atomic.Int32

	next atomic.Uint64 // the last ticket handed out (changed under mu)

	mu      sync.Mutex
	pending []uint64 // tickets not given back, ascending
	notify  chan struct{}
	err     error // the engine's fatal error, once it has one
}

// tableSlots is how many counters tables hash into (collisions only cost a
// needless wait).
const tableSlots = 64

func newDurability() *durability {
	return &durability{notify: make(chan struct{})}
}

// commitTicket is one synced commit in flight.
type commitTicket struct {
	n       uint64
	table   int   // table slot; -1: a wildcard commit
	whole   bool  // the commit names no rows of its table
	stripes []int // row stripes, each counted once
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

// end gives a ticket back once its commit is durable (or failed: the engine
// then fails, and waiters learn it from d.err).
func (d *durability) end(t commitTicket) {
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
	d.inflight.Add(-1)
	d.mu.Lock()
	for i, n := range d.pending {
		if n == t.n {
			d.pending = append(d.pending[:i], d.pending[i+1:]...)
			break
		}
	}
	close(d.notify)
	d.notify = make(chan struct{})
	d.mu.Unlock()
}

// mark returns the ticket count; call it after opening the snapshot.
func (d *durability) mark() uint64 { return d.next.Load() }

// busyRow says whether a write to the row with this stripe, one to the
// row's table that named no rows, or one that named no table, may be in
// flight.
func (d *durability) busyRow(slot, stripe int) bool {
	return d.inflight.Load() > 0 && (d.wild.Load() > 0 || d.whole[slot].Load() > 0 || d.stripes[stripe].Load() > 0)
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
		close(d.notify)
		d.notify = make(chan struct{})
	}
	d.mu.Unlock()
}

// readGate is one read's view of durability: the mark taken after its
// snapshot opened, and whether it has already waited.
type readGate struct {
	e      *Engine
	mark   uint64
	waited bool
}

// gate starts a read's gate; call it right after opening the iterator.
func (e *Engine) gate() readGate { return readGate{e: e, mark: e.dur.mark()} }

// row waits, if needed, before the read returns something of row in table.
func (g *readGate) row(ctx context.Context, tableID uint64, row []byte) error {
	if g.waited || g.e.dur.inflight.Load() == 0 || !g.e.dur.busyRow(tableSlot(tableID), g.e.stripe(tableID, row)) {
		return nil
	}
	g.waited = true
	return g.e.dur.wait(ctx, g.mark)
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
