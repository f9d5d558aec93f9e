package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Key spaces. The first byte of every key names its space.
const (
	tagCell byte = 0x01 // a cell: tagCell | tableID | esc(row) | familyID | esc(qualifier) | ^timestamp
	tagMeta byte = 0x02 // metadata: tagMeta | kind | name
	// 0x03 is the change-stream record space, laid out by package changestream.
)

// FormatVersion is the on-disk format version written to the metadata space.
const FormatVersion = 1

// SuffixLen is the length of a cell key's suffix: the inverted timestamp.
const SuffixLen = 8

// minCellKeyLen is the shortest possible cell key: tag, table id, an empty
// escaped row, family id, an empty escaped qualifier and the suffix.
const minCellKeyLen = 1 + 8 + 2 + 4 + 2 + SuffixLen

// ErrCorruptKey is returned when a key does not decode.
var ErrCorruptKey = errors.New("ebbtable: corrupt key")

// appendEscaped appends b escaped so that the result sorts like b and no
// escaped string is a prefix of another: 0x00 becomes 0x00 0xFF and the
// string ends with 0x00 0x01.
func appendEscaped(dst, b []byte) []byte {
	return append(appendEscapedOpen(dst, b), 0, 1)
}

// appendEscapedOpen appends b escaped without the terminator, so that every
// escaped string starting with b sorts at or after the result.
func appendEscapedOpen(dst, b []byte) []byte {
	for {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return append(dst, b...)
		}
		dst = append(append(dst, b[:i]...), 0, 0xFF)
		b = b[i+1:]
	}
}

// readEscaped decodes an escaped string at the start of b and returns it and
// the rest of b.
func readEscaped(b []byte) (out, rest []byte, err error) {
	// Most strings hold no zero byte but their terminator's: those are
	// copied at once, in one allocation of their size.
	if i := bytes.IndexByte(b, 0); i >= 0 && i+1 < len(b) && b[i+1] == 1 {
		return append(make([]byte, 0, i), b[:i]...), b[i+2:], nil
	}
	out, rest, err = appendUnescaped(nil, b)
	if err == nil && out == nil {
		out = []byte{}
	}
	return out, rest, err
}

// appendUnescaped is readEscaped appending the string to dst: out is dst
// with it.
func appendUnescaped(dst, b []byte) (out, rest []byte, err error) {
	if i := bytes.IndexByte(b, 0); i >= 0 && i+1 < len(b) && b[i+1] == 1 {
		return append(dst, b[:i]...), b[i+2:], nil
	}
	for i := 0; i < len(b); i++ {
		if b[i] != 0 {
			dst = append(dst, b[i])
			continue
		}
		if i+1 >= len(b) {
			return nil, nil, ErrCorruptKey
		}
		switch b[i+1] {
		case 0xFF:
			dst = append(dst, 0)
			i++
		case 1:
			return dst, b[i+2:], nil
		default:
			return nil, nil, ErrCorruptKey
		}
	}
	return nil, nil, ErrCorruptKey
}

// TablePrefix is the first key of a table's cell space.
func TablePrefix(tableID uint64) []byte {
	k := make([]byte, 9)
	k[0] = tagCell
	binary.BigEndian.PutUint64(k[1:], tableID)
	return k
}

// TableEnd is the key just past a table's cell space.
func TableEnd(tableID uint64) []byte { return TablePrefix(tableID + 1) }

// RowPrefix is the prefix every cell key of one row starts with.
func RowPrefix(tableID uint64, row []byte) []byte {
	return appendEscaped(TablePrefix(tableID), row)
}

// RowBound is the smallest key of rows whose key is >= row. Used as an
// inclusive lower or exclusive upper scan bound in raw row-key order.
func RowBound(tableID uint64, row []byte) []byte { return RowPrefix(tableID, row) }

// RowAfter is the smallest key of rows whose key is > row.
func RowAfter(tableID uint64, row []byte) []byte {
	return RowBound(tableID, append(append([]byte{}, row...), 0))
}

// ColumnPrefix is the prefix of every version of one column.
func ColumnPrefix(tableID uint64, row []byte, familyID uint32, qualifier []byte) []byte {
	return appendColumnPrefix(make([]byte, 0, cellKeyCap(row, qualifier)), tableID, row, familyID, qualifier)
}

// cellKeyCap is the length of a cell key of row and qualifier when neither
// holds a zero byte (which escaping doubles): the keys are allocated once.
func cellKeyCap(row, qualifier []byte) int {
	return 9 + len(row) + 2 + 4 + len(qualifier) + 2 + SuffixLen
}

// appendColumnPrefix appends ColumnPrefix's key to dst.
func appendColumnPrefix(dst []byte, tableID uint64, row []byte, familyID uint32, qualifier []byte) []byte {
	dst = append(dst, tagCell)
	dst = binary.BigEndian.AppendUint64(dst, tableID)
	dst = appendEscaped(dst, row)
	dst = binary.BigEndian.AppendUint32(dst, familyID)
	return appendEscaped(dst, qualifier)
}

// FamilyPrefix is the prefix of every cell of one family of one row.
func FamilyPrefix(tableID uint64, row []byte, familyID uint32) []byte {
	return binary.BigEndian.AppendUint32(RowPrefix(tableID, row), familyID)
}

// CellKey encodes a cell key. Timestamps sort newest first.
func CellKey(tableID uint64, row []byte, familyID uint32, qualifier []byte, ts int64) []byte {
	return AppendSuffix(ColumnPrefix(tableID, row, familyID, qualifier), ts)
}

// AppendCellKey appends CellKey's key to dst.
func AppendCellKey(dst []byte, tableID uint64, row []byte, familyID uint32, qualifier []byte, ts int64) []byte {
	return AppendSuffix(appendColumnPrefix(dst, tableID, row, familyID, qualifier), ts)
}

// AppendSuffix appends the inverted timestamp suffix.
func AppendSuffix(prefix []byte, ts int64) []byte {
	return binary.BigEndian.AppendUint64(prefix, ^uint64(ts))
}

// WithTableID appends to dst the cell key k moved to table id: the same row,
// column and timestamp under another table (backups store keys under id 0
// and restore moves them to the new table's id).
func WithTableID(dst, k []byte, id uint64) ([]byte, error) {
	if len(k) < minCellKeyLen || k[0] != tagCell {
		return nil, fmt.Errorf("%w: %x", ErrCorruptKey, k)
	}
	dst = append(dst, k...)
	binary.BigEndian.PutUint64(dst[len(dst)-len(k)+1:], id)
	return dst, nil
}

// CellFamilyID reads the family id of a cell key without decoding the rest.
func CellFamilyID(k []byte) (uint32, error) {
	i := skipEscaped(k, 9)
	if len(k) < minCellKeyLen || k[0] != tagCell || i < 0 || i+4 > len(k) {
		return 0, fmt.Errorf("%w: %x", ErrCorruptKey, k)
	}
	return binary.BigEndian.Uint32(k[i:]), nil
}

// DecodedKey is a cell key taken apart. Row and Qualifier alias fresh memory.
type DecodedKey struct {
	TableID   uint64
	Row       []byte
	FamilyID  uint32
	Qualifier []byte
	Timestamp int64
}

// DecodeCellKey takes a cell key apart.
func DecodeCellKey(k []byte) (DecodedKey, error) {
	var d DecodedKey
	if len(k) < minCellKeyLen || k[0] != tagCell {
		return d, fmt.Errorf("%w: %x", ErrCorruptKey, k)
	}
	d.TableID = binary.BigEndian.Uint64(k[1:9])
	body := k[9 : len(k)-SuffixLen]
	row, rest, err := readEscaped(body)
	if err != nil || len(rest) < 4 {
		return d, fmt.Errorf("%w: %x", ErrCorruptKey, k)
	}
	d.Row = row
	d.FamilyID = binary.BigEndian.Uint32(rest)
	q, rest, err := readEscaped(rest[4:])
	if err != nil || len(rest) != 0 {
		return d, fmt.Errorf("%w: %x", ErrCorruptKey, k)
	}
	d.Qualifier = q
	d.Timestamp = DecodeSuffix(k[len(k)-SuffixLen:])
	return d, nil
}

// DecodeSuffix turns a key suffix back into a timestamp.
func DecodeSuffix(s []byte) int64 { return int64(^binary.BigEndian.Uint64(s)) }

// RowKeyLen returns the length of the row prefix (tag, table id, escaped row)
// of a cell key, so callers can group keys by row without decoding.
func RowKeyLen(k []byte) int {
	for i := 9; i+1 < len(k); i++ {
		if k[i] == 0 {
			if k[i+1] == 1 {
				return i + 2
			}
			i++
		}
	}
	return len(k)
}

// MetaKey is a metadata key in the given kind (a short namespace) and name.
func MetaKey(kind string, name string) []byte {
	k := []byte{tagMeta}
	k = appendEscaped(k, []byte(kind))
	return append(k, name...)
}

// MetaPrefix is the prefix of every metadata key of one kind.
func MetaPrefix(kind string) []byte {
	k := []byte{tagMeta}
	return appendEscaped(k, []byte(kind))
}

// PrefixEnd returns the smallest key greater than every key with prefix p,
// or nil if there is none.
func PrefixEnd(p []byte) []byte {
	end := append([]byte{}, p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xFF {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// RowPrefixScanEnd returns the exclusive upper bound of a scan over rows whose
// key starts with the raw prefix p; nil p means the whole table.
func RowPrefixScanEnd(tableID uint64, p []byte) []byte {
	end := PrefixEnd(p)
	if end == nil {
		return TableEnd(tableID)
	}
	return RowBound(tableID, end)
}

// RowPrefixScanStart returns the inclusive lower bound for rows starting with p.
func RowPrefixScanStart(tableID uint64, p []byte) []byte {
	return appendEscapedOpen(TablePrefix(tableID), p)
}

// DecodeRowKey returns the raw row key of a row prefix (as RowPrefix makes).
func DecodeRowKey(prefix []byte) ([]byte, error) {
	// The errors format a copy, so prefix does not escape (a scan keeps it
	// on its stack).
	if len(prefix) < 11 || prefix[0] != tagCell {
		return nil, fmt.Errorf("%w: row prefix %x", ErrCorruptKey, bytes.Clone(prefix))
	}
	row, rest, err := readEscaped(prefix[9:])
	if err != nil || len(rest) != 0 {
		return nil, fmt.Errorf("%w: row prefix %x", ErrCorruptKey, bytes.Clone(prefix))
	}
	return row, nil
}

// DecodeQualifier decodes the escaped qualifier at the start of b (what
// follows the family id in a cell key without its suffix).
func DecodeQualifier(b []byte) ([]byte, error) {
	q, rest, err := readEscaped(b)
	if err != nil || len(rest) != 0 {
		return nil, fmt.Errorf("%w: qualifier %x", ErrCorruptKey, b)
	}
	return q, nil
}

// AppendRowKey is DecodeRowKey appending the row key to dst (its length is
// at most len(prefix)-11); it returns dst with it. A caller's buffer may
// then hold the keys of the rows it reads (a point read's row key goes in
// its value chunk).
func AppendRowKey(dst, prefix []byte) ([]byte, error) {
	if len(prefix) < 11 || prefix[0] != tagCell {
		return nil, fmt.Errorf("%w: row prefix %x", ErrCorruptKey, bytes.Clone(prefix))
	}
	out, rest, err := appendUnescaped(dst, prefix[9:])
	if err != nil || len(rest) != 0 {
		return nil, fmt.Errorf("%w: row prefix %x", ErrCorruptKey, bytes.Clone(prefix))
	}
	return out, nil
}

// AppendQualifier is DecodeQualifier appending the qualifier to dst (its
// length is at most len(b)-2); it returns dst with it.
func AppendQualifier(dst, b []byte) ([]byte, error) {
	out, rest, err := appendUnescaped(dst, b)
	if err != nil || len(rest) != 0 {
		return nil, fmt.Errorf("%w: qualifier %x", ErrCorruptKey, bytes.Clone(b))
	}
	return out, nil
}

// splitCellKey is the comparer's Split: the length of a key's prefix. Only
// a complete cell key — tag, table id, escaped row, family id, escaped
// qualifier, then exactly the 8-byte suffix — has a suffix; every other key
// (metadata, and the row, family and column prefixes used as iterator
// bounds) is all prefix. The check walks the key's structure rather than
// trusting its length, since a bound may be as long as a cell key.
func splitCellKey(k []byte) int {
	if len(k) < minCellKeyLen || k[0] != tagCell {
		return len(k)
	}
	i := skipEscaped(k, 9)
	if i < 0 || i+4 > len(k) {
		return len(k)
	}
	i = skipEscaped(k, i+4)
	if i < 0 || len(k)-i != SuffixLen {
		return len(k)
	}
	return i
}

// skipEscaped returns the index just past the escaped string starting at
// k[i], or -1 if it does not end.
// EscapedLen is the length of the escaped string (terminator included) at
// the start of b, or -1 if b does not start with one: how a key that
// embeds an escaped row finds what follows it.
func EscapedLen(b []byte) int { return skipEscaped(b, 0) }

func skipEscaped(k []byte, i int) int {
	for ; i+1 < len(k); i++ {
		if k[i] != 0 {
			continue
		}
		switch k[i+1] {
		case 1:
			return i + 2
		case 0xFF:
			i++
		default:
			return -1
		}
	}
	return -1
}
