package table

import "github.com/cockroachdb/pebble/v2"

// ViewSnapshot is the committed view state at one moment: every scan
// through it sees the same state, whatever is committed after. The engine
// stays open (Close waits) until it is closed.
type ViewSnapshot struct {
	e *Engine
	s *pebble.Snapshot
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
	return scanSpace(vs.s, space, lo, hi, reverse, fn)
}

// Close releases the snapshot.
func (vs *ViewSnapshot) Close() {
	vs.s.Close()
	vs.e.leave()
}
