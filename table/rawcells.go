package table

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/storage"
)

// Raw cells: every cell stored for a table, whatever a reader would see of
// it (eligible and expired cells included), with its replication stamp.
// Comparing clusters (ebbtable replication diff) works on these.

// RawCell is one stored cell.
type RawCell struct {
	Row       []byte
	Family    string
	Qualifier []byte
	Timestamp int64
	Value     []byte
	ExpireAt  int64
	Stamp     storage.Stamp
}

// Coord names the cell's position: row, family, qualifier, timestamp.
func (c RawCell) Coord() string {
	return fmt.Sprintf("%q/%s:%q@%d", c.Row, c.Family, c.Qualifier, c.Timestamp)
}

// RawCells calls fn for every stored cell of rows [start, end) (nil end:
// to the table's end) in key order. Cells of dropped families are skipped.
func (e *Engine) RawCells(m *Meta, start, end []byte, fn func(RawCell) error) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	lo, hi := storage.RowBound(m.ID, start), storage.TableEnd(m.ID)
	if end != nil {
		hi = storage.RowBound(m.ID, end)
	}
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k, err := storage.DecodeCellKey(it.Key())
		if err != nil {
			return err
		}
		f, ok := m.FamilyByID(k.FamilyID)
		if !ok {
			continue
		}
		data, exp, st, err := storage.DecodeStamped(it.Value())
		if err != nil {
			return err
		}
		c := RawCell{Row: k.Row, Family: f.Name, Qualifier: k.Qualifier, Timestamp: k.Timestamp, Value: bytes.Clone(data), ExpireAt: exp, Stamp: st}
		if err := fn(c); err != nil {
			return err
		}
	}
	return it.Error()
}

// ChunkHash digests the stored cells of rows [start, end): their
// coordinates, values and expiries (not their stamps), and counts them.
func (e *Engine) ChunkHash(m *Meta, start, end []byte) ([]byte, int, error) {
	h := sha256.New()
	n := 0
	var buf []byte
	err := e.RawCells(m, start, end, func(c RawCell) error {
		buf = buf[:0]
		for _, b := range [][]byte{c.Row, []byte(c.Family), c.Qualifier, c.Value} {
			buf = binary.AppendUvarint(buf, uint64(len(b)))
			buf = append(buf, b...)
		}
		buf = binary.AppendVarint(buf, c.Timestamp)
		buf = binary.AppendVarint(buf, c.ExpireAt)
		h.Write(buf)
		n++
		return nil
	})
	return h.Sum(nil), n, err
}

// RowBoundaries returns every step-th row key of the table, in order: the
// starts of chunks of about step rows after the first.
func (e *Engine) RowBoundaries(m *Meta, step int) ([][]byte, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: storage.TablePrefix(m.ID), UpperBound: storage.TableEnd(m.ID)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out [][]byte
	rows := 0
	for ok := it.First(); ok; {
		prefix := bytes.Clone(it.Key()[:storage.RowKeyLen(it.Key())])
		if rows > 0 && rows%step == 0 {
			row, err := storage.DecodeRowKey(prefix)
			if err != nil {
				return nil, err
			}
			out = append(out, row)
		}
		rows++
		ok = it.SeekGE(storage.PrefixEnd(prefix))
	}
	return out, it.Error()
}

// RepairCell writes a cell copied from a peer, with its stamp, unless the
// stored cell at its coordinates has a newer stamp. It reports whether it
// wrote.
func (e *Engine) RepairCell(m *Meta, c RawCell) (bool, error) {
	if err := e.enter(); err != nil {
		return false, err
	}
	defer e.leave()
	f, ok := m.Family(c.Family)
	if !ok {
		return false, fmt.Errorf("%w: %q in table %s", ErrFamilyNotFound, c.Family, m.Name)
	}
	unlock := e.LockRow(m.ID, c.Row)
	defer unlock()
	k := storage.CellKey(m.ID, c.Row, f.ID, c.Qualifier, c.Timestamp)
	old, closer, err := e.store.Get(k)
	switch {
	case err == pebble.ErrNotFound:
	case err != nil:
		return false, err
	default:
		_, _, ost, derr := storage.DecodeStamped(old)
		closer.Close()
		if derr == nil && !ost.Less(c.Stamp) {
			return false, nil
		}
	}
	b := e.store.NewBatch()
	defer b.Close()
	if err := e.markAgenda(b, m, f.ID, c.Row, c.Timestamp, c.ExpireAt); err != nil {
		return false, err
	}
	if err := b.Set(k, storage.EncodeStamped(c.Value, c.ExpireAt, c.Stamp), nil); err != nil {
		return false, err
	}
	e.cellGen.Add(1)                                         // a cell not written through applyOne (columnNewest)
	logged, err := e.logViewRows(b, m, [][]byte{c.Row}, nil) // viewlog.go
	defer logged()
	if err != nil {
		return false, err
	}
	finished, err := e.logBatch(b) // commitlog.go: a take-over replays it
	if err != nil {
		return false, err
	}
	defer finished()
	return true, e.commit(b)
}

// DeleteRawCell removes one stored cell (a repair settling a cell its
// family's age rule has already removed on another cluster). The deletion
// is local: it is not recorded or shipped.
func (e *Engine) DeleteRawCell(m *Meta, c RawCell) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	f, ok := m.Family(c.Family)
	if !ok {
		return fmt.Errorf("%w: %q in table %s", ErrFamilyNotFound, c.Family, m.Name)
	}
	unlock := e.LockRow(m.ID, c.Row)
	defer unlock()
	b := e.store.NewBatch()
	defer b.Close()
	if err := b.Delete(storage.CellKey(m.ID, c.Row, f.ID, c.Qualifier, c.Timestamp), nil); err != nil {
		return err
	}
	logged, err := e.logViewRows(b, m, [][]byte{c.Row}, nil) // viewlog.go
	defer logged()
	if err != nil {
		return err
	}
	finished, err := e.logBatch(b) // commitlog.go: a take-over replays it
	if err != nil {
		return err
	}
	defer finished()
	return e.commit(b)
}
