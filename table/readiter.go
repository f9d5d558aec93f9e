package table

import (
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/cell"
)

// iterPool keeps the Pebble iterators of a few finished point reads for
// the next ones: opening an iterator (loading the read state, building
// the merging iterator) and closing it cost about 2.4 µs of a point read's
// 45 µs of server CPU.
//
// A pebble.Iterator reads the database as it was when it was opened. One
// is handed out again only while Pebble's visible sequence number still
// has the value it had just before the iterator was opened: every commit,
// ingest and excise publishes a new one, so an unchanged number means the
// iterator sees exactly what one opened now would see (its own sequence
// number lies between the two equal readings; flushes and compactions move
// cells between memtables and files without changing what a read returns).
// Pebble does not export that number; visibleSeqNum finds it, and where it
// cannot (another Pebble version), nothing is pooled.
//
// A pooled iterator pins the read state it was opened on (memtables, and
// files a compaction has replaced), so one is kept at most iterMaxAge, and
// a timer, set while the pool holds iterators, closes what idles there
// past that (within twice iterMaxAge).
type iterPool struct {
	seq *atomic.Uint64 // Pebble's visible sequence number; nil: no pooling

	mu     sync.Mutex
	its    [iterPoolSize]pooledIter
	n      int
	timer  *time.Timer // armed while the pool holds iterators
	armed  bool        // timer is set to go off (it re-arms itself while iterators remain)
	closed bool
}

// pooledIter is an iterator and the visible sequence number read just
// before it was opened. scratch, when pooling, is memory the reads that
// use the iterator reuse, one read at a time.
type pooledIter struct {
	it      *pebble.Iterator
	seq     uint64
	born    time.Time
	scratch *pointScratch
}

// pointScratch is what a pooled iterator's point reads reuse: the buffer
// for their bounds (SetBounds copies them), and for a transient read
// (ReadRequest.Transient) the value chunk its row's key, qualifiers and
// values are carved from and its first row's cells. A transient read's
// caller keeps nothing of its rows once the read has returned, so the next
// read may write over them; any other read carves its own.
type pointScratch struct {
	bounds [pointBoundsLen]byte
	arena  []byte
	cells  []cell.Cell
}

// Bounds on what a scratch keeps of a read's chunk and cells: a read of a
// large row leaves nothing large behind in the pool (keep also clears the
// cells' slots, which would point at the last read's values past the
// chunk's 2 KiB and its labels).
const (
	scratchArenaMax = 2 << 10
	scratchCellsMax = 16
)

// keep takes back, for the next read, the value chunk a transient read's
// scanner carved from last (unless it grew past scratchArenaMax), and
// makes room for as many cells as the rows read lately hold
// (Engine.cellsHint), up to scratchCellsMax.
func (ps *pointScratch) keep(s *scanner) {
	if c := cap(s.arena); c > 0 && c <= scratchArenaMax {
		ps.arena = s.arena[:0]
	}
	clear(ps.cells[:cap(ps.cells)])
	if n := min(max(int(s.e.cellsHint.Load()), 1), scratchCellsMax); cap(ps.cells) < n {
		ps.cells = make([]cell.Cell, 0, n)
	}
}

// pointBoundsLen is room for both bounds of a point read of a row key of
// up to 60 bytes without zero bytes (interval.bounds).
const pointBoundsLen = 2*(9+60+2) + 2 + 4

const (
	// iterPoolSize is how many iterators the pool keeps: about the reads
	// one server runs at once (its stream workers).
	iterPoolSize = 16
	// iterMaxAge bounds how long a pooled iterator pins its read state.
	iterMaxAge = 50 * time.Millisecond
)

// pointIter returns an iterator for a point read without options: a pooled
// one that sees the latest state, or a new one. Give it back with putIter.
func (e *Engine) pointIter() (pooledIter, error) {
	p := &e.iters
	if p.seq == nil {
		it, err := e.store.NewIter(nil)
		return pooledIter{it: it}, err
	}
	cur := p.seq.Load()
	var stale [iterPoolSize]*pebble.Iterator
	ns := 0
	var found pooledIter
	p.mu.Lock()
	for p.n > 0 {
		p.n--
		pi := p.its[p.n]
		p.its[p.n] = pooledIter{}
		if pi.seq == cur && time.Since(pi.born) < iterMaxAge {
			found = pi
			break
		}
		stale[ns], ns = pi.it, ns+1
	}
	p.mu.Unlock()
	for _, it := range stale[:ns] {
		it.Close()
	}
	if found.it != nil {
		return found, nil
	}
	// Read before the iterator is opened: the iterator's own sequence
	// number is at least this one.
	cur = p.seq.Load()
	born := time.Now()
	it, err := e.store.NewIter(nil)
	if err != nil {
		return pooledIter{}, err
	}
	return pooledIter{it: it, seq: cur, born: born, scratch: new(pointScratch)}, nil
}

// putIter gives back an iterator pointIter returned. It is kept if it may
// still serve a read (no commit since, no error, young enough, room in the
// pool), else closed.
func (e *Engine) putIter(pi pooledIter) error {
	p := &e.iters
	if p.seq == nil || pi.it.Error() != nil || p.seq.Load() != pi.seq || time.Since(pi.born) >= iterMaxAge {
		return pi.it.Close()
	}
	p.mu.Lock()
	if p.closed || p.n == iterPoolSize {
		p.mu.Unlock()
		return pi.it.Close()
	}
	p.its[p.n] = pi
	p.n++
	if p.timer == nil {
		p.timer = time.AfterFunc(iterMaxAge, e.expireIters)
		p.armed = true
	} else if !p.armed {
		// Armed once while the pool holds iterators (dropIters re-arms
		// it), not on every put into an empty pool: Reset takes the
		// timer's lock, about 0.1 µs of a point read.
		p.timer.Reset(iterMaxAge)
		p.armed = true
	}
	p.mu.Unlock()
	return nil
}

// expireIters closes the pooled iterators past iterMaxAge (all of them
// once the pool is closed) and re-arms the timer for the rest.
func (e *Engine) expireIters() { e.dropIters(false) }

// dropIters closes the pooled iterators past iterMaxAge, or all of them
// (all, or the pool closed), and re-arms the timer for the rest. Settle and
// the compactions drop them all: a pooled iterator would keep the tables a
// compaction replaced on disk (zombies) for up to iterMaxAge more.
func (e *Engine) dropIters(all bool) {
	p := &e.iters
	var old [iterPoolSize]*pebble.Iterator
	n := 0
	p.mu.Lock()
	keep := 0
	for i := range p.n {
		pi := p.its[i]
		if all || p.closed || time.Since(pi.born) >= iterMaxAge {
			old[n], n = pi.it, n+1
			continue
		}
		p.its[keep] = pi
		keep++
	}
	for i := keep; i < p.n; i++ {
		p.its[i] = pooledIter{}
	}
	p.n = keep
	p.armed = false
	if p.n > 0 && !p.closed {
		p.timer.Reset(iterMaxAge)
		p.armed = true
	}
	// Closed under the lock: the timer's call runs outside any read, and
	// closeIters must not return (and the database close) while it is
	// still closing one.
	for _, it := range old[:n] {
		it.Close()
	}
	p.mu.Unlock()
}

// closeIters closes the pool and every iterator in it (before the
// database closes).
func (e *Engine) closeIters() {
	p := &e.iters
	p.mu.Lock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	e.dropIters(true)
}

// visibleSeqNum returns Pebble's visible sequence number of db
// (db.mu.versions.visibleSeqNum, a base.AtomicSeqNum holding an
// atomic.Uint64), or nil if this Pebble lays it out otherwise. The path is
// checked field by field, names and types, before it is followed; the
// versions pointer is set before Open returns and never changes.
func visibleSeqNum(db *pebble.DB) *atomic.Uint64 {
	if db == nil {
		return nil
	}
	mu, ok := reflect.TypeFor[pebble.DB]().FieldByName("mu")
	if !ok || mu.Type.Kind() != reflect.Struct {
		return nil
	}
	vers, ok := mu.Type.FieldByName("versions")
	if !ok || vers.Type.Kind() != reflect.Pointer || vers.Type.Elem().Name() != "versionSet" ||
		vers.Type.Elem().PkgPath() != "github.com/cockroachdb/pebble/v2" {
		return nil
	}
	vis, ok := vers.Type.Elem().FieldByName("visibleSeqNum")
	if !ok || vis.Type.Name() != "AtomicSeqNum" || vis.Type.PkgPath() != "github.com/cockroachdb/pebble/v2/internal/base" ||
		vis.Type.Kind() != reflect.Struct || vis.Type.NumField() != 1 {
		return nil
	}
	val := vis.Type.Field(0)
	if val.Type != reflect.TypeFor[atomic.Uint64]() || val.Offset != 0 {
		return nil
	}
	vs := *(*unsafe.Pointer)(unsafe.Add(unsafe.Pointer(db), mu.Offset+vers.Offset))
	if vs == nil {
		return nil
	}
	return (*atomic.Uint64)(unsafe.Add(vs, vis.Offset))
}
