package table

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
)

// MutationSource is the entries of a MutateRows read where they lie: the
// server reads them from the request's wire bytes, so no message, Mutation
// or prepared array is built per request (MutateRowsFrom).
type MutationSource interface {
	// Len is the number of entries.
	Len() int
	// Rewind goes back to before the first entry.
	Rewind()
	// NextEntry moves to the next entry and returns its row key and its
	// number of mutations; ok is false after the last entry.
	NextEntry() (row []byte, muts int, ok bool)
	// NextMutation fills mu with the current entry's next mutation; false
	// after its last.
	NextMutation(mu *Mutation) bool
}

// MutateRowsFrom is MutateRows reading its entries from src, twice: once
// to validate every entry (one whose check fails gets its error and is not
// written), then, under the rows' locks, to put the valid ones straight
// into the batch. Each pass checks a mutation with the same prepareOne
// (the clock read once for both), so the second cannot fail where the
// first passed. The row keys, qualifiers and values src returns must stay
// unchanged until the call returns (change-stream records keep them).
func (e *Engine) MutateRowsFrom(instance, table string, src MutationSource) ([]error, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	m, err := e.Table(instance, table)
	if err != nil {
		return nil, err
	}
	n := src.Len()
	errs := make([]error, n)
	rows := make([][]byte, 0, n)
	needsRead := false
	nCells := 0
	prepNow := clock.MillisTruncated(e.clock.Now())
	var mu Mutation
	var p prepared
	src.Rewind()
	for i := 0; i < n; i++ {
		row, k, ok := src.NextEntry()
		if !ok {
			return nil, fmt.Errorf("table: a mutation source of %d entries ended after %d", n, i)
		}
		if err := prepareEntry(row, k); err != nil {
			errs[i] = err
			continue
		}
		reads := false
		for j := 0; src.NextMutation(&mu); j++ {
			if err := e.prepareOne(&p, m, j, &mu, prepNow); err != nil {
				errs[i] = err
				break
			}
			reads = reads || p.Kind != SetCell
		}
		if errs[i] != nil {
			continue
		}
		rows = append(rows, row)
		nCells += k
		needsRead = needsRead || reads
	}
	if len(rows) == 0 {
		return errs, nil
	}
	unlock := e.LockRows(m.ID, rows)
	var b *pebble.Batch
	if needsRead {
		b = e.store.NewIndexedBatch()
	} else {
		b = e.store.NewBatch()
	}
	var recs []changestream.Record
	stamp := e.writeStamp()
	now := clock.MillisTruncated(e.clock.Now())
	var cells cellsOnly
	cells.only = !needsRead && nCells <= cellsOnlyMax
	defer cells.close()
	fail := func(err error) ([]error, error) {
		e.endStamp(stamp)
		e.forgetAgendaMarks(m.ID, rows)
		unlock()
		b.Close()
		return nil, err
	}
	src.Rewind()
	for i := 0; i < n; i++ {
		row, _, _ := src.NextEntry()
		if errs[i] != nil {
			continue
		}
		rec := e.userRecord(m, row)
		for j := 0; src.NextMutation(&mu); j++ {
			if err := e.prepareOne(&p, m, j, &mu, prepNow); err != nil {
				return fail(fmt.Errorf("table: entry %d checked, then refused: %w", i, err))
			}
			q := p.at(now)
			written, err := e.applyOne(b, m, row, q, stamp)
			if err == nil {
				err = cells.add(e, m, row, q)
			}
			if err != nil {
				return fail(err)
			}
			if rec != nil {
				rec.Mods = append(rec.Mods, modWritten(q, written))
			}
		}
		if rec != nil {
			recs = append(recs, *rec)
		}
	}
	wait, err := e.commitVisibleAt(b, m, rows, recs, stamp.Commit, cells.get())
	if err != nil {
		e.forgetAgendaMarks(m.ID, rows)
	}
	unlock()
	if err != nil {
		return nil, err
	}
	if err := wait(); err != nil {
		return nil, err
	}
	return errs, nil
}
