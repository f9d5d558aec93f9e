package table

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
	"github.com/ebbtable/ebbtable/storage"
)

// The engine's side of a node's shared commit log (storage/commitlog.go,
// docs/scale-out.md "Automatic failover"): every batch of user writes
// (the Data API's mutations, CheckAndMutate, ReadModifyWrite, and
// DropRowRange) goes to the log before Pebble, and is refused when the log
// refuses it; a node recovering a dead node's tablet replays the records
// on its own engine, keeping only the cells and GC agenda entries of the
// tablet's rows.

// CommitLog receives the batches of user writes before they are applied.
type CommitLog interface {
	// Append makes repr durable and returns its sequence number; an error
	// refuses the write (which is then not applied).
	Append(repr []byte) (uint64, error)
	// Finished says record seq is applied (or failed to be).
	Finished(seq uint64)
}

type commitLogBox struct{ l CommitLog }

// SetCommitLog sends every later batch of user writes to l first (nil:
// none).
func (e *Engine) SetCommitLog(l CommitLog) {
	if l == nil {
		e.clog.Store(nil)
		return
	}
	e.clog.Store(&commitLogBox{l})
}

// logBatch appends b to the commit log, if there is one, and returns the
// call that marks it applied.
func (e *Engine) logBatch(b *pebble.Batch) (func(), error) {
	box := e.clog.Load()
	if box == nil {
		return func() {}, nil
	}
	seq, err := box.l.Append(b.Repr())
	if err != nil {
		return nil, err
	}
	return func() { box.l.Finished(seq) }, nil
}

// RowSpan is rows [Start, End) of a table; an empty End: to its end.
type RowSpan struct {
	Start, End []byte
}

// ReplayLogged applies what a commit log record (a batch, as Append got
// it) wrote into table name's rows within spans: its cells (sets, point
// and range deletions, range deletions clamped to the spans) and GC
// agenda entries, and the replication tombstones of those rows; everything
// else in it (other tables' rows, cells of families dropped since,
// change-stream records, other metadata) is left out. It returns how many
// keys it applied.
// Records are replayed in log order onto the tablet's checkpoint; one the
// checkpoint already holds changes nothing when replayed again, since a
// later record of the same row replays after it.
func (e *Engine) ReplayLogged(instance, name string, spans []RowSpan, repr []byte) (int, error) {
	if err := e.enter(); err != nil {
		return 0, err
	}
	defer e.leave()
	m, err := e.Table(instance, name)
	if err != nil {
		return 0, err
	}
	type bound struct{ lo, hi []byte }
	bounds := make([]bound, 0, len(spans))
	for _, s := range spans {
		lo, hi, err := spanBounds(m.ID, s.Start, s.End)
		if err != nil {
			return 0, err
		}
		bounds = append(bounds, bound{lo, hi})
	}
	inSpans := func(k []byte) bool {
		for _, b := range bounds {
			if bytes.Compare(k, b.lo) >= 0 && bytes.Compare(k, b.hi) < 0 {
				return true
			}
		}
		return false
	}
	rowIn := func(row []byte) bool {
		for _, s := range spans {
			if inRows(row, s.Start, s.End) {
				return true
			}
		}
		return false
	}
	tombs := tableTombstones(m.ID)
	tombBounds := make([][2][]byte, 0, len(bounds))
	for _, bd := range bounds {
		tombBounds = append(tombBounds, [2][]byte{bd.lo, bd.hi})
	}
	b := e.store.NewBatch()
	defer b.Close()
	n := 0
	r := batchrepr.Read(repr)
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			return 0, fmt.Errorf("%w: commit log record: %v", ErrDataLoss, err)
		}
		if !ok {
			break
		}
		if len(k) > 0 && k[0] == storage.AgendaPrefix(m.ID)[0] {
			id, _, row, err := storage.DecodeAgendaKey(k)
			if err != nil || id != m.ID || !rowIn(row) {
				continue
			}
		} else if bytes.HasPrefix(k, tombs) {
			// A replication tombstone of one of the spans' rows (takeover.go).
			if !inTombSpans(m.ID, k, tombBounds) {
				continue
			}
		} else if kind == pebble.InternalKeyKindRangeDelete {
			for _, bd := range bounds {
				lo, hi := k, v
				if bytes.Compare(lo, bd.lo) < 0 {
					lo = bd.lo
				}
				if bytes.Compare(hi, bd.hi) > 0 {
					hi = bd.hi
				}
				if bytes.Compare(lo, hi) < 0 {
					if err := b.DeleteRange(lo, hi, nil); err != nil {
						return 0, err
					}
					n++
				}
			}
			continue
		} else if !inSpans(k) {
			continue
		} else if d, err := storage.DecodeCellKey(k); err == nil && droppedFamily(m, d.FamilyID) {
			// A cell of a family dropped since it was logged (takeover.go):
			// it would be invisible, and the collector no longer looks
			// for it.
			continue
		}
		switch kind {
		case pebble.InternalKeyKindSet, pebble.InternalKeyKindSetWithDelete:
			err = b.Set(k, v, nil)
		case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete, pebble.InternalKeyKindDeleteSized:
			err = b.Delete(k, nil)
		case pebble.InternalKeyKindMerge:
			err = b.Merge(k, v, nil)
		default:
			continue
		}
		if err != nil {
			return 0, err
		}
		n++
	}
	if n == 0 {
		return 0, nil
	}
	e.cellGen.Add(1) // cells not written through applyOne (columnNewest)
	if err := e.commit(b); err != nil {
		return 0, err
	}
	e.gcGen.bump(m.ID)
	return n, nil
}

// TrimLocal frees the copy of the local levels' keys an export holds once
// it has been stored elsewhere; the export keeps its hold on the shared
// SSTables (until Release) but cannot be marshaled again.
func (x *SpanExport) TrimLocal() {
	x.local, x.encoded = nil, nil
}

// dropMarkerPrefix starts the WAL-only entry (Pebble's LogData: in the
// batch, never in the memtable) DropRowRange adds to its batch, so a
// commit log reader can tell that the node applied a drop of the table.
const dropMarkerPrefix = "ebbtable.drop."

func dropMarker(tableID uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(dropMarkerPrefix), tableID)
}

// LoggedDrop reports whether a commit log record is a DropRowRange of
// table tableID.
func LoggedDrop(repr []byte, tableID uint64) bool {
	want := dropMarker(tableID)
	r := batchrepr.Read(repr)
	for {
		kind, k, _, ok, err := r.Next()
		if err != nil || !ok {
			return false
		}
		if kind == pebble.InternalKeyKindLogData && bytes.Equal(k, want) {
			return true
		}
	}
}

// DropInSpans deletes the rows of a table within spans that DropRowRange
// with prefix (or all) deletes: a schema change a dead node had not
// applied, applied to its tablets once rebuilt here.
func (e *Engine) DropInSpans(instance, name string, prefix []byte, all bool, spans []RowSpan) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	m, err := e.Table(instance, name)
	if err != nil {
		return err
	}
	dlo, dhi := storage.TablePrefix(m.ID), storage.TableEnd(m.ID)
	if !all {
		if len(prefix) == 0 {
			return fmt.Errorf("%w: row key prefix must not be empty", ErrInvalid)
		}
		dlo, dhi = storage.RowPrefixScanStart(m.ID, prefix), storage.RowPrefixScanEnd(m.ID, prefix)
	}
	b := e.store.NewBatch()
	defer b.Close()
	n := 0
	for _, s := range spans {
		lo, hi, err := spanBounds(m.ID, s.Start, s.End)
		if err != nil {
			return err
		}
		if bytes.Compare(dlo, lo) > 0 {
			lo = dlo
		}
		if bytes.Compare(dhi, hi) < 0 {
			hi = dhi
		}
		if bytes.Compare(lo, hi) < 0 {
			if err := b.DeleteRange(lo, hi, nil); err != nil {
				return err
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	e.cellGen.Add(1)
	return e.commit(b)
}
