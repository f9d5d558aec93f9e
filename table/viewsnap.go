package table

import (
	"bytes"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/storage"
)

// ViewSnapshot is the committed view state at one moment: every scan
// through it sees the same state, whatever is committed after. The engine
// stays open (Close waits) until it is closed.
//
// A merged read scans a snapshot once per group (its state, its partial),
// so a scan reuses an iterator a finished scan left (re-bounded) instead
// of opening one: opening loads a file of every level the bounds overlap.
type ViewSnapshot struct {
	e *Engine
	s *pebble.Snapshot

	mu   sync.Mutex
	free []*pebble.Iterator // left by finished scans; nested scans take their own
}

// NewViewSnapshot takes a snapshot of the committed view state.
func (e *Engine) NewViewSnapshot() (*ViewSnapshot, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	return &ViewSnapshot{e: e, s: e.store.NewSnapshot()}, nil
}

// Scan is ViewBatch.Scan over the snapshot.
func (vs *ViewSnapshot) Scan(space, lo, hi []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	lower, upper := spaceBounds(space, lo, hi)
	vs.mu.Lock()
	var it *pebble.Iterator
	if n := len(vs.free); n > 0 {
		it, vs.free = vs.free[n-1], vs.free[:n-1]
	}
	vs.mu.Unlock()
	if it == nil {
		var err error
		if it, err = vs.s.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper}); err != nil {
			return err
		}
	} else {
		it.SetBounds(lower, upper)
	}
	if err := walkSpace(it, space, reverse, fn); err != nil {
		it.Close()
		return err
	}
	vs.mu.Lock()
	vs.free = append(vs.free, it)
	vs.mu.Unlock()
	return nil
}

// Close releases the snapshot.
func (vs *ViewSnapshot) Close() {
	vs.mu.Lock()
	for _, it := range vs.free {
		it.Close()
	}
	vs.free = nil
	vs.mu.Unlock()
	vs.s.Close()
	vs.e.leave()
}

// spaceBounds are the iterator bounds of keys [lo, hi) of a view's state
// (hi nil: to the end of the space).
func spaceBounds(space, lo, hi []byte) (lower, upper []byte) {
	lower = append(bytes.Clone(space), lo...)
	if hi != nil {
		return lower, append(bytes.Clone(space), hi...)
	}
	return lower, storage.PrefixEnd(space)
}
