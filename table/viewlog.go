package table

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/storage"
)

// The view log (storage key space 0x05: table · sequence) lists, for each
// table some materialized view is maintained over, the rows every commit
// changed: a user's write, a collector's deletion, a row deletion policy's,
// a DropRowRange. An entry is written in the very batch of the change it
// names, so no change goes unlogged and no entry outlives a change a crash
// took back; whether or not the table has a change stream. The view's
// maintainer reads the entries, brings its state up to the rows as they
// are now, and deletes the entries in the batch that updates the state
// (ViewBatch). Entries of tables without a maintained view are never
// written: one atomic load on the write path.
//
// View state (key space 0x06: esc(view) · the view's own keys) is an
// ordered key-value space per view, written only through ViewBatch.
const (
	tagViewLog   byte = 0x05
	tagViewState byte = 0x06
)

// Kinds of view log entries.
const (
	// ViewLogRow: one row changed (Entry.Row).
	ViewLogRow byte = 1
	// ViewLogDropped: every row starting with Entry.Row was deleted.
	ViewLogDropped byte = 2
	// ViewLogUnknown: rows changed that the log cannot name.
	ViewLogUnknown byte = 3
)

// ViewLogEntry is one entry of a table's view log.
type ViewLogEntry struct {
	Kind byte
	Row  []byte
	key  []byte
}

const viewLoggedKind = "viewlogged"

// viewLog is the engine's view-log state.
type viewLog struct {
	once   sync.Once
	err    error
	mu     sync.Mutex // serialises changes to tables
	tables atomic.Pointer[map[uint64]bool]
	seq    atomic.Uint64
	notify chan struct{}
}

func viewLogPrefix(tableID uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{tagViewLog}, tableID)
}

// load reads which tables are logged, and the last sequence, once.
func (e *Engine) viewLogLoad() error {
	v := &e.views
	v.once.Do(func() {
		v.notify = make(chan struct{}, 1)
		tables := map[uint64]bool{}
		it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: storage.MetaPrefix(viewLoggedKind), UpperBound: storage.PrefixEnd(storage.MetaPrefix(viewLoggedKind))})
		if err != nil {
			v.err = err
			return
		}
		n := len(storage.MetaPrefix(viewLoggedKind))
		for ok := it.First(); ok; ok = it.Next() {
			if k := it.Key(); len(k) == n+8 {
				tables[binary.BigEndian.Uint64(k[n:])] = true
			}
		}
		if err := it.Close(); err != nil {
			v.err = err
			return
		}
		v.tables.Store(&tables)
		it, err = e.store.NewIter(&pebble.IterOptions{LowerBound: []byte{tagViewLog}, UpperBound: []byte{tagViewLog + 1}})
		if err != nil {
			v.err = err
			return
		}
		if it.Last() && len(it.Key()) == 17 {
			v.seq.Store(binary.BigEndian.Uint64(it.Key()[9:]))
		}
		v.err = it.Close()
	})
	return v.err
}

// viewLogged says whether writes to the table are logged for its views.
func (e *Engine) viewLogged(tableID uint64) bool {
	if e.viewLogLoad() != nil {
		return false
	}
	t := e.views.tables.Load()
	return t != nil && (*t)[tableID]
}

// SetViewLogged turns a table's view log on or off (off deletes its
// entries). It persists: a restarted engine logs the same tables from its
// first write. Turning it on takes every row lock, so each later commit is
// logged and every earlier one is visible to a scan started after it.
func (e *Engine) SetViewLogged(tableID uint64, on bool) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	if err := e.viewLogLoad(); err != nil {
		return err
	}
	v := &e.views
	v.mu.Lock()
	defer v.mu.Unlock()
	cur := *v.tables.Load()
	if cur[tableID] == on {
		return nil
	}
	unlock := e.lockAllRows()
	defer unlock()
	b := e.store.NewBatch()
	defer b.Close()
	key := storage.MetaKey(viewLoggedKind, string(binary.BigEndian.AppendUint64(nil, tableID)))
	var err error
	if on {
		err = b.Set(key, nil, nil)
	} else {
		if err = b.Delete(key, nil); err == nil {
			err = b.DeleteRange(viewLogPrefix(tableID), viewLogPrefix(tableID+1), nil)
		}
	}
	if err != nil {
		return err
	}
	if err := e.commit(b); err != nil {
		return err
	}
	next := make(map[uint64]bool, len(cur)+1)
	for id := range cur {
		next[id] = true
	}
	if on {
		next[tableID] = true
	} else {
		delete(next, tableID)
	}
	v.tables.Store(&next)
	return nil
}

// ViewLogNotify returns a channel that receives when entries were logged
// (possibly just before their commit lands).
func (e *Engine) ViewLogNotify() <-chan struct{} {
	if e.viewLogLoad() != nil {
		return nil
	}
	return e.views.notify
}

// logView adds an entry to b, a change to a table, if the table is logged.
func (e *Engine) logView(b *pebble.Batch, tableID uint64, kind byte, row []byte) error {
	k := binary.BigEndian.AppendUint64(viewLogPrefix(tableID), e.views.seq.Add(1))
	v := append([]byte{kind}, row...)
	if err := b.Set(k, v, nil); err != nil {
		return err
	}
	select {
	case e.views.notify <- struct{}{}:
	default:
	}
	return nil
}

// logViewRows logs rows (nil: rows the commit cannot name; recs then name
// them when they can) of a commit to m in b.
func (e *Engine) logViewRows(b *pebble.Batch, m *Meta, rows [][]byte, recs []changestream.Record) error {
	if !e.viewLogged(m.ID) {
		return nil
	}
	if rows == nil {
		if len(recs) == 0 {
			return e.logView(b, m.ID, ViewLogUnknown, nil)
		}
		for _, r := range recs {
			rows = append(rows, r.RowKey)
		}
	}
	var prev []byte
	for i, r := range rows {
		if i > 0 && bytes.Equal(r, prev) {
			continue
		}
		prev = r
		if err := e.logView(b, m.ID, ViewLogRow, r); err != nil {
			return err
		}
	}
	return nil
}

// logViewDropped logs that rows starting with prefix (all: every row) went.
func (e *Engine) logViewDropped(b *pebble.Batch, m *Meta, prefix []byte, all bool) error {
	if !e.viewLogged(m.ID) {
		return nil
	}
	if all {
		prefix = nil
	}
	return e.logView(b, m.ID, ViewLogDropped, prefix)
}

// ReadViewLog returns up to limit of a table's oldest view-log entries.
func (e *Engine) ReadViewLog(tableID uint64, limit int) ([]ViewLogEntry, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: viewLogPrefix(tableID), UpperBound: viewLogPrefix(tableID + 1)})
	if err != nil {
		return nil, err
	}
	var out []ViewLogEntry
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		v := it.Value()
		if len(v) == 0 {
			it.Close()
			return nil, fmt.Errorf("%w: empty view log entry", storage.ErrCorruptKey)
		}
		out = append(out, ViewLogEntry{Kind: v[0], Row: bytes.Clone(v[1:]), key: bytes.Clone(it.Key())})
	}
	return out, it.Close()
}

// ViewBatch is an atomic change to view state (and the view-log entries it
// consumed). Reads through it see its own writes.
type ViewBatch struct {
	e *Engine
	b *pebble.Batch
}

// NewViewBatch starts a view batch. Close it when done.
func (e *Engine) NewViewBatch() *ViewBatch {
	return &ViewBatch{e: e, b: e.store.NewIndexedBatch()}
}

// ViewSpace is the key prefix of a view's state.
func ViewSpace(view string) []byte {
	k := []byte{tagViewState}
	for _, c := range []byte(view) {
		if c == 0 {
			k = append(k, 0, 0xFF)
			continue
		}
		k = append(k, c)
	}
	return append(k, 0, 1)
}

// Set sets a key of a view's state (space from ViewSpace).
func (vb *ViewBatch) Set(space, key, val []byte) error {
	return vb.b.Set(append(bytes.Clone(space), key...), val, nil)
}

// Delete deletes a key of a view's state.
func (vb *ViewBatch) Delete(space, key []byte) error {
	return vb.b.Delete(append(bytes.Clone(space), key...), nil)
}

// DeleteSpace deletes all of a view's state.
func (vb *ViewBatch) DeleteSpace(space []byte) error {
	return vb.b.DeleteRange(space, storage.PrefixEnd(space), nil)
}

// Consumed deletes view-log entries read with ReadViewLog.
func (vb *ViewBatch) Consumed(entries []ViewLogEntry) error {
	for _, en := range entries {
		if err := vb.b.Delete(en.key, nil); err != nil {
			return err
		}
	}
	return nil
}

// Get reads a key of a view's state, this batch's writes included.
func (vb *ViewBatch) Get(space, key []byte) ([]byte, bool, error) {
	v, closer, err := vb.b.Get(append(bytes.Clone(space), key...))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer closer.Close()
	return bytes.Clone(v), true, nil
}

// Scan calls fn for the keys of a view's state in [lo, hi) (hi nil: to the
// end of the space), in order or reversed, this batch's writes included,
// until fn returns false.
func (vb *ViewBatch) Scan(space, lo, hi []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	return scanSpace(vb.b, space, lo, hi, reverse, fn)
}

// Len is the size of the batch so far.
func (vb *ViewBatch) Len() int { return vb.b.Len() }

// Commit commits the batch (durable with the next synced commit).
func (vb *ViewBatch) Commit() error {
	if err := vb.e.enter(); err != nil {
		return err
	}
	defer vb.e.leave()
	// Unsynced and ungated: no table read waits for view state, and a
	// crash that loses the batch loses the log entries' deletion with it,
	// so the entries are consumed again.
	return vb.e.commitUngated(vb.b, pebble.NoSync)
}

// Close releases the batch.
func (vb *ViewBatch) Close() { vb.b.Close() }

// ScanViewState is ViewBatch.Scan over the committed state.
func (e *Engine) ScanViewState(space, lo, hi []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	return scanSpace(e.store, space, lo, hi, reverse, fn)
}

func scanSpace(r pebble.Reader, space, lo, hi []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	o := &pebble.IterOptions{LowerBound: append(bytes.Clone(space), lo...), UpperBound: storage.PrefixEnd(space)}
	if hi != nil {
		o.UpperBound = append(bytes.Clone(space), hi...)
	}
	it, err := r.NewIter(o)
	if err != nil {
		return err
	}
	ok := it.First()
	if reverse {
		ok = it.Last()
	}
	for ; ok; ok = nextOrPrev(it, reverse) {
		more, err := fn(it.Key()[len(space):], it.Value())
		if err != nil {
			it.Close()
			return err
		}
		if !more {
			break
		}
	}
	return it.Close()
}

func nextOrPrev(it *pebble.Iterator, reverse bool) bool {
	if reverse {
		return it.Prev()
	}
	return it.Next()
}

// logViewDeleted logs the rows a row deletion policy deleted.
func (e *Engine) logViewDeleted(b *pebble.Batch, m *Meta, deleted []DeletedRow) error {
	if !e.viewLogged(m.ID) {
		return nil
	}
	for _, d := range deleted {
		if err := e.logView(b, m.ID, ViewLogRow, d.Key); err != nil {
			return err
		}
	}
	return nil
}

// ViewLogged says whether the table's writes are logged for its views.
func (e *Engine) ViewLogged(tableID uint64) bool { return e.viewLogged(tableID) }
