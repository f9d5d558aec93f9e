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
	notify chan struct{}
	// seqMu guards seq and inflight: the first sequence number of each
	// commit still logging or committing, so a reader knows below which
	// number every entry is committed (floor).
	seqMu    sync.Mutex
	seq      uint64
	inflight map[uint64]int
	// last is, per table, the highest sequence number given to one of its
	// entries since the log was loaded, and loaded the last number on disk
	// then (an entry of any table up to it may be there): ViewLogSince.
	last   map[uint64]uint64
	loaded uint64
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
		v.inflight, v.last = map[uint64]int{}, map[uint64]uint64{}
		if it.Last() && len(it.Key()) == 17 {
			v.seq = binary.BigEndian.Uint64(it.Key()[9:])
		}
		v.loaded = v.seq
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

// ViewLogNotify returns a channel that receives when a logged commit ends.
func (e *Engine) ViewLogNotify() <-chan struct{} {
	if e.viewLogLoad() != nil {
		return nil
	}
	return e.views.notify
}

// viewLogger adds a commit's entries to its batch. end must be called once
// the batch is committed, or will not be.
type viewLogger struct {
	e     *Engine
	b     *pebble.Batch
	id    uint64
	first uint64
}

func noLog() {}

// logger starts logging a commit to table m in b; nil when m is not logged.
func (e *Engine) logger(b *pebble.Batch, m *Meta) *viewLogger {
	if !e.viewLogged(m.ID) {
		return nil
	}
	return &viewLogger{e: e, b: b, id: m.ID}
}

func (l *viewLogger) add(kind byte, row []byte) error {
	v := &l.e.views
	v.seqMu.Lock()
	v.seq++
	seq := v.seq
	v.last[l.id] = seq
	if l.first == 0 {
		l.first = seq
		v.inflight[seq]++
	}
	v.seqMu.Unlock()
	k := binary.BigEndian.AppendUint64(viewLogPrefix(l.id), seq)
	return l.b.Set(k, append([]byte{kind}, row...), nil)
}

// end marks the commit done (committed or abandoned) and wakes the
// maintainer.
func (l *viewLogger) end() {
	v := &l.e.views
	if l.first == 0 {
		return
	}
	v.seqMu.Lock()
	if v.inflight[l.first]--; v.inflight[l.first] <= 0 {
		delete(v.inflight, l.first)
	}
	v.seqMu.Unlock()
	select {
	case v.notify <- struct{}{}:
	default:
	}
}

// floor is a sequence number below which every entry logged is committed
// (or never will be).
func (e *Engine) viewLogFloor() uint64 {
	v := &e.views
	v.seqMu.Lock()
	defer v.seqMu.Unlock()
	f := v.seq + 1
	for s := range v.inflight {
		f = min(f, s)
	}
	return f
}

// ViewLogSince reports whether a table may have view-log entries numbered
// from on (committed, or still committing): it is false only when no entry
// of the table was given such a number since the log was loaded, and none
// was on disk then. It reads no storage.
//
// A maintainer that consumed the log up to from (ReadViewLog's next) and
// gets false has nothing of the log to consume: an entry gets its number
// (add) before its batch commits, so every commit acknowledged before the
// call, and every one still committing, is counted; and ReadViewLog's next
// never passes an entry it did not return.
func (e *Engine) ViewLogSince(tableID, from uint64) bool {
	if e.viewLogLoad() != nil {
		return true
	}
	v := &e.views
	v.seqMu.Lock()
	defer v.seqMu.Unlock()
	return from <= v.loaded || v.last[tableID] >= from
}

// logViewRows logs rows (nil: rows the commit cannot name; recs then name
// them when they can) of a commit to m in b. Call the function it returns
// once the batch is committed or abandoned.
func (e *Engine) logViewRows(b *pebble.Batch, m *Meta, rows [][]byte, recs []changestream.Record) (func(), error) {
	l := e.logger(b, m)
	if l == nil {
		return noLog, nil
	}
	if rows == nil {
		if len(recs) == 0 {
			return l.end, l.add(ViewLogUnknown, nil)
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
		if err := l.add(ViewLogRow, r); err != nil {
			return l.end, err
		}
	}
	return l.end, nil
}

// logViewDropped logs that rows starting with prefix (all: every row) went.
func (e *Engine) logViewDropped(b *pebble.Batch, m *Meta, prefix []byte, all bool) (func(), error) {
	l := e.logger(b, m)
	if l == nil {
		return noLog, nil
	}
	if all {
		prefix = nil
	}
	return l.end, l.add(ViewLogDropped, prefix)
}

// ReadViewLog returns up to limit of a table's entries from sequence number
// from on, in order, and the number to read from next time once they are
// consumed: past every entry returned, and not past an entry that may yet
// commit. (Consumed entries leave deletion tombstones behind until a
// compaction; starting past them keeps a read from walking them all.)
func (e *Engine) ReadViewLog(tableID, from uint64, limit int) ([]ViewLogEntry, uint64, error) {
	if err := e.enter(); err != nil {
		return nil, from, err
	}
	defer e.leave()
	if err := e.viewLogLoad(); err != nil {
		return nil, from, err
	}
	floor := e.viewLogFloor()
	it, err := e.store.NewIter(&pebble.IterOptions{
		LowerBound: binary.BigEndian.AppendUint64(viewLogPrefix(tableID), from),
		UpperBound: viewLogPrefix(tableID + 1)})
	if err != nil {
		return nil, from, err
	}
	var out []ViewLogEntry
	next := max(from, floor)
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if len(v) == 0 || len(k) != 17 {
			it.Close()
			return nil, from, fmt.Errorf("%w: bad view log entry", storage.ErrCorruptKey)
		}
		seq := binary.BigEndian.Uint64(k[9:])
		if len(out) == limit {
			next = min(next, seq)
			break
		}
		out = append(out, ViewLogEntry{Kind: v[0], Row: bytes.Clone(v[1:]), key: bytes.Clone(k)})
	}
	return out, next, it.Close()
}

// ViewBatch is an atomic change to view state (and the view-log entries it
// consumed). Reads through it see its own writes.
type ViewBatch struct {
	e *Engine
	b *pebble.Batch
	// free are iterators finished scans left, reused by the next scan
	// (SetOptions refreshes their view of the batch): maintenance scans
	// each view's state once or more per round, and opening an iterator
	// loads a file of every level its bounds overlap. The view state they
	// read under the batch's own writes is the committed one when they
	// were opened; every writer of a view's state holds its table's
	// maintenance lock, as the batch's user does.
	free []*pebble.Iterator
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
	return getCopy(vb.b, append(bytes.Clone(space), key...))
}

// getCopy reads key from r and returns a copy of its value, or false when
// r has no such key.
func getCopy(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(key)
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
	lower, upper := spaceBounds(space, lo, hi)
	o := &pebble.IterOptions{LowerBound: lower, UpperBound: upper}
	var it *pebble.Iterator
	if n := len(vb.free); n > 0 {
		it, vb.free = vb.free[n-1], vb.free[:n-1]
		it.SetOptions(o)
	} else {
		var err error
		if it, err = vb.b.NewIter(o); err != nil {
			return err
		}
	}
	if err := walkSpace(it, space, reverse, fn); err != nil {
		it.Close()
		return err
	}
	vb.free = append(vb.free, it)
	return nil
}

// closeIters closes the iterators scans left.
func (vb *ViewBatch) closeIters() {
	for _, it := range vb.free {
		it.Close()
	}
	vb.free = nil
}

// Len is the size of the batch so far.
func (vb *ViewBatch) Len() int { return vb.b.Len() }

// Commit commits the batch (durable with the next synced commit).
func (vb *ViewBatch) Commit() error {
	if err := vb.e.enter(); err != nil {
		return err
	}
	defer vb.e.leave()
	vb.closeIters()
	// Unsynced and ungated: no table read waits for view state, and a
	// crash that loses the batch loses the log entries' deletion with it,
	// so the entries are consumed again.
	return vb.e.commitUngated(vb.b, pebble.NoSync)
}

// Close releases the batch.
func (vb *ViewBatch) Close() {
	vb.closeIters()
	vb.b.Close()
}

// GetViewState reads a key of a view's committed state.
func (e *Engine) GetViewState(space, key []byte) ([]byte, bool, error) {
	if err := e.enter(); err != nil {
		return nil, false, err
	}
	defer e.leave()
	return getCopy(e.store, append(bytes.Clone(space), key...))
}

// ScanViewState is ViewBatch.Scan over the committed state.
func (e *Engine) ScanViewState(space, lo, hi []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	return scanSpace(e.store, space, lo, hi, reverse, fn)
}

func scanSpace(r pebble.Reader, space, lo, hi []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	lower, upper := spaceBounds(space, lo, hi)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	err = walkSpace(it, space, reverse, fn)
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	return err
}

// walkSpace calls fn for the keys of it (positioned from its start, or its
// end if reverse), their space cut off, until fn returns false; then the
// iterator's error.
func walkSpace(it *pebble.Iterator, space []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	var ok bool
	if reverse {
		ok = it.Last()
	} else {
		ok = it.First()
	}
	for ; ok; ok = nextOrPrev(it, reverse) {
		more, err := fn(it.Key()[len(space):], it.Value())
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	return it.Error()
}

func nextOrPrev(it *pebble.Iterator, reverse bool) bool {
	if reverse {
		return it.Prev()
	}
	return it.Next()
}

// logViewDeleted logs the rows a row deletion policy deleted.
func (e *Engine) logViewDeleted(b *pebble.Batch, m *Meta, deleted []DeletedRow) (func(), error) {
	l := e.logger(b, m)
	if l == nil {
		return noLog, nil
	}
	for _, d := range deleted {
		if err := l.add(ViewLogRow, d.Key); err != nil {
			return l.end, err
		}
	}
	return l.end, nil
}

// ViewLogged says whether the table's writes are logged for its views.
func (e *Engine) ViewLogged(tableID uint64) bool { return e.viewLogged(tableID) }
