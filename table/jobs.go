package table

import (
	"context"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/storage"
)

// The verbs below serve the engine's background jobs (the collector
// first), so they need not import Pebble.

// RawIterTimestamps is RawIter over only the blocks that may hold a cell
// timestamp in [lo, hi) (other keys may still appear).
func (e *Engine) RawIterTimestamps(lower, upper []byte, lo, hi int64) (*RawIter, error) {
	filters := make([]pebble.BlockPropertyFilter, 1, 2)
	filters[0] = storage.TimestampFilter(lo, hi)
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper, PointKeyFilters: filters})
	if err != nil {
		return nil, err
	}
	return &RawIter{it: it}, nil
}

// RawGet calls fn with the value stored at key k, if there is one, and
// reports whether there was. The value is valid only during fn.
func (e *Engine) RawGet(k []byte, fn func(v []byte)) (bool, error) {
	v, closer, err := e.store.Get(k)
	if err == pebble.ErrNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	fn(v)
	return true, closer.Close()
}

// DeleteBatch gathers raw deletions that CommitSystem commits atomically.
type DeleteBatch struct {
	b *pebble.Batch
	// inst: a deletion meets the instance metadata space, whose in-memory
	// copy CommitSystem then drops (instancecache.go).
	inst bool
}

// NewDeleteBatch starts an empty deletion batch. Close it when done.
func (e *Engine) NewDeleteBatch() *DeleteBatch { return &DeleteBatch{b: e.store.NewBatch()} }

// Delete deletes key k.
func (d *DeleteBatch) Delete(k []byte) error {
	d.inst = d.inst || touchesInstanceMeta(k, nil)
	return d.b.Delete(k, nil)
}

// DeleteRange deletes the keys in [lo, hi).
func (d *DeleteBatch) DeleteRange(lo, hi []byte) error {
	d.inst = d.inst || touchesInstanceMeta(lo, hi)
	return d.b.DeleteRange(lo, hi, nil)
}

// Close releases the batch.
func (d *DeleteBatch) Close() error { return d.b.Close() }

// EstimateDiskUsage estimates the bytes the keys in [lo, hi) take in the
// SSTables on disk.
func (e *Engine) EstimateDiskUsage(lo, hi []byte) (uint64, error) {
	return e.store.EstimateDiskUsage(lo, hi)
}

// DiskSpaceUsage is the whole database's disk usage, WAL and obsolete
// files included.
func (e *Engine) DiskSpaceUsage() uint64 { return e.store.DiskSpaceUsage() }

// Settle waits, at most max, for Pebble to delete the files its flushes and
// compactions made obsolete, and sizes the data directory
// (storage.DB.Settle).
func (e *Engine) Settle(ctx context.Context, max time.Duration) (storage.Settled, error) {
	e.dropIters(true) // pooled point-read iterators hold replaced tables (readiter.go)
	return e.store.Settle(ctx, max)
}

// CompactPaced compacts [start, end), its output written at no more than
// bytesPerSec (0 or less: unpaced).
func (e *Engine) CompactPaced(ctx context.Context, start, end []byte, bytesPerSec int64) error {
	defer e.dropIters(true)
	return e.store.CompactPaced(ctx, start, end, bytesPerSec)
}

// Compact compacts [start, end) unpaced, in parallel where it can (tests
// and benchmarks settle the store with it).
func (e *Engine) Compact(ctx context.Context, start, end []byte) error {
	defer e.dropIters(true)
	return e.store.Compact(ctx, start, end, true)
}
