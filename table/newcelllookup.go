package table

import (
	"sync/atomic"
	"time"
)

// Whether a write looks up that its cells are new.
//
// Only a point read that meets a write in flight uses a write's new cells
// (it skips them instead of waiting for the sync: durability.beginCells),
// and telling a cell is new costs a Pebble seek for each column its
// row-lock stripe does not remember (columnNewest), and a write to a new
// row is always such a column: 10.7% of the server's CPU per single-row
// write in ebbbench (a seek through a memtable of 200,000 rows), about
// 5–10 µs of 40–60 in process (BenchmarkSyncedPointWrites). So writers
// look only while point reads come: once a whole period of
// newCellLookupIdle passes in which no point read started, they stop, and
// the next point read turns them back on. A point read that
// meets a write begun without looking waits for its sync (one group sync
// at most), as it waits for any write it cannot skip; what it returns is
// the same. A column a stripe remembers is known new without a seek, and
// still is while writers do not look.

// newCellLookupIdle is how long a period is, in microseconds (a write's
// now): writers go on looking for one to two periods after the last point
// read started. Short, so writes stop paying for lookups soon after reads
// stop: with a period of a second, the single-row writes ebbbench runs
// for two seconds right after its point reads looked for most of them,
// 7.5 µs of server CPU a write (a seek through a memtable of 200,000 rows)
// against none at 100 ms (docs/performance.md, "Single-row writes after
// point reads"). Point reads at ten a second or more keep writers looking;
// sparser ones may wait for a write in flight on their row (one group
// sync) instead of skipping it, and return the same.
const newCellLookupIdle = int64(100 * time.Millisecond / time.Microsecond)

// newCellLookups tells writers whether to look (see above). A point read
// calls pointRead, a write look; both only load in the steady state.
type newCellLookups struct {
	off  atomic.Bool // writers do not look
	seen atomic.Bool // a point read started in the current period
	// end is the current period's end (ms-truncated micros); 0 until the
	// first write starts one.
	end atomic.Int64
}

// pointRead notes that a point read starts, and has writers look again.
func (l *newCellLookups) pointRead() {
	if !l.seen.Load() {
		l.seen.Store(true)
	}
	if l.off.Load() {
		l.off.Store(false)
	}
}

// look says whether a write at now (ms-truncated micros) looks up that its
// cells are new. Every write asks (a bulk write too, though it never
// looks), so periods pass while writes come: the write that finds the
// period over starts the next and, if no point read started in it, turns
// looking off.
func (l *newCellLookups) look(now int64) bool {
	if end := l.end.Load(); now >= end && l.end.CompareAndSwap(end, now+newCellLookupIdle) {
		// A point read that starts between the Swap and the Store
		// does not keep looking on (it is off after the Store): the
		// next one turns it on again. What reads return is the same
		// either way (see above).
		if !l.seen.Swap(false) && end != 0 {
			l.off.Store(true)
		}
	}
	return !l.off.Load()
}
