package sqlquery

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Kind is a SQL type's kind.
type Kind int

// The kinds Bigtable SQL knows. KindNull is the type of an untyped NULL
// literal; it never reaches a result's metadata (it is reported as INT64).
const (
	KindNull Kind = iota
	KindBytes
	KindString
	KindInt64
	KindFloat32
	KindFloat64
	KindBool
	KindTimestamp
	KindDate
	KindArray
	KindStruct
	KindMap
)

// Type is a SQL type.
type Type struct {
	Kind Kind
	// Elem is an ARRAY's element type.
	Elem *Type
	// Key and Val are a MAP's key and value types.
	Key, Val *Type
	// Fields are a STRUCT's fields.
	Fields []Field
}

// Field is a STRUCT field.
type Field struct {
	Name string
	Type *Type
}

// Scalar types.
var (
	TNull      = &Type{Kind: KindNull}
	TBytes     = &Type{Kind: KindBytes}
	TString    = &Type{Kind: KindString}
	TInt64     = &Type{Kind: KindInt64}
	TFloat32   = &Type{Kind: KindFloat32}
	TFloat64   = &Type{Kind: KindFloat64}
	TBool      = &Type{Kind: KindBool}
	TTimestamp = &Type{Kind: KindTimestamp}
	TDate      = &Type{Kind: KindDate}
	// tCell is the STRUCT<timestamp, value> of a cell in a history.
	tCell = &Type{Kind: KindStruct, Fields: []Field{{"timestamp", TTimestamp}, {"value", TBytes}}}
)

// ArrayOf returns ARRAY<t>.
func ArrayOf(t *Type) *Type { return &Type{Kind: KindArray, Elem: t} }

// MapOf returns MAP<k, v>.
func MapOf(k, v *Type) *Type { return &Type{Kind: KindMap, Key: k, Val: v} }

func (t *Type) String() string {
	switch t.Kind {
	case KindNull:
		return "NULL"
	case KindBytes:
		return "BYTES"
	case KindString:
		return "STRING"
	case KindInt64:
		return "INT64"
	case KindFloat32:
		return "FLOAT32"
	case KindFloat64:
		return "FLOAT64"
	case KindBool:
		return "BOOL"
	case KindTimestamp:
		return "TIMESTAMP"
	case KindDate:
		return "DATE"
	case KindArray:
		return "ARRAY<" + t.Elem.String() + ">"
	case KindMap:
		return "MAP<" + t.Key.String() + ", " + t.Val.String() + ">"
	case KindStruct:
		var parts []string
		for _, f := range t.Fields {
			if f.Name == "" {
				parts = append(parts, f.Type.String())
			} else {
				parts = append(parts, f.Name+" "+f.Type.String())
			}
		}
		return "STRUCT<" + strings.Join(parts, ", ") + ">"
	}
	return "?"
}

// Equal reports whether two types are the same.
func (t *Type) Equal(u *Type) bool {
	if t == u {
		return true
	}
	if t == nil || u == nil || t.Kind != u.Kind {
		return false
	}
	switch t.Kind {
	case KindArray:
		return t.Elem.Equal(u.Elem)
	case KindMap:
		return t.Key.Equal(u.Key) && t.Val.Equal(u.Val)
	case KindStruct:
		if len(t.Fields) != len(u.Fields) {
			return false
		}
		for i := range t.Fields {
			if t.Fields[i].Name != u.Fields[i].Name || !t.Fields[i].Type.Equal(u.Fields[i].Type) {
				return false
			}
		}
	}
	return true
}

func (t *Type) numeric() bool {
	return t.Kind == KindInt64 || t.Kind == KindFloat32 || t.Kind == KindFloat64
}

// Value is a SQL value. Its Go form follows its type: nil (NULL), []byte,
// string, int64, float32, float64, bool, time.Time (TIMESTAMP, UTC), Date,
// Array, Struct or *Map.
type Value any

// Date is a civil date.
type Date struct{ Year, Month, Day int }

func (d Date) String() string { return fmt.Sprintf("%04d-%02d-%02d", d.Year, d.Month, d.Day) }

func (d Date) time() time.Time {
	return time.Date(d.Year, time.Month(d.Month), d.Day, 0, 0, 0, 0, time.UTC)
}

func dateOf(t time.Time) Date { return Date{t.Year(), int(t.Month()), t.Day()} }

// Array is an ARRAY value.
type Array []Value

// Struct is a STRUCT value (field names are in its type).
type Struct []Value

// Map is a MAP value: keys in ascending order, each with its value.
type Map struct {
	Keys, Vals []Value
}

// Get returns the value under key k, or nil.
func (m *Map) Get(k Value) Value {
	if m == nil {
		return nil
	}
	for i, mk := range m.Keys {
		if compare(mk, k) == 0 {
			return m.Vals[i]
		}
	}
	return nil
}

// compare orders two non-NULL values of comparable types (NULLs first).
// BYTES and STRING compare bytewise with each other (a literal coercion
// Bigtable applies to `_key = 'x'`).
func compare(a, b Value) int {
	if a == nil || b == nil {
		switch {
		case a == nil && b == nil:
			return 0
		case a == nil:
			return -1
		default:
			return 1
		}
	}
	switch x := a.(type) {
	case []byte:
		switch y := b.(type) {
		case []byte:
			return bytes.Compare(x, y)
		case string:
			return bytes.Compare(x, []byte(y))
		}
	case string:
		switch y := b.(type) {
		case string:
			return strings.Compare(x, y)
		case []byte:
			return bytes.Compare([]byte(x), y)
		}
	case int64:
		switch y := b.(type) {
		case int64:
			return cmp.Compare(x, y)
		case float64:
			return cmpFloat(float64(x), y)
		case float32:
			return cmpFloat(float64(x), float64(y))
		}
	case float64:
		if f, ok := toFloat(b); ok {
			return cmpFloat(x, f)
		}
	case float32:
		if f, ok := toFloat(b); ok {
			return cmpFloat(float64(x), f)
		}
	case bool:
		if y, ok := b.(bool); ok {
			switch {
			case x == y:
				return 0
			case !x:
				return -1
			default:
				return 1
			}
		}
	case time.Time:
		if y, ok := b.(time.Time); ok {
			return x.Compare(y)
		}
	case Date:
		if y, ok := b.(Date); ok {
			return cmp.Or(cmp.Compare(x.Year, y.Year), cmp.Compare(x.Month, y.Month), cmp.Compare(x.Day, y.Day))
		}
	case Array:
		if y, ok := b.(Array); ok {
			for i := 0; i < len(x) && i < len(y); i++ {
				if c := compare(x[i], y[i]); c != 0 {
					return c
				}
			}
			return cmp.Compare(len(x), len(y))
		}
	case Struct:
		if y, ok := b.(Struct); ok {
			for i := 0; i < len(x) && i < len(y); i++ {
				if c := compare(x[i], y[i]); c != 0 {
					return c
				}
			}
			return cmp.Compare(len(x), len(y))
		}
	}
	return 0
}

// cmpFloat orders NaN first, as GoogleSQL does.
func cmpFloat(a, b float64) int {
	an, bn := math.IsNaN(a), math.IsNaN(b)
	switch {
	case an && bn:
		return 0
	case an:
		return -1
	case bn:
		return 1
	}
	return cmp.Compare(a, b)
}

func toFloat(v Value) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case float32:
		return float64(x), true
	}
	return 0, false
}

// Format renders a value as text, as `ebbtable sql` prints it.
func Format(v Value) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		return quoteBytes(x)
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case bool:
		if x {
			return "true"
		}
		return "false"
	case time.Time:
		return x.UTC().Format("2006-01-02T15:04:05.999999Z07:00")
	case Date:
		return x.String()
	case Array:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = Format(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case Struct:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = Format(e)
		}
		return "(" + strings.Join(parts, ", ") + ")"
	case *Map:
		parts := make([]string, len(x.Keys))
		for i := range x.Keys {
			parts[i] = Format(x.Keys[i]) + ": " + Format(x.Vals[i])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v)
}

// quoteBytes prints printable bytes as they are and others escaped.
func quoteBytes(b []byte) string {
	printable := true
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			printable = false
			break
		}
	}
	if printable {
		return string(b)
	}
	q := strconv.Quote(string(b))
	return "b" + q
}
