package changestream

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// A table's records are keyed by position only (keys.go), so the records of
// a range of rows are spread over the whole of the table's span. A reader of
// some rows (a partition of the stream in a cluster, a tablet a move ships)
// still walks every record of the table, but RowKey finds a record's row key
// in its encoding without decoding the rest, and ReadRows decodes only the
// records its filter keeps: the version, type and flags, then three
// length-prefixed strings, then the row key (Record.Encode).

// RowKey returns the row key of an encoded record (a subslice of v) without
// decoding the record's mods.
func RowKey(v []byte) ([]byte, error) {
	if len(v) < 3 {
		return nil, ErrCorrupt
	}
	if v[0] != encodingVersion {
		return nil, fmt.Errorf("%w: unknown encoding version %d", ErrCorrupt, v[0])
	}
	b := v[3:]
	for i := 0; i < 4; i++ { // reason, transaction tag, source cluster, row key
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return nil, ErrCorrupt
		}
		if i == 3 {
			return b[w : w+int(n) : w+int(n)], nil
		}
		b = b[w+int(n):]
	}
	panic("unreachable")
}

// Keep says whether the record of row key row at position p is wanted. row
// is valid only during the call.
type Keep func(row []byte, p Position) bool

// Batch is what one ReadRows returned.
type Batch struct {
	// Records are the records kept, in commit order.
	Records []Record
	// Examined counts the records looked at (kept or not); Last is the
	// position of the last of them. A reader goes on from After(Last).
	Examined int
	Last     Position
	// Full is true when the read stopped at limit records kept or scan
	// records examined, before the end of what it was to read.
	Full bool
}

// ReadRows is Read keeping only the records keep wants: in commit order, the
// records of table tableID at or after key lower, committed at or before
// upTo, up to limit kept (0: no limit) and scan examined (0: no limit).
// Records keep rejects are not decoded past their row key.
func ReadRows(db Store, tableID uint64, lower []byte, upTo int64, limit, scan int, keep Keep) (Batch, error) {
	var b Batch
	if upTo < 0 {
		return b, nil
	}
	it, err := db.Iter(lower, TimeKey(tableID, upTo+1))
	if err != nil {
		return b, err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if (limit > 0 && len(b.Records) >= limit) || (scan > 0 && b.Examined >= scan) {
			b.Full = true
			break
		}
		_, pos, err := DecodeKey(it.Key())
		if err != nil {
			return Batch{}, err
		}
		v, err := it.Value()
		if err != nil {
			return Batch{}, err
		}
		row, err := RowKey(v)
		if err != nil {
			return Batch{}, err
		}
		b.Examined++
		b.Last = pos
		if !keep(row, pos) {
			continue
		}
		r, err := Decode(v)
		if err != nil {
			return Batch{}, err
		}
		r.Position = pos
		b.Records = append(b.Records, r)
	}
	if err := it.Error(); err != nil {
		return Batch{}, err
	}
	return b, nil
}

// RowsIn keeps the records of rows in [start, end) (end empty: no end).
func RowsIn(start, end []byte) Keep {
	return func(row []byte, _ Position) bool {
		return bytes.Compare(row, start) >= 0 && (len(end) == 0 || bytes.Compare(row, end) < 0)
	}
}
