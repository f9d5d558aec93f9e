package sqlquery

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
)

// Value encodings for state kept on disk (incremental view maintenance):
// EncodeValue is exact and self-describing; orderedKey sorts like compare
// among values of one type.

// errCodec marks bytes that do not decode as a value.
var errCodec = errors.New("ebbtable: corrupt encoded value")

const (
	vNull byte = iota
	vFalse
	vTrue
	vInt
	vFloat64
	vFloat32
	vString
	vBytes
	vTime
	vDate
	vArray
	vStruct
	vMap
)

// EncodeValue appends v's self-describing encoding to b.
func EncodeValue(b []byte, v Value) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, vNull)
	case bool:
		if x {
			return append(b, vTrue)
		}
		return append(b, vFalse)
	case int64:
		return binary.AppendVarint(append(b, vInt), x)
	case float64:
		return binary.BigEndian.AppendUint64(append(b, vFloat64), math.Float64bits(x))
	case float32:
		return binary.BigEndian.AppendUint32(append(b, vFloat32), math.Float32bits(x))
	case string:
		b = binary.AppendUvarint(append(b, vString), uint64(len(x)))
		return append(b, x...)
	case []byte:
		b = binary.AppendUvarint(append(b, vBytes), uint64(len(x)))
		return append(b, x...)
	case time.Time:
		b = binary.AppendVarint(append(b, vTime), x.Unix())
		return binary.AppendUvarint(b, uint64(x.Nanosecond()))
	case Date:
		b = binary.AppendVarint(append(b, vDate), int64(x.Year))
		return append(b, byte(x.Month), byte(x.Day))
	case Array:
		return encodeList(append(b, vArray), x)
	case Struct:
		return encodeList(append(b, vStruct), x)
	case *Map:
		b = encodeList(append(b, vMap), x.Keys)
		return encodeList(b, x.Vals)
	}
	return append(b, vNull)
}

func encodeList(b []byte, vs []Value) []byte {
	b = binary.AppendUvarint(b, uint64(len(vs)))
	for _, v := range vs {
		b = EncodeValue(b, v)
	}
	return b
}

// DecodeValue decodes one value from the start of b and returns the rest.
func DecodeValue(b []byte) (Value, []byte, error) {
	if len(b) == 0 {
		return nil, nil, errCodec
	}
	tag, b := b[0], b[1:]
	switch tag {
	case vNull:
		return nil, b, nil
	case vFalse:
		return false, b, nil
	case vTrue:
		return true, b, nil
	case vInt:
		x, n := binary.Varint(b)
		if n <= 0 {
			return nil, nil, errCodec
		}
		return x, b[n:], nil
	case vFloat64:
		if len(b) < 8 {
			return nil, nil, errCodec
		}
		return math.Float64frombits(binary.BigEndian.Uint64(b)), b[8:], nil
	case vFloat32:
		if len(b) < 4 {
			return nil, nil, errCodec
		}
		return math.Float32frombits(binary.BigEndian.Uint32(b)), b[4:], nil
	case vString, vBytes:
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return nil, nil, errCodec
		}
		s := b[n : n+int(l)]
		if tag == vString {
			return string(s), b[n+int(l):], nil
		}
		return append([]byte{}, s...), b[n+int(l):], nil
	case vTime:
		sec, n := binary.Varint(b)
		if n <= 0 {
			return nil, nil, errCodec
		}
		ns, m := binary.Uvarint(b[n:])
		if m <= 0 || ns >= 1e9 {
			return nil, nil, errCodec
		}
		return time.Unix(sec, int64(ns)).UTC(), b[n+m:], nil
	case vDate:
		y, n := binary.Varint(b)
		if n <= 0 || len(b) < n+2 {
			return nil, nil, errCodec
		}
		return Date{int(y), int(b[n]), int(b[n+1])}, b[n+2:], nil
	case vArray, vStruct:
		vs, rest, err := decodeList(b)
		if err != nil {
			return nil, nil, err
		}
		if tag == vArray {
			return Array(vs), rest, nil
		}
		return Struct(vs), rest, nil
	case vMap:
		ks, rest, err := decodeList(b)
		if err != nil {
			return nil, nil, err
		}
		vs, rest, err := decodeList(rest)
		if err != nil || len(ks) != len(vs) {
			return nil, nil, errCodec
		}
		return &Map{Keys: ks, Vals: vs}, rest, nil
	}
	return nil, nil, errCodec
}

func decodeList(b []byte) ([]Value, []byte, error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)) {
		return nil, nil, errCodec
	}
	b = b[n:]
	vs := make([]Value, 0, l)
	for i := uint64(0); i < l; i++ {
		v, rest, err := DecodeValue(b)
		if err != nil {
			return nil, nil, err
		}
		vs = append(vs, v)
		b = rest
	}
	return vs, b, nil
}

// orderedKey appends a key for v that sorts, bytewise, as compare orders
// values of v's type (NaN first); values of types compare does not order
// get their exact encoding (any order will do for them).
func orderedKey(b []byte, v Value) []byte {
	switch x := v.(type) {
	case bool:
		if x {
			return append(b, 0x30, 1)
		}
		return append(b, 0x30, 0)
	case int64:
		return binary.BigEndian.AppendUint64(append(b, 0x10), uint64(x)^1<<63)
	case float64:
		return orderedFloat(b, x)
	case float32:
		return orderedFloat(b, float64(x))
	case string:
		return append(append(b, 0x40), x...)
	case []byte:
		return append(append(b, 0x40), x...)
	case time.Time:
		b = binary.BigEndian.AppendUint64(append(b, 0x50), uint64(x.Unix())^1<<63)
		return binary.BigEndian.AppendUint32(b, uint32(x.Nanosecond()))
	case Date:
		b = binary.BigEndian.AppendUint32(append(b, 0x60), uint32(x.Year)^1<<31)
		return append(b, byte(x.Month), byte(x.Day))
	}
	return EncodeValue(append(b, 0x70), v)
}

func orderedFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) {
		return append(b, 0x20)
	}
	if f == 0 {
		f = 0 // -0 sorts (and compares) as 0
	}
	u := math.Float64bits(f)
	if u&(1<<63) != 0 {
		u = ^u
	} else {
		u |= 1 << 63
	}
	return binary.BigEndian.AppendUint64(append(b, 0x21), u)
}
