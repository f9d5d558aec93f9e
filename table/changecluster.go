package table

import "github.com/ebbtable/ebbtable/changestream"

// Change streams in cluster mode (docs/change-streams.md, "In a cluster"):
// a tablet's records travel with it when it moves, so the node that owns
// a tablet holds the whole retained history of its rows. Three things make
// that safe:
//
//   - every node records under its own tiebreaker, so a record copied from
//     another node never lands on the key of one of this node's own (commit
//     timestamps are per node and may coincide);
//   - the target of a move imports the source's records of the span under
//     their original keys (ImportChanges), so a continuation token means
//     the same position on either node;
//   - the target raises its commit sequence past the last record it
//     imported (ObserveCommit), so a row's records keep increasing commit
//     timestamps across owners, and the records written after the move
//     follow every position a reader on the source could have reached.

// SetChangeTiebreaker sets the tiebreaker of the records this engine
// writes from now on (0, the default, for a node alone).
func (e *Engine) SetChangeTiebreaker(tb int32) { e.changeTiebreaker.Store(tb) }

// ChangeTiebreaker is the tiebreaker of the records this engine writes.
func (e *Engine) ChangeTiebreaker() int32 { return e.changeTiebreaker.Load() }

// CommitHighWater is the highest commit timestamp handed out so far (or
// closed): every record committed later has a greater one.
func (e *Engine) CommitHighWater() int64 {
	e.seq.mu.Lock()
	defer e.seq.mu.Unlock()
	return e.seq.last
}

// ObserveCommit raises the commit sequence to ts: later records commit
// after it (a hybrid logical clock, as replication's apply does).
func (e *Engine) ObserveCommit(ts int64) { e.seq.observe(ts) }

// SpanChanges returns the records of table m at or after key lower, up to
// commit timestamp upTo, whose row is in [start, end) (end empty: no end),
// up to limit records examined; more is true when the limit stopped it,
// and next is then where to go on from.
func (e *Engine) SpanChanges(m *Meta, lower []byte, upTo int64, start, end []byte, limit int) (recs []changestream.Record, next []byte, more bool, err error) {
	b, err := e.ReadRowChanges(m, lower, upTo, 0, limit, changestream.RowsIn(start, end))
	if err != nil {
		return nil, nil, false, err
	}
	if b.Full && b.Examined > 0 {
		return b.Records, changestream.After(m.ID, b.Last), true, nil
	}
	return b.Records, nil, false, nil
}

// ReadRowChanges is ReadChangesUntil keeping only the records keep wants,
// up to limit kept and scan examined (changestream.ReadRows): the records
// it drops are not decoded.
func (e *Engine) ReadRowChanges(m *Meta, lower []byte, closed int64, limit, scan int, keep changestream.Keep) (changestream.Batch, error) {
	if err := e.checkOpen(); err != nil {
		return changestream.Batch{}, err
	}
	return changestream.ReadRows(changeStore{e.store}, m.ID, lower, closed, limit, scan, keep)
}

// ImportChanges writes records read from another node's stream of the same
// table (same table id) under their own positions, in one synced batch.
// Writing one again is harmless: the key and the value are the same.
func (e *Engine) ImportChanges(m *Meta, recs []changestream.Record) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	if len(recs) == 0 {
		return nil
	}
	b := e.store.NewBatch()
	defer b.Close()
	var high int64
	for i := range recs {
		if err := b.Set(changestream.Key(m.ID, recs[i].Position), recs[i].Encode(), nil); err != nil {
			return err
		}
		high = max(high, recs[i].Position.Commit)
	}
	if err := e.commit(b); err != nil {
		return err
	}
	e.seq.observe(high)
	return nil
}
