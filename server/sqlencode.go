package server

import (
	"math"
	"time"

	"github.com/ebbtable/ebbtable/sqlquery"
	"google.golang.org/protobuf/encoding/protowire"
)

// Result rows are encoded straight to the wire form of ProtoRows (field 2:
// repeated Value), without building Value messages: a family map is a
// dozen nested messages per row, and building them was most of a query's
// cost. valueToProto is the reference this must match
// (TestSQLEncodeMatchesProto).

// Field numbers of google.bigtable.v2.Value, ArrayValue, Timestamp, Date.
const (
	fValueBytes     = 2
	fValueString    = 3
	fValueArray     = 4
	fValueInt       = 6
	fValueBool      = 10
	fValueFloat     = 11
	fValueTimestamp = 12
	fValueDate      = 13
	fArrayValues    = 1
	fProtoRowsValue = 2
)

func bytesFieldSize(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func tsSize(t time.Time) int {
	n := 0
	if s := t.Unix(); s != 0 {
		n += protowire.SizeTag(1) + protowire.SizeVarint(uint64(s))
	}
	if ns := t.Nanosecond(); ns != 0 {
		n += protowire.SizeTag(2) + protowire.SizeVarint(uint64(ns))
	}
	return n
}

func dateSize(d sqlquery.Date) int {
	n := 0
	for _, x := range []int{d.Year, d.Month, d.Day} {
		if x != 0 {
			n += 1 + protowire.SizeVarint(uint64(int64(x)))
		}
	}
	return n
}

// valueSize is the size of a Value message's content.
func valueSize(v sqlquery.Value) int {
	switch x := v.(type) {
	case nil:
		return 0
	case []byte:
		return bytesFieldSize(fValueBytes, len(x))
	case string:
		return bytesFieldSize(fValueString, len(x))
	case int64:
		return protowire.SizeTag(fValueInt) + protowire.SizeVarint(uint64(x))
	case bool:
		return protowire.SizeTag(fValueBool) + 1
	case float64, float32:
		return protowire.SizeTag(fValueFloat) + 8
	case time.Time:
		return bytesFieldSize(fValueTimestamp, tsSize(x))
	case sqlquery.Date:
		return bytesFieldSize(fValueDate, dateSize(x))
	case sqlquery.Array:
		return bytesFieldSize(fValueArray, arraySize(x))
	case sqlquery.Struct:
		return bytesFieldSize(fValueArray, arraySize(x))
	case *sqlquery.Map:
		return bytesFieldSize(fValueArray, mapSize(x))
	}
	return 0
}

func arraySize(vs []sqlquery.Value) int {
	n := 0
	for _, e := range vs {
		n += bytesFieldSize(fArrayValues, valueSize(e))
	}
	return n
}

func entrySize(k, v sqlquery.Value) int {
	return bytesFieldSize(fArrayValues, valueSize(k)) + bytesFieldSize(fArrayValues, valueSize(v))
}

func mapSize(m *sqlquery.Map) int {
	n := 0
	for i := range m.Keys {
		// Each entry is a Value whose array_value holds key and value.
		n += bytesFieldSize(fArrayValues, bytesFieldSize(fValueArray, entrySize(m.Keys[i], m.Vals[i])))
	}
	return n
}

// appendValue appends a Value message's content.
func appendValue(b []byte, v sqlquery.Value) []byte {
	switch x := v.(type) {
	case nil:
	case []byte:
		b = protowire.AppendTag(b, fValueBytes, protowire.BytesType)
		b = protowire.AppendBytes(b, x)
	case string:
		b = protowire.AppendTag(b, fValueString, protowire.BytesType)
		b = protowire.AppendString(b, x)
	case int64:
		b = protowire.AppendTag(b, fValueInt, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(x))
	case bool:
		b = protowire.AppendTag(b, fValueBool, protowire.VarintType)
		b = protowire.AppendVarint(b, protowire.EncodeBool(x))
	case float64:
		b = protowire.AppendTag(b, fValueFloat, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(x))
	case float32:
		b = protowire.AppendTag(b, fValueFloat, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(float64(x)))
	case time.Time:
		b = protowire.AppendTag(b, fValueTimestamp, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(tsSize(x)))
		if s := x.Unix(); s != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(s))
		}
		if ns := x.Nanosecond(); ns != 0 {
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(ns))
		}
	case sqlquery.Date:
		b = protowire.AppendTag(b, fValueDate, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(dateSize(x)))
		for i, f := range []int{x.Year, x.Month, x.Day} {
			if f != 0 {
				b = protowire.AppendTag(b, protowire.Number(i+1), protowire.VarintType)
				b = protowire.AppendVarint(b, uint64(int64(f)))
			}
		}
	case sqlquery.Array:
		b = appendArray(b, x)
	case sqlquery.Struct:
		b = appendArray(b, x)
	case *sqlquery.Map:
		b = protowire.AppendTag(b, fValueArray, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(mapSize(x)))
		for i := range x.Keys {
			es := entrySize(x.Keys[i], x.Vals[i])
			b = protowire.AppendTag(b, fArrayValues, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(bytesFieldSize(fValueArray, es)))
			b = protowire.AppendTag(b, fValueArray, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(es))
			b = appendElem(b, x.Keys[i])
			b = appendElem(b, x.Vals[i])
		}
	}
	return b
}

func appendArray(b []byte, vs []sqlquery.Value) []byte {
	b = protowire.AppendTag(b, fValueArray, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(arraySize(vs)))
	for _, e := range vs {
		b = appendElem(b, e)
	}
	return b
}

// appendElem appends one element of ArrayValue.values.
func appendElem(b []byte, v sqlquery.Value) []byte {
	b = protowire.AppendTag(b, fArrayValues, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(valueSize(v)))
	return appendValue(b, v)
}

// appendRowValue appends one value of ProtoRows.values.
func appendRowValue(b []byte, v sqlquery.Value) []byte {
	b = protowire.AppendTag(b, fProtoRowsValue, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(valueSize(v)))
	return appendValue(b, v)
}
