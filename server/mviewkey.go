package server

import (
	"encoding/binary"
	"math/bits"
	"time"

	"github.com/ebbtable/ebbtable/sqlquery"
)

// A materialized view's rows, read with ReadRows, are keyed by its row key
// columns (sqlquery's MaterializedKey: the GROUP BY keys, or the ORDER BY
// keys of a secondary index), encoded as the Bigtable Type protos encode a
// row key schema (google/bigtable/admin/v2/types.proto):
//
//   - one key column: the column's own encoding (Struct.Singleton):
//     BYTES raw, STRING its UTF-8 bytes, INT64 Int64.OrderedCodeBytes,
//     TIMESTAMP its Unix microseconds as Int64.OrderedCodeBytes;
//   - several: Struct.OrderedCodeBytes of those encodings: each field's
//     0x00 bytes escaped as 0x00 0xFF, fields joined by 0x00 0x01, an
//     empty field written 0x00 0x00, trailing empty fields left out (all
//     empty: 0x00 0x00).
//
// Both keep the columns' order, so the rows come sorted as the key columns
// sort (element-wise for several). A row with a NULL key column has no key
// and is not in the view's ReadRows (nor is a NULL _key today).

// viewRowKey is a view's row key: its columns (indexes into the plan's
// columns, in key order).
type viewRowKey struct {
	cols []int
	// direct: the key is the view's BYTES or STRING _key column alone, so
	// a row set's keys and ranges are ranges of that column (they narrow
	// the kept state or the table read).
	direct bool
}

// materializedKey works out a view's row key. A view created before
// Cloud Bigtable's rules were enforced (or beyond them, with serve
// --materialized-view-rules any) whose
// query they refuse is keyed by its BYTES or STRING _key column, as
// before; ok is false when it has none.
func materializedKey(plan *sqlquery.Plan, query string) (k viewRowKey, ok bool) {
	cols, err := plan.MaterializedKey(query)
	if err != nil {
		if i := viewKeyColumn(plan.Columns); i >= 0 {
			return viewRowKey{cols: []int{i}, direct: true}, true
		}
		return viewRowKey{}, false
	}
	k.cols = cols
	if len(cols) == 1 && viewKeyColumn(plan.Columns) == cols[0] {
		k.direct = true
	}
	return k, true
}

// encode is a view row's key; nil when a key column is NULL (or of a type
// with no key encoding).
func (k viewRowKey) encode(row []sqlquery.Value) []byte {
	if len(k.cols) == 1 {
		return encodeKeyField(nil, row[k.cols[0]])
	}
	var out []byte
	var fields [][]byte
	for _, c := range k.cols {
		f := encodeKeyField(nil, row[c])
		if f == nil {
			return nil
		}
		fields = append(fields, f)
	}
	last := len(fields) - 1
	for last >= 0 && len(fields[last]) == 0 {
		last--
	}
	if last < 0 {
		return []byte{0, 0}
	}
	for i, f := range fields[:last+1] {
		if i > 0 {
			out = append(out, 0, 1)
		}
		if len(f) == 0 {
			out = append(out, 0, 0)
			continue
		}
		for _, b := range f {
			if b == 0 {
				out = append(out, 0, 0xff)
			} else {
				out = append(out, b)
			}
		}
	}
	return out
}

// encodeKeyField appends a key column's value in its sorted encoding; nil
// for NULL. An empty BYTES or STRING appends nothing (a non-nil empty
// slice).
func encodeKeyField(dst []byte, v sqlquery.Value) []byte {
	if dst == nil {
		dst = []byte{}
	}
	switch x := v.(type) {
	case []byte:
		return append(dst, x...)
	case string:
		return append(dst, x...)
	case int64:
		return appendOrderedInt64(dst, x)
	case time.Time:
		return appendOrderedInt64(dst, x.UnixMicro())
	}
	return nil
}

// appendOrderedInt64 appends v in Int64.OrderedCodeBytes: 1 to 10 bytes,
// shorter near zero, sorting bytewise as the numbers do. The value's
// two's complement, sign-extended to 80 bits, keeps its last n bytes, the
// fewest that hold the magnitude's bits and a sign bit after an n-bit
// header; the header bits are flipped (ones for a non-negative value,
// zeros for a negative one).
func appendOrderedInt64(dst []byte, v int64) []byte {
	x := uint64(v)
	if v < 0 {
		x = ^x
	}
	n := (bits.Len64(x) + 1 + 6) / 7 // bytes: 7n-1 bits of magnitude
	var buf [10]byte
	if v < 0 {
		buf[0], buf[1] = 0xff, 0xff
	}
	binary.BigEndian.PutUint64(buf[2:], uint64(v))
	enc := buf[10-n:]
	// Flip the top n bits: n ones for a non-negative value (whose top
	// bits are zeros), n zeros for a negative one.
	for i := 0; i < n; i++ {
		enc[i/8] ^= 0x80 >> (i % 8)
	}
	return append(dst, enc...)
}
