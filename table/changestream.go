package table

import (
	"bytes"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/storage"
)

// Change-stream retention limits, as the Bigtable Admin API sets them.
const (
	MinChangeStreamRetention = 24 * time.Hour
	MaxChangeStreamRetention = 7 * 24 * time.Hour
)

// ChangeStream is a table's change-stream configuration.
type ChangeStream struct {
	// Retention is how long records are kept.
	Retention time.Duration `json:"retention"`
	// EnabledMicros is when the stream was (last) turned on; nothing
	// before it can be read.
	EnabledMicros int64 `json:"enabled_micros"`
}

// Horizon is the oldest commit time a reader may start from at time now.
func (c *ChangeStream) Horizon(now int64) int64 {
	return max(now-c.Retention.Microseconds(), c.EnabledMicros)
}

func validRetention(d time.Duration) error {
	if d < MinChangeStreamRetention || d > MaxChangeStreamRetention {
		return fmt.Errorf("%w: change stream retention %v must be between 1 day and 7 days", ErrInvalid, d)
	}
	return nil
}

// SetChangeStream turns a table's change stream on with the given retention,
// changes the retention of a stream already on, or (retention 0) turns it
// off, deleting its records.
func (e *Engine) SetChangeStream(instance, name string, retention time.Duration) (*Meta, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	if retention != 0 {
		if err := validRetention(retention); err != nil {
			return nil, err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old, ok := e.tables[catalogKey(instance, name)]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrTableNotFound, name)
	}
	// No write may be half-way through while the stream turns on or off:
	// every write commits wholly before (unrecorded) or after (recorded).
	unlock := e.lockAllRows()
	defer unlock()
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	m := old.clone()
	b := e.store.NewBatch()
	defer b.Close()
	switch {
	case retention == 0:
		m.ChangeStream = nil
		// While replicating, peers still need the records; trimming
		// removes them once replication's retention passes.
		if _, repl := e.Replicating(); !repl {
			if err := b.DeleteRange(changestream.TableStart(m.ID), changestream.TableEnd(m.ID), nil); err != nil {
				return nil, err
			}
		}
	case m.ChangeStream != nil:
		m.ChangeStream = &ChangeStream{Retention: retention, EnabledMicros: m.ChangeStream.EnabledMicros}
	default:
		m.ChangeStream = &ChangeStream{Retention: retention, EnabledMicros: e.nowMicros()}
	}
	enc, err := encodeMeta(m)
	if err != nil {
		return nil, err
	}
	if err := b.Set(tableMetaKey(m.Instance, m.Name), enc, nil); err != nil {
		return nil, err
	}
	if err := e.commit(b); err != nil {
		return nil, err
	}
	e.tables[catalogKey(m.Instance, m.Name)] = m
	if m.ChangeStream != nil {
		e.streams.Store(m.ID, m.ChangeStream)
	} else {
		e.streams.Delete(m.ID)
	}
	return m, nil
}

// streaming says whether a table has a change stream now. Callers hold the
// row locks of what they write, so the answer holds until they commit.
func (e *Engine) streaming(tableID uint64) bool {
	if e.replCluster.Load() != nil {
		return true // peers pull every table's records
	}
	_, ok := e.streams.Load(tableID)
	return ok
}

// commitRecorded adds the records of a change to the given rows of m (nil:
// rows it cannot name) to its batch, under one fresh commit timestamp, and
// commits both together: a record is never written without its change, nor
// a change without its record. Tables without a change stream just commit.
//
// gate makes reads of the rows wait for a synced commit (durable.go); the
// collector's deletions do without (see CommitSystem).
func (e *Engine) commitRecorded(b *pebble.Batch, m *Meta, rows [][]byte, recs []changestream.Record, opts *pebble.WriteOptions, gate bool) error {
	if !e.streaming(m.ID) || len(recs) == 0 {
		return e.commitTable(b, m, rows, opts, gate)
	}
	ts := e.seq.begin(e.nowMicros())
	defer e.seq.end(ts)
	if e.beforeRecordedCommit != nil {
		e.beforeRecordedCommit(recs)
	}
	if err := e.addRecords(b, m, ts, recs); err != nil {
		return err
	}
	return e.commitTable(b, m, rows, opts, gate)
}

// addRecords adds a transaction's records, at commit timestamp ts, to b.
func (e *Engine) addRecords(b *pebble.Batch, m *Meta, ts int64, recs []changestream.Record) error {
	tb := e.changeTiebreaker.Load()
	for i := range recs {
		k := changestream.Key(m.ID, changestream.Position{Commit: ts, Tiebreaker: tb, Index: uint32(i)})
		if err := b.Set(k, recs[i].Encode(), nil); err != nil {
			return err
		}
	}
	return nil
}

// CommitSystem commits a background job's batch, a change to the given rows
// of m, together with the records describing it, if the table has a change
// stream. The caller holds the rows' locks. sync says whether to wait for
// the WAL. Reads do not wait for it: the collector deletes cells readers
// cannot see (in the default mode), and making every read of the rows of a
// batch wait for its fsync would cost foreground reads several times their
// idle p99 during a pass; a sync makes the deletions durable within one
// fsync, and the pass syncs once more before it reports.
func (e *Engine) CommitSystem(b *DeleteBatch, m *Meta, rows [][]byte, recs []changestream.Record, sync bool) error {
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	// The batch may delete the rows' agenda entries (agendamarks.go).
	e.forgetAgendaMarks(m.ID, rows)
	logged, err := e.logViewRows(b.b, m, rows, recs) // viewlog.go
	defer logged()
	if err != nil {
		return err
	}
	if b.inst {
		defer e.dropInstanceMetaCache() // instancecache.go
	}
	return e.commitRecorded(b.b, m, rows, recs, opts, false)
}

// SyncWAL makes every commit so far durable, the unsynced ones (such as the
// collector's deletions in the default visibility mode) included: one
// synced WAL write. A failure fails the engine, as any WAL sync.
func (e *Engine) SyncWAL() error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	b := e.store.NewBatch()
	defer b.Close()
	if err := b.LogData([]byte("sync"), nil); err != nil {
		return err
	}
	return e.commitUngated(b, pebble.Sync) // it changes no data: no read waits
}

// ChangeBatch is what one read of a change stream returned.
type ChangeBatch struct {
	Records []changestream.Record
	// Closed is the closed timestamp the read ran at: every record at or
	// below it has been returned (or lies past Records' limit).
	Closed int64
	// Full is true when the read stopped at its limit.
	Full bool
}

// ReadChanges reads up to limit records of a table's stream from key lower
// (changestream.TimeKey or changestream.After), up to the closed timestamp.
func (e *Engine) ReadChanges(m *Meta, lower []byte, limit int) (ChangeBatch, error) {
	if err := e.checkOpen(); err != nil {
		return ChangeBatch{}, err
	}
	closed := e.seq.closed(e.nowMicros())
	recs, err := changestream.Read(changeStore{e.store}, m.ID, lower, closed, limit)
	if err != nil {
		return ChangeBatch{}, err
	}
	return ChangeBatch{Records: recs, Closed: closed, Full: limit > 0 && len(recs) >= limit}, nil
}

// ReadChangesUntil is ReadChanges at a closed timestamp the caller took
// earlier (ClosedTimestamp), so several tables can be read at one.
func (e *Engine) ReadChangesUntil(m *Meta, lower []byte, closed int64, limit int) (ChangeBatch, error) {
	if err := e.checkOpen(); err != nil {
		return ChangeBatch{}, err
	}
	recs, err := changestream.Read(changeStore{e.store}, m.ID, lower, closed, limit)
	if err != nil {
		return ChangeBatch{}, err
	}
	return ChangeBatch{Records: recs, Closed: closed, Full: limit > 0 && len(recs) >= limit}, nil
}

// ChangesNotify returns a channel closed when the next recorded commit ends.
func (e *Engine) ChangesNotify() <-chan struct{} { return e.seq.changed() }

// ClosedTimestamp is the change streams' closed timestamp now.
func (e *Engine) ClosedTimestamp() int64 { return e.seq.closed(e.nowMicros()) }

// lastCommit finds the newest record of any table, so commit timestamps
// keep increasing across restarts even if the clock stepped back.
func lastCommit(st *storage.DB, tables map[string]*Meta) (int64, error) {
	var last int64
	for _, m := range tables {
		p, ok, err := changestream.Last(changeStore{st}, m.ID)
		if err != nil {
			return 0, err
		}
		if ok && p.Commit > last {
			last = p.Commit
		}
	}
	return last, nil
}

// Streaming says whether a table has a change stream now; background jobs
// ask it holding the row locks of the rows they change, then describe their
// changes to CommitSystem.
func (e *Engine) Streaming(tableID uint64) bool { return e.streaming(tableID) }

// userRecord starts the record of a user's change to a row, if the table
// has a change stream. The row's lock must be held.
func (e *Engine) userRecord(m *Meta, row []byte) *changestream.Record {
	if !e.streaming(m.ID) {
		return nil
	}
	return &changestream.Record{Type: changestream.User, Reason: changestream.ReasonUser, RowKey: bytes.Clone(row)}
}

// dropRowRecords lists the rows of [lo, hi) as DeleteFromRow records.
func (e *Engine) dropRowRecords(lo, hi []byte) ([]changestream.Record, error) {
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var recs []changestream.Record
	for ok := it.First(); ok; {
		k := it.Key()
		prefix := bytes.Clone(k[:storage.RowKeyLen(k)])
		row, err := storage.DecodeRowKey(prefix)
		if err != nil {
			return nil, err
		}
		recs = append(recs, changestream.Record{Type: changestream.User, Reason: changestream.ReasonDropRowRange,
			TransactionTag: changestream.TagDropRowRange, RowKey: row, Mods: []changestream.Mod{{Kind: changestream.DeleteFromRow}}})
		ok = it.SeekGE(storage.PrefixEnd(prefix))
	}
	return recs, it.Error()
}

func modOf(p prepared) changestream.Mod {
	switch p.Kind {
	case SetCell, AddToCell, MergeToCell:
		return changestream.Mod{Kind: changestream.SetCell, Family: p.Family, Qualifier: p.Qualifier, Timestamp: p.Timestamp, Value: p.Value, ExpireAt: p.ExpireAt}
	case DeleteFromColumn:
		return changestream.Mod{Kind: changestream.DeleteFromColumn, Family: p.Family, Qualifier: p.Qualifier, StartTS: p.StartTS, EndTS: p.EndTS}
	case DeleteFromFamily:
		return changestream.Mod{Kind: changestream.DeleteFromFamily, Family: p.Family}
	default:
		return changestream.Mod{Kind: changestream.DeleteFromRow}
	}
}

// TrimChanges deletes a table's change-stream records committed before
// cutoff (microseconds) and returns how many there were.
func (e *Engine) TrimChanges(m *Meta, cutoff int64) (int64, error) {
	if err := e.checkOpen(); err != nil {
		return 0, err
	}
	lo, hi := changestream.TableStart(m.ID), changestream.TimeKey(m.ID, max(cutoff, 0))
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, err
	}
	var n int64
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	b := e.store.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(lo, hi, nil); err != nil {
		return 0, err
	}
	// Not synced: a trim lost in a crash is done again by the next pass.
	if err := e.commitOpts(b, pebble.NoSync); err != nil {
		return 0, err
	}
	return n, nil
}
