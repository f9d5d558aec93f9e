package table

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/storage"
)

// RawIter walks the store's raw keys between two bounds, for the engine's
// background jobs (change streams, backups, collection), so that they need
// not import Pebble. Keys and values are valid until the next move.
type RawIter struct{ it *pebble.Iterator }

// RawIter opens an iterator over the store's keys in [lower, upper); nil
// bounds are open.
func (e *Engine) RawIter(lower, upper []byte) (*RawIter, error) {
	return newRawIter(e.store, lower, upper)
}

func newRawIter(db *storage.DB, lower, upper []byte) (*RawIter, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	return &RawIter{it: it}, nil
}

// First moves to the first key and reports whether there is one.
func (r *RawIter) First() bool { return r.it.First() }

// Last moves to the last key and reports whether there is one.
func (r *RawIter) Last() bool { return r.it.Last() }

// SeekGE moves to the first key at or after k.
func (r *RawIter) SeekGE(k []byte) bool { return r.it.SeekGE(k) }

// Next moves to the next key.
func (r *RawIter) Next() bool { return r.it.Next() }

// Valid reports whether the iterator is at a key.
func (r *RawIter) Valid() bool { return r.it.Valid() }

// Key is the current key.
func (r *RawIter) Key() []byte { return r.it.Key() }

// Value is the current value.
func (r *RawIter) Value() ([]byte, error) { return r.it.ValueAndErr() }

// SetBounds changes the bounds; the iterator must be repositioned after.
func (r *RawIter) SetBounds(lower, upper []byte) { r.it.SetBounds(lower, upper) }

// Error is the iterator's accumulated error.
func (r *RawIter) Error() error { return r.it.Error() }

// Close releases the iterator.
func (r *RawIter) Close() error { return r.it.Close() }

// changeStore lets the change-stream reader walk the engine's keys.
type changeStore struct{ db *storage.DB }

func (s changeStore) Iter(lower, upper []byte) (changestream.Iter, error) {
	it, err := newRawIter(s.db, lower, upper)
	if err != nil {
		return nil, err
	}
	return it, nil
}

// Flush writes the memtable to disk (tests and benchmarks measure on-disk
// sizes after it).
func (e *Engine) Flush() error { return e.store.Flush() }
