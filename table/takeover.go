package table

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/storage"
)

// What automatic failover (docs/scale-out.md, "Automatic failover") needs
// of the engine besides span exports and the commit log: a checkpoint of a
// deleted table's span (so an undelete after its owner died finds it), the
// replication tombstones of a span (they live outside the cell space, so
// a span export leaves them out), and dropped families marked again for
// the collector when a rebuilt tablet brings their cells back.

// ExportDeletedSpan is ExportSpan for a table deleted within the undelete
// retention: its data stays in the engine under its id, and a checkpoint
// of it lets another node rebuild the span if the table is undeleted
// after this node died. A deleted table has no GC agenda entries.
func (e *Engine) ExportDeletedSpan(ctx context.Context, instance, name string, tableID uint64, startRow, endRow []byte) (*SpanExport, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	e.mu.Lock()
	d, err := e.deletedRecord(instance, name)
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if d == nil || d.Meta.ID != tableID {
		return nil, fmt.Errorf("%w: no deleted table %s with id %d", ErrTableNotFound, name, tableID)
	}
	return e.exportSpan(ctx, d.Meta, instance, name, startRow, endRow, false)
}

// tombstoneRowKey turns a tombstone key of table id into a key that sorts
// among the table's cell keys as the tombstone's row does (the cell
// space's prefix byte in place of the metadata prefix), or nil if k is not
// one of the table's tombstones.
func tombstoneRowKey(id uint64, k []byte) []byte {
	p := tableTombstones(id)
	if !bytes.HasPrefix(k, p) {
		return nil
	}
	meta := storage.MetaPrefix(metaKindTombstone)
	return append([]byte{storage.TablePrefix(id)[0]}, k[len(meta):]...)
}

// inTombSpans reports whether tombstone key k of table id is of a row in
// one of the cell-key bounds.
func inTombSpans(id uint64, k []byte, bounds [][2][]byte) bool {
	rk := tombstoneRowKey(id, k)
	if rk == nil {
		return false
	}
	for _, b := range bounds {
		if bytes.Compare(rk, b[0]) >= 0 && bytes.Compare(rk, b[1]) < 0 {
			return true
		}
	}
	return false
}

// SpanTombstones encodes the replication tombstones of rows [startRow,
// endRow) of a table (nil when it has none), for PutTombstones on
// another engine with the table under the same id.
func (e *Engine) SpanTombstones(instance, name string, startRow, endRow []byte) ([]byte, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	m, err := e.Table(instance, name)
	if err != nil {
		return nil, err
	}
	lo, hi, err := spanBounds(m.ID, startRow, endRow)
	if err != nil {
		return nil, err
	}
	prefix := tableTombstones(m.ID)
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []byte
	bounds := [][2][]byte{{lo, hi}}
	for ok := it.First(); ok; ok = it.Next() {
		if !inTombSpans(m.ID, it.Key(), bounds) {
			continue
		}
		out = binary.AppendUvarint(out, uint64(len(it.Key())))
		out = append(out, it.Key()...)
		out = binary.AppendUvarint(out, uint64(len(it.Value())))
		out = append(out, it.Value()...)
	}
	return out, it.Error()
}

// PutTombstones writes the tombstones SpanTombstones encoded that are of
// rows within spans; each must be one of the table's (same id here).
func (e *Engine) PutTombstones(instance, name string, spans []RowSpan, enc []byte) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	m, err := e.Table(instance, name)
	if err != nil {
		return err
	}
	var bounds [][2][]byte
	for _, sp := range spans {
		lo, hi, err := spanBounds(m.ID, sp.Start, sp.End)
		if err != nil {
			return err
		}
		bounds = append(bounds, [2][]byte{lo, hi})
	}
	b := e.store.NewBatch()
	defer b.Close()
	for len(enc) > 0 {
		k, rest, ok := uvarintChunk(enc)
		if !ok {
			return fmt.Errorf("%w: tombstones: truncated", ErrInvalid)
		}
		v, rest, ok := uvarintChunk(rest)
		if !ok {
			return fmt.Errorf("%w: tombstones: truncated", ErrInvalid)
		}
		if tombstoneRowKey(m.ID, k) == nil {
			return fmt.Errorf("%w: tombstones: a key of another table (id %d here)", ErrPrecondition, m.ID)
		}
		enc = rest
		if !inTombSpans(m.ID, k, bounds) {
			continue
		}
		if err := b.Set(k, v, nil); err != nil {
			return err
		}
	}
	if b.Empty() {
		return nil
	}
	return e.commit(b)
}

// RedropFamilies marks families of a table that were dropped (their ids
// no longer live, not above NextFamilyID) as dropped again, so the
// collector sweeps their cells: a tablet rebuilt from a checkpoint taken
// before the drop brings such cells back. names maps id → family name.
func (e *Engine) RedropFamilies(instance, name string, names map[uint32]string) error {
	_, err := e.updateMeta(instance, name, func(m *Meta) error {
		for id, fam := range names {
			if _, live := m.FamilyByID(id); live || id == 0 || id > m.NextFamilyID {
				continue
			}
			if !containsID(m.DroppedFamilies, id) {
				m.DroppedFamilies = append(m.DroppedFamilies, id)
			}
			if m.DroppedNames == nil {
				m.DroppedNames = map[uint32]string{}
			}
			if _, ok := m.DroppedNames[id]; !ok {
				m.DroppedNames[id] = fam
			}
		}
		return nil
	})
	return err
}

func containsID(ids []uint32, id uint32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// droppedFamily reports whether a family id of m is a dropped one (ids
// are never reused; one above NextFamilyID is not known here yet).
func droppedFamily(m *Meta, id uint32) bool {
	if _, live := m.FamilyByID(id); live {
		return false
	}
	return id != 0 && id <= m.NextFamilyID
}

// DeletedTableID returns the id of the table of that name deleted within
// the undelete retention, if the engine keeps one.
func (e *Engine) DeletedTableID(instance, name string) (uint64, bool) {
	if err := e.enter(); err != nil {
		return 0, false
	}
	defer e.leave()
	e.mu.Lock()
	d, err := e.deletedRecord(instance, name)
	e.mu.Unlock()
	if err != nil || d == nil || !e.clock.Now().Before(d.DeletedAt.Add(e.undeleteRetention)) {
		return 0, false
	}
	return d.Meta.ID, true
}
