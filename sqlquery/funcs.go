package sqlquery

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cloudspannerecosystem/memefish/ast"
)

// fnDef is a scalar function: its arity, result type and evaluation.
// Unless keepNull, a NULL argument makes the result NULL without calling
// eval.
type fnDef struct {
	min, max int // max < 0: variadic
	typ      func(ts []*Type) (*Type, string)
	eval     func(x *execCtx, a []Value) (Value, error)
	keepNull bool
	// evalT, when set, is called instead of eval with the argument types.
	evalT func(ts []*Type, a []Value) (Value, error)
}

func fixed(t *Type, want ...Kind) func([]*Type) (*Type, string) {
	return func(ts []*Type) (*Type, string) {
		for i, at := range ts {
			if i < len(want) && at.Kind != KindNull && at.Kind != want[i] &&
				!(want[i] == KindFloat64 && at.numeric()) && !(want[i] == KindBytes && at.Kind == KindString) {
				return nil, "argument " + strconv.Itoa(i+1) + " must be " + (&Type{Kind: want[i]}).String() + ", not " + at.String()
			}
		}
		return t, ""
	}
}

// strOrBytes: the result has the first argument's type (STRING or BYTES).
func strOrBytes(more ...Kind) func([]*Type) (*Type, string) {
	return func(ts []*Type) (*Type, string) {
		t := ts[0]
		if t.Kind == KindNull {
			t = TString
		}
		if t.Kind != KindString && t.Kind != KindBytes {
			return nil, "argument 1 must be STRING or BYTES, not " + t.String()
		}
		for i, at := range ts[1:] {
			want := t.Kind
			if i < len(more) {
				want = more[i]
			}
			if at.Kind != KindNull && at.Kind != want && !(want == KindBytes && at.Kind == KindString) {
				return nil, "argument " + strconv.Itoa(i+2) + " must be " + (&Type{Kind: want}).String() + ", not " + at.String()
			}
		}
		return t, ""
	}
}

func numArg(ts []*Type) (*Type, string) {
	t := ts[0]
	if t.Kind == KindNull {
		return TInt64, ""
	}
	if !t.numeric() {
		return nil, "needs a number, not " + t.String()
	}
	return t, ""
}

func floatFn(f func(float64) float64) fnDef {
	return fnDef{min: 1, max: 1, typ: fixed(TFloat64, KindFloat64), eval: func(_ *execCtx, a []Value) (Value, error) {
		x, _ := toFloat(a[0])
		return f(x), nil
	}}
}

func sameOrFloat(ts []*Type) *Type {
	allInt := true
	for _, t := range ts {
		if t.Kind != KindInt64 && t.Kind != KindNull {
			allInt = false
		}
	}
	if allInt {
		return TInt64
	}
	return TFloat64
}

var functions map[string]fnDef

func init() {
	functions = map[string]fnDef{
		// Strings and bytes.
		"CONCAT": {min: 1, max: -1, typ: strOrBytes(), eval: func(_ *execCtx, a []Value) (Value, error) {
			var b []byte
			for _, v := range a {
				b = append(b, asBytes(v)...)
			}
			if _, ok := a[0].(string); ok {
				return string(b), nil
			}
			return b, nil
		}},
		"LENGTH": {min: 1, max: 1, typ: func(ts []*Type) (*Type, string) {
			if _, msg := strOrBytes()(ts); msg != "" {
				return nil, msg
			}
			return TInt64, ""
		}, eval: func(_ *execCtx, a []Value) (Value, error) {
			if s, ok := a[0].(string); ok {
				return int64(utf8.RuneCountInString(s)), nil
			}
			return int64(len(a[0].([]byte))), nil
		}},
		"CHAR_LENGTH": {min: 1, max: 1, typ: fixed(TInt64, KindString), eval: func(_ *execCtx, a []Value) (Value, error) {
			return int64(utf8.RuneCountInString(a[0].(string))), nil
		}},
		"BYTE_LENGTH": {min: 1, max: 1, typ: fixed(TInt64), eval: func(_ *execCtx, a []Value) (Value, error) {
			return int64(len(asBytes(a[0]))), nil
		}},
		"LOWER": {min: 1, max: 1, typ: strOrBytes(), eval: func(_ *execCtx, a []Value) (Value, error) {
			if s, ok := a[0].(string); ok {
				return strings.ToLower(s), nil
			}
			return bytes.ToLower(a[0].([]byte)), nil
		}},
		"UPPER": {min: 1, max: 1, typ: strOrBytes(), eval: func(_ *execCtx, a []Value) (Value, error) {
			if s, ok := a[0].(string); ok {
				return strings.ToUpper(s), nil
			}
			return bytes.ToUpper(a[0].([]byte)), nil
		}},
		"SUBSTR":    {min: 2, max: 3, typ: strOrBytes(KindInt64, KindInt64), eval: substr},
		"SUBSTRING": {min: 2, max: 3, typ: strOrBytes(KindInt64, KindInt64), eval: substr},
		"STARTS_WITH": {min: 2, max: 2, typ: func(ts []*Type) (*Type, string) {
			if _, msg := strOrBytes()(ts); msg != "" {
				return nil, msg
			}
			return TBool, ""
		}, eval: func(_ *execCtx, a []Value) (Value, error) {
			return bytes.HasPrefix(asBytes(a[0]), asBytes(a[1])), nil
		}},
		"ENDS_WITH": {min: 2, max: 2, typ: fixed(TBool, KindBytes, KindBytes), eval: func(_ *execCtx, a []Value) (Value, error) {
			return bytes.HasSuffix(asBytes(a[0]), asBytes(a[1])), nil
		}},
		"STRPOS": {min: 2, max: 2, typ: fixed(TInt64, KindBytes, KindBytes), eval: func(_ *execCtx, a []Value) (Value, error) {
			i := bytes.Index(asBytes(a[0]), asBytes(a[1]))
			if _, ok := a[0].(string); ok && i > 0 {
				i = utf8.RuneCount(asBytes(a[0])[:i])
			}
			return int64(i + 1), nil
		}},
		"TRIM":  {min: 1, max: 2, typ: strOrBytes(), eval: trimFn(strings.Trim)},
		"LTRIM": {min: 1, max: 2, typ: strOrBytes(), eval: trimFn(strings.TrimLeft)},
		"RTRIM": {min: 1, max: 2, typ: strOrBytes(), eval: trimFn(strings.TrimRight)},
		"REPLACE": {min: 3, max: 3, typ: strOrBytes(), eval: func(_ *execCtx, a []Value) (Value, error) {
			if len(asBytes(a[1])) == 0 {
				return a[0], nil
			}
			out := bytes.ReplaceAll(asBytes(a[0]), asBytes(a[1]), asBytes(a[2]))
			if _, ok := a[0].(string); ok {
				return string(out), nil
			}
			return out, nil
		}},
		"REVERSE": {min: 1, max: 1, typ: strOrBytes(), eval: func(_ *execCtx, a []Value) (Value, error) {
			if s, ok := a[0].(string); ok {
				r := []rune(s)
				for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
					r[i], r[j] = r[j], r[i]
				}
				return string(r), nil
			}
			b := bytes.Clone(a[0].([]byte))
			for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
				b[i], b[j] = b[j], b[i]
			}
			return b, nil
		}},
		"REPEAT": {min: 2, max: 2, typ: strOrBytes(KindInt64), eval: func(_ *execCtx, a []Value) (Value, error) {
			n := a[1].(int64)
			if n < 0 || n*int64(len(asBytes(a[0]))) > 1<<20 {
				return nil, invalidf("REPEAT count %d is out of range", n)
			}
			out := bytes.Repeat(asBytes(a[0]), int(n))
			if _, ok := a[0].(string); ok {
				return string(out), nil
			}
			return out, nil
		}},
		"SPLIT": {min: 1, max: 2, typ: func(ts []*Type) (*Type, string) {
			t, msg := strOrBytes()(ts)
			if msg != "" {
				return nil, msg
			}
			return ArrayOf(t), ""
		}, eval: func(_ *execCtx, a []Value) (Value, error) {
			sep := []byte(",")
			if len(a) > 1 {
				sep = asBytes(a[1])
			}
			_, isStr := a[0].(string)
			var parts [][]byte
			if len(sep) == 0 && isStr {
				for _, r := range a[0].(string) {
					parts = append(parts, []byte(string(r)))
				}
			} else if len(sep) == 0 {
				for _, c := range a[0].([]byte) {
					parts = append(parts, []byte{c})
				}
			} else {
				parts = bytes.Split(asBytes(a[0]), sep)
			}
			out := make(Array, len(parts))
			for i, p := range parts {
				if isStr {
					out[i] = string(p)
				} else {
					out[i] = p
				}
			}
			return out, nil
		}},
		"REGEXP_CONTAINS": {min: 2, max: 2, typ: fixed(TBool, KindBytes, KindBytes), eval: func(_ *execCtx, a []Value) (Value, error) {
			re, err := compileRE(a[1])
			if err != nil {
				return nil, err
			}
			return re.Match(asBytes(a[0])), nil
		}},
		"REGEXP_EXTRACT": {min: 2, max: 2, typ: strOrBytes(), eval: func(_ *execCtx, a []Value) (Value, error) {
			re, err := compileRE(a[1])
			if err != nil {
				return nil, err
			}
			m := re.FindSubmatch(asBytes(a[0]))
			if m == nil {
				return nil, nil
			}
			g := m[0]
			if len(m) > 1 {
				g = m[1]
			}
			if _, ok := a[0].(string); ok {
				return string(g), nil
			}
			return bytes.Clone(g), nil
		}},
		"REGEXP_REPLACE": {min: 3, max: 3, typ: strOrBytes(), eval: func(_ *execCtx, a []Value) (Value, error) {
			re, err := compileRE(a[1])
			if err != nil {
				return nil, err
			}
			repl := regexp.MustCompile(`\\([0-9])`).ReplaceAll(asBytes(a[2]), []byte("$${$1}"))
			out := re.ReplaceAll(asBytes(a[0]), repl)
			if _, ok := a[0].(string); ok {
				return string(out), nil
			}
			return out, nil
		}},
		"TO_HEX": {min: 1, max: 1, typ: fixed(TString, KindBytes), eval: func(_ *execCtx, a []Value) (Value, error) {
			return hex.EncodeToString(asBytes(a[0])), nil
		}},
		"FROM_HEX": {min: 1, max: 1, typ: fixed(TBytes, KindString), eval: func(_ *execCtx, a []Value) (Value, error) {
			s := a[0].(string)
			if len(s)%2 == 1 {
				s = "0" + s
			}
			b, err := hex.DecodeString(s)
			if err != nil {
				return nil, invalidf("FROM_HEX: invalid hex %q", a[0])
			}
			return b, nil
		}},
		"TO_BASE64": {min: 1, max: 1, typ: fixed(TString, KindBytes), eval: func(_ *execCtx, a []Value) (Value, error) {
			return base64.StdEncoding.EncodeToString(asBytes(a[0])), nil
		}},
		"FROM_BASE64": {min: 1, max: 1, typ: fixed(TBytes, KindString), eval: func(_ *execCtx, a []Value) (Value, error) {
			b, err := base64.StdEncoding.DecodeString(a[0].(string))
			if err != nil {
				return nil, invalidf("FROM_BASE64: invalid base64")
			}
			return b, nil
		}},
		"SAFE_CONVERT_BYTES_TO_STRING": {min: 1, max: 1, typ: fixed(TString, KindBytes), eval: func(_ *execCtx, a []Value) (Value, error) {
			return strings.ToValidUTF8(string(asBytes(a[0])), "\uFFFD"), nil
		}},
		// Bigtable's binary decoders: big-endian, as written by increments.
		"TO_INT64": {min: 1, max: 1, typ: fixed(TInt64, KindBytes), eval: func(_ *execCtx, a []Value) (Value, error) {
			return castValue(a[0], TBytes, TInt64)
		}},
		"TO_FLOAT32": {min: 1, max: 1, typ: fixed(TFloat32, KindBytes), eval: func(_ *execCtx, a []Value) (Value, error) {
			return castValue(a[0], TBytes, TFloat32)
		}},
		"TO_FLOAT64": {min: 1, max: 1, typ: fixed(TFloat64, KindBytes), eval: func(_ *execCtx, a []Value) (Value, error) {
			return castValue(a[0], TBytes, TFloat64)
		}},
		// Numbers.
		"ABS": {min: 1, max: 1, typ: numArg, eval: func(_ *execCtx, a []Value) (Value, error) {
			switch x := a[0].(type) {
			case int64:
				if x == math.MinInt64 {
					return nil, invalidf("int64 overflow: ABS(%d)", x)
				}
				if x < 0 {
					return -x, nil
				}
				return x, nil
			case float32:
				return float32(math.Abs(float64(x))), nil
			}
			f, _ := toFloat(a[0])
			return math.Abs(f), nil
		}},
		"SIGN": {min: 1, max: 1, typ: numArg, eval: func(_ *execCtx, a []Value) (Value, error) {
			switch x := a[0].(type) {
			case int64:
				return int64(cmpInt(x)), nil
			case float32:
				return float32(fsign(float64(x))), nil
			}
			f, _ := toFloat(a[0])
			return fsign(f), nil
		}},
		"ROUND": {min: 1, max: 2, typ: fixed(TFloat64, KindFloat64, KindInt64), eval: func(_ *execCtx, a []Value) (Value, error) {
			f, _ := toFloat(a[0])
			p := 1.0
			if len(a) > 1 {
				p = math.Pow(10, float64(a[1].(int64)))
			}
			return math.Round(f*p) / p, nil
		}},
		"TRUNC": {min: 1, max: 2, typ: fixed(TFloat64, KindFloat64, KindInt64), eval: func(_ *execCtx, a []Value) (Value, error) {
			f, _ := toFloat(a[0])
			p := 1.0
			if len(a) > 1 {
				p = math.Pow(10, float64(a[1].(int64)))
			}
			return math.Trunc(f*p) / p, nil
		}},
		"CEIL":    floatFn(math.Ceil),
		"CEILING": floatFn(math.Ceil),
		"FLOOR":   floatFn(math.Floor),
		"SQRT": {min: 1, max: 1, typ: fixed(TFloat64, KindFloat64), eval: func(_ *execCtx, a []Value) (Value, error) {
			f, _ := toFloat(a[0])
			if f < 0 {
				return nil, invalidf("SQRT of a negative number")
			}
			return math.Sqrt(f), nil
		}},
		"EXP": floatFn(math.Exp),
		"LN": {min: 1, max: 1, typ: fixed(TFloat64, KindFloat64), eval: func(_ *execCtx, a []Value) (Value, error) {
			f, _ := toFloat(a[0])
			if f <= 0 {
				return nil, invalidf("LN of a non-positive number")
			}
			return math.Log(f), nil
		}},
		"LOG10": {min: 1, max: 1, typ: fixed(TFloat64, KindFloat64), eval: func(_ *execCtx, a []Value) (Value, error) {
			f, _ := toFloat(a[0])
			if f <= 0 {
				return nil, invalidf("LOG10 of a non-positive number")
			}
			return math.Log10(f), nil
		}},
		"POW":   {min: 2, max: 2, typ: fixed(TFloat64, KindFloat64, KindFloat64), eval: pow},
		"POWER": {min: 2, max: 2, typ: fixed(TFloat64, KindFloat64, KindFloat64), eval: pow},
		"MOD": {min: 2, max: 2, typ: fixed(TInt64, KindInt64, KindInt64), eval: func(_ *execCtx, a []Value) (Value, error) {
			y := a[1].(int64)
			if y == 0 {
				return nil, invalidf("division by zero: MOD(%d, 0)", a[0])
			}
			if y == -1 {
				return int64(0), nil
			}
			return a[0].(int64) % y, nil
		}},
		"DIV": {min: 2, max: 2, typ: fixed(TInt64, KindInt64, KindInt64), eval: func(_ *execCtx, a []Value) (Value, error) {
			x, y := a[0].(int64), a[1].(int64)
			if y == 0 {
				return nil, invalidf("division by zero: DIV(%d, 0)", x)
			}
			if x == math.MinInt64 && y == -1 {
				return nil, invalidf("int64 overflow: DIV(%d, -1)", x)
			}
			return x / y, nil
		}},
		"SAFE_DIVIDE": {min: 2, max: 2, typ: fixed(TFloat64, KindFloat64, KindFloat64), eval: func(_ *execCtx, a []Value) (Value, error) {
			x, _ := toFloat(a[0])
			y, _ := toFloat(a[1])
			if y == 0 {
				return nil, nil
			}
			return x / y, nil
		}},
		"IEEE_DIVIDE": {min: 2, max: 2, typ: fixed(TFloat64, KindFloat64, KindFloat64), eval: func(_ *execCtx, a []Value) (Value, error) {
			x, _ := toFloat(a[0])
			y, _ := toFloat(a[1])
			return x / y, nil
		}},
		"IS_NAN": {min: 1, max: 1, typ: fixed(TBool, KindFloat64), eval: func(_ *execCtx, a []Value) (Value, error) {
			f, _ := toFloat(a[0])
			return math.IsNaN(f), nil
		}},
		"IS_INF": {min: 1, max: 1, typ: fixed(TBool, KindFloat64), eval: func(_ *execCtx, a []Value) (Value, error) {
			f, _ := toFloat(a[0])
			return math.IsInf(f, 0), nil
		}},
		"GREATEST": {min: 1, max: -1, typ: unifyTyp, eval: extreme(1)},
		"LEAST":    {min: 1, max: -1, typ: unifyTyp, eval: extreme(-1)},
		// Conditionals.
		"COALESCE": {min: 1, max: -1, keepNull: true, typ: unifyTyp, eval: func(_ *execCtx, a []Value) (Value, error) {
			for _, v := range a {
				if v != nil {
					return v, nil
				}
			}
			return nil, nil
		}},
		"IFNULL": {min: 2, max: 2, keepNull: true, typ: unifyTyp, eval: func(_ *execCtx, a []Value) (Value, error) {
			if a[0] != nil {
				return a[0], nil
			}
			return a[1], nil
		}},
		"NULLIF": {min: 2, max: 2, keepNull: true, typ: unifyTyp, eval: func(_ *execCtx, a []Value) (Value, error) {
			if a[0] != nil && a[1] != nil && compare(a[0], a[1]) == 0 {
				return nil, nil
			}
			return a[0], nil
		}},
		// Time.
		"CURRENT_TIMESTAMP": {min: 0, max: 0, typ: fixed(TTimestamp), eval: func(x *execCtx, _ []Value) (Value, error) {
			return x.now, nil
		}},
		// CURRENT_DATE([zone]): the query's date in zone (UTC by default).
		"CURRENT_DATE": {min: 0, max: 1, typ: fixed(TDate, KindString), eval: func(x *execCtx, a []Value) (Value, error) {
			loc, _, err := zoneArg(a, 0)
			if err != nil {
				return nil, err
			}
			return dateOf(x.now.In(loc)), nil
		}},
		"TIMESTAMP_FROM_UNIX_MILLIS":  tsFrom(time.UnixMilli),
		"TIMESTAMP_MILLIS":            tsFrom(time.UnixMilli),
		"TIMESTAMP_FROM_UNIX_MICROS":  tsFrom(time.UnixMicro),
		"TIMESTAMP_MICROS":            tsFrom(time.UnixMicro),
		"TIMESTAMP_FROM_UNIX_SECONDS": tsFrom(func(s int64) time.Time { return time.Unix(s, 0) }),
		"TIMESTAMP_SECONDS":           tsFrom(func(s int64) time.Time { return time.Unix(s, 0) }),
		"UNIX_MILLIS":                 unixFn(func(t time.Time) int64 { return t.UnixMilli() }),
		"UNIX_MICROS":                 unixFn(func(t time.Time) int64 { return t.UnixMicro() }),
		"UNIX_SECONDS":                unixFn(func(t time.Time) int64 { return t.Unix() }),
		"DATE": {min: 1, max: 3, typ: func(ts []*Type) (*Type, string) {
			if len(ts) == 2 {
				return nil, "DATE takes (year, month, day), a TIMESTAMP or a STRING"
			}
			if len(ts) == 3 {
				return fixed(TDate, KindInt64, KindInt64, KindInt64)(ts)
			}
			switch ts[0].Kind {
			case KindTimestamp, KindString, KindDate, KindNull:
				return TDate, ""
			}
			return nil, "DATE cannot take a " + ts[0].String()
		}, eval: func(_ *execCtx, a []Value) (Value, error) {
			if len(a) == 3 {
				y, m, d := a[0].(int64), a[1].(int64), a[2].(int64)
				t := time.Date(int(y), time.Month(m), int(d), 0, 0, 0, 0, time.UTC)
				if t.Year() != int(y) || int64(t.Month()) != m || int64(t.Day()) != d || y < 1 || y > 9999 {
					return nil, invalidf("invalid date %d-%d-%d", y, m, d)
				}
				return dateOf(t), nil
			}
			switch v := a[0].(type) {
			case time.Time:
				return dateOf(v), nil
			case string:
				return parseDate(v)
			}
			return a[0], nil
		}},
		"TIMESTAMP": {min: 1, max: 1, typ: func(ts []*Type) (*Type, string) {
			switch ts[0].Kind {
			case KindString, KindDate, KindTimestamp, KindNull:
				return TTimestamp, ""
			}
			return nil, "TIMESTAMP cannot take a " + ts[0].String()
		}, eval: func(_ *execCtx, a []Value) (Value, error) {
			switch v := a[0].(type) {
			case string:
				return parseTimestamp(v)
			case Date:
				return v.time(), nil
			}
			return a[0], nil
		}},
		// Arrays and maps.
		"ARRAY_LENGTH": {min: 1, max: 1, typ: kindTyp(TInt64, KindArray), eval: func(_ *execCtx, a []Value) (Value, error) {
			return int64(len(a[0].(Array))), nil
		}},
		"ARRAY_REVERSE": {min: 1, max: 1, typ: sameKind(KindArray), eval: func(_ *execCtx, a []Value) (Value, error) {
			in := a[0].(Array)
			out := make(Array, len(in))
			for i, v := range in {
				out[len(in)-1-i] = v
			}
			return out, nil
		}},
		"ARRAY_TO_STRING": {min: 2, max: 3, typ: func(ts []*Type) (*Type, string) {
			if ts[0].Kind != KindArray || ts[0].Elem.Kind != KindString && ts[0].Elem.Kind != KindBytes {
				return nil, "ARRAY_TO_STRING needs an ARRAY of STRING or BYTES"
			}
			return ts[0].Elem, ""
		}, eval: func(_ *execCtx, a []Value) (Value, error) {
			var parts [][]byte
			for _, v := range a[0].(Array) {
				if v == nil {
					if len(a) == 3 {
						parts = append(parts, asBytes(a[2]))
					}
					continue
				}
				parts = append(parts, asBytes(v))
			}
			out := bytes.Join(parts, asBytes(a[1]))
			if _, ok := a[1].(string); ok {
				return string(out), nil
			}
			return out, nil
		}},
		"MAP_KEYS": {min: 1, max: 1, typ: func(ts []*Type) (*Type, string) {
			if ts[0].Kind != KindMap {
				return nil, "MAP_KEYS needs a MAP"
			}
			return ArrayOf(ts[0].Key), ""
		}, eval: func(_ *execCtx, a []Value) (Value, error) {
			return append(Array{}, a[0].(*Map).Keys...), nil
		}},
		"MAP_VALUES": {min: 1, max: 1, typ: func(ts []*Type) (*Type, string) {
			if ts[0].Kind != KindMap {
				return nil, "MAP_VALUES needs a MAP"
			}
			return ArrayOf(ts[0].Val), ""
		}, eval: func(_ *execCtx, a []Value) (Value, error) {
			return append(Array{}, a[0].(*Map).Vals...), nil
		}},
		"MAP_CONTAINS_KEY": {min: 2, max: 2, typ: func(ts []*Type) (*Type, string) {
			if ts[0].Kind != KindMap {
				return nil, "MAP_CONTAINS_KEY needs a MAP"
			}
			return TBool, ""
		}, eval: func(_ *execCtx, a []Value) (Value, error) {
			for _, k := range a[0].(*Map).Keys {
				if compare(k, a[1]) == 0 {
					return true, nil
				}
			}
			return false, nil
		}},
	}
}

func kindTyp(out *Type, k Kind) func([]*Type) (*Type, string) {
	return func(ts []*Type) (*Type, string) {
		if ts[0].Kind != k && ts[0].Kind != KindNull {
			return nil, "argument 1 must be " + (&Type{Kind: k}).String() + ", not " + ts[0].String()
		}
		return out, ""
	}
}

func sameKind(k Kind) func([]*Type) (*Type, string) {
	return func(ts []*Type) (*Type, string) {
		if ts[0].Kind != k {
			return nil, "argument 1 must be " + (&Type{Kind: k}).String() + ", not " + ts[0].String()
		}
		return ts[0], ""
	}
}

func unifyTyp(ts []*Type) (*Type, string) {
	out := TNull
	for _, t := range ts {
		switch {
		case t.Kind == KindNull:
		case out.Kind == KindNull:
			out = t
		case out.Equal(t):
		case out.numeric() && t.numeric():
			out = sameOrFloat([]*Type{out, t})
		default:
			return nil, "no common supertype for " + out.String() + " and " + t.String()
		}
	}
	return out, ""
}

func cmpInt(x int64) int {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

func fsign(f float64) float64 {
	switch {
	case f < 0:
		return -1
	case f > 0:
		return 1
	}
	return f
}

func pow(_ *execCtx, a []Value) (Value, error) {
	x, _ := toFloat(a[0])
	y, _ := toFloat(a[1])
	r := math.Pow(x, y)
	if math.IsNaN(r) && !math.IsNaN(x) && !math.IsNaN(y) {
		return nil, invalidf("POW(%v, %v) is undefined", x, y)
	}
	return r, nil
}

func extreme(sign int) func(*execCtx, []Value) (Value, error) {
	return func(_ *execCtx, a []Value) (Value, error) {
		best := a[0]
		for _, v := range a[1:] {
			if compare(v, best)*sign > 0 {
				best = v
			}
		}
		if _, ok := best.(int64); !ok {
			for i, v := range a {
				if _, ok := v.(int64); ok {
					f, _ := toFloat(v)
					a[i] = f
				}
			}
			if f, ok := toFloat(best); ok {
				return f, nil
			}
		}
		return best, nil
	}
}

func tsFrom(f func(int64) time.Time) fnDef {
	return fnDef{min: 1, max: 1, typ: fixed(TTimestamp, KindInt64), eval: func(_ *execCtx, a []Value) (Value, error) {
		t := f(a[0].(int64)).UTC()
		if t.Year() < 1 || t.Year() > 9999 {
			return nil, invalidf("timestamp out of range")
		}
		return t, nil
	}}
}

func unixFn(f func(time.Time) int64) fnDef {
	return fnDef{min: 1, max: 1, typ: fixed(TInt64, KindTimestamp), eval: func(_ *execCtx, a []Value) (Value, error) {
		return f(a[0].(time.Time)), nil
	}}
}

func substr(_ *execCtx, a []Value) (Value, error) {
	_, isStr := a[0].(string)
	var units []string
	if isStr {
		for _, r := range a[0].(string) {
			units = append(units, string(r))
		}
	} else {
		for _, c := range a[0].([]byte) {
			units = append(units, string([]byte{c}))
		}
	}
	n := int64(len(units))
	pos := a[1].(int64)
	switch {
	case pos > 0:
		pos--
	case pos < 0:
		pos = max(n+pos, 0)
	}
	pos = min(pos, n)
	end := n
	if len(a) > 2 {
		l := a[2].(int64)
		if l < 0 {
			return nil, invalidf("SUBSTR length must not be negative")
		}
		end = min(n, pos+l)
	}
	out := strings.Join(units[pos:end], "")
	if isStr {
		return out, nil
	}
	return []byte(out), nil
}

func trimFn(f func(string, string) string) func(*execCtx, []Value) (Value, error) {
	return func(_ *execCtx, a []Value) (Value, error) {
		cut := " \t\n\r\v\f"
		if len(a) > 1 {
			cut = string(asBytes(a[1]))
		}
		out := f(string(asBytes(a[0])), cut)
		if _, ok := a[0].(string); ok {
			return out, nil
		}
		return []byte(out), nil
	}
}

func compileRE(v Value) (*regexp.Regexp, error) {
	re, err := regexp.Compile(string(asBytes(v)))
	if err != nil {
		return nil, invalidf("invalid regular expression: %v", err)
	}
	return re, nil
}

// likeMatcher matches a LIKE pattern: % any run, _ one character, \
// escapes.
type likeMatcher struct{ re *regexp.Regexp }

func newLike(pat string) (*likeMatcher, error) {
	var b strings.Builder
	b.WriteString(`(?s)^`)
	for i := 0; i < len(pat); i++ {
		switch c := pat[i]; c {
		case '%':
			b.WriteString(`.*`)
		case '_':
			b.WriteString(`.`)
		case '\\':
			if i+1 >= len(pat) {
				return nil, invalidf("LIKE pattern ends with a backslash")
			}
			i++
			b.WriteString(regexp.QuoteMeta(pat[i : i+1]))
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`$`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, invalidf("invalid LIKE pattern %q", pat)
	}
	return &likeMatcher{re}, nil
}

func (l *likeMatcher) match(b []byte) bool { return l.re.Match(b) }

// likePrefix returns the literal prefix of a LIKE pattern that is a pure
// prefix match ("abc%"), if it is one.
func likePrefix(pat string) (string, bool) {
	if !strings.HasSuffix(pat, "%") {
		return "", false
	}
	p := pat[:len(pat)-1]
	if strings.ContainsAny(p, "%_\\") {
		return "", false
	}
	return p, true
}

// castable reports whether CAST(from AS to) is allowed.
func castable(from, to *Type) bool {
	if from.Kind == KindNull || from.Equal(to) {
		return true
	}
	switch to.Kind {
	case KindInt64, KindFloat32, KindFloat64:
		return from.numeric() || from.Kind == KindString || from.Kind == KindBytes || from.Kind == KindBool && to.Kind == KindInt64
	case KindString:
		return from.Kind != KindArray && from.Kind != KindStruct && from.Kind != KindMap
	case KindBytes:
		return from.Kind == KindString || from.Kind == KindInt64 || from.Kind == KindFloat32 || from.Kind == KindFloat64
	case KindBool:
		return from.Kind == KindInt64 || from.Kind == KindString
	case KindTimestamp:
		return from.Kind == KindString || from.Kind == KindDate
	case KindDate:
		return from.Kind == KindString || from.Kind == KindTimestamp
	case KindArray:
		return from.Kind == KindArray && castable(from.Elem, to.Elem)
	case KindStruct:
		if from.Kind != KindStruct || len(from.Fields) != len(to.Fields) {
			return false
		}
		for i := range from.Fields {
			if !castable(from.Fields[i].Type, to.Fields[i].Type) {
				return false
			}
		}
		return true
	}
	return false
}

// castValue converts v (of type from) to type to. BYTES convert to and
// from numbers as big-endian encodings (8 bytes for INT64 and FLOAT64, 4
// for FLOAT32), as Bigtable's CAST does for cells written by clients.
func castValue(v Value, from, to *Type) (Value, error) {
	if v == nil {
		return nil, nil
	}
	switch to.Kind {
	case KindInt64:
		switch x := v.(type) {
		case int64:
			return x, nil
		case float64, float32:
			f, _ := toFloat(x)
			if math.IsNaN(f) || f >= 9.223372036854775807e18 || f < -9.223372036854775808e18 {
				return nil, invalidf("int64 overflow: %v", f)
			}
			return int64(math.Round(f)), nil
		case string:
			s := strings.TrimSpace(x)
			n, err := strconv.ParseInt(s, 0, 64)
			if err != nil {
				return nil, invalidf("bad INT64 value %q", x)
			}
			return n, nil
		case []byte:
			if len(x) != 8 {
				return nil, invalidf("cannot cast %d bytes to INT64 (8 big-endian bytes needed)", len(x))
			}
			return int64(binary.BigEndian.Uint64(x)), nil
		case bool:
			if x {
				return int64(1), nil
			}
			return int64(0), nil
		}
	case KindFloat64, KindFloat32:
		var f float64
		switch x := v.(type) {
		case int64:
			f = float64(x)
		case float64:
			f = x
		case float32:
			f = float64(x)
		case string:
			var err error
			if f, err = strconv.ParseFloat(strings.TrimSpace(x), 64); err != nil {
				return nil, invalidf("bad %s value %q", to, x)
			}
		case []byte:
			switch {
			case len(x) == 8 && to.Kind == KindFloat64:
				f = math.Float64frombits(binary.BigEndian.Uint64(x))
			case len(x) == 4 && to.Kind == KindFloat32:
				return math.Float32frombits(binary.BigEndian.Uint32(x)), nil
			default:
				return nil, invalidf("cannot cast %d bytes to %s", len(x), to)
			}
		}
		if to.Kind == KindFloat32 {
			return float32(f), nil
		}
		return f, nil
	case KindString:
		switch x := v.(type) {
		case []byte:
			if !utf8.Valid(x) {
				return nil, invalidf("BYTES value is not valid UTF-8")
			}
			return string(x), nil
		case string:
			return x, nil
		}
		return Format(v), nil
	case KindBytes:
		switch x := v.(type) {
		case string:
			return []byte(x), nil
		case []byte:
			return x, nil
		case int64:
			return binary.BigEndian.AppendUint64(nil, uint64(x)), nil
		case float64:
			return binary.BigEndian.AppendUint64(nil, math.Float64bits(x)), nil
		case float32:
			return binary.BigEndian.AppendUint32(nil, math.Float32bits(x)), nil
		}
	case KindBool:
		switch x := v.(type) {
		case bool:
			return x, nil
		case int64:
			return x != 0, nil
		case string:
			switch strings.ToLower(x) {
			case "true":
				return true, nil
			case "false":
				return false, nil
			}
			return nil, invalidf("bad BOOL value %q", x)
		}
	case KindTimestamp:
		switch x := v.(type) {
		case string:
			return parseTimestamp(x)
		case Date:
			return x.time(), nil
		case time.Time:
			return x, nil
		}
	case KindDate:
		switch x := v.(type) {
		case string:
			return parseDate(x)
		case time.Time:
			return dateOf(x), nil
		case Date:
			return x, nil
		}
	case KindArray:
		in := v.(Array)
		out := make(Array, len(in))
		for i, e := range in {
			var err error
			if out[i], err = castValue(e, from.Elem, to.Elem); err != nil {
				return nil, err
			}
		}
		return out, nil
	case KindStruct:
		in := v.(Struct)
		out := make(Struct, len(in))
		for i, e := range in {
			var err error
			if out[i], err = castValue(e, from.Fields[i].Type, to.Fields[i].Type); err != nil {
				return nil, err
			}
		}
		return out, nil
	case KindMap:
		return v, nil
	}
	return nil, invalidf("cannot cast %s to %s", from, to)
}

// timeParts names the parts EXTRACT, TIMESTAMP_TRUNC and the interval
// functions take.
var timeParts = map[string]time.Duration{
	"MICROSECOND": time.Microsecond, "MILLISECOND": time.Millisecond, "SECOND": time.Second,
	"MINUTE": time.Minute, "HOUR": time.Hour, "DAY": 24 * time.Hour,
}

// call compiles a function call.
func (p *planner) call(e *ast.CallExpr, sc *scope) (evalFn, *Type, error) {
	name := strings.ToUpper(funcName(e.Func))
	safe := false
	if strings.HasPrefix(name, "SAFE.") {
		safe, name = true, strings.TrimPrefix(name, "SAFE.")
	}
	if e.Distinct || e.NullHandling != nil || e.Having != nil || e.OrderBy != nil || e.Limit != nil || len(e.NamedArgs) > 0 {
		return nil, nil, p.errf(e, "unsupported modifiers in call to %s", name)
	}
	switch name {
	case "TIMESTAMP_ADD", "TIMESTAMP_SUB", "DATE_ADD", "DATE_SUB":
		return p.intervalCall(e, name, sc)
	case "TIMESTAMP_TRUNC", "DATE_TRUNC", "TIMESTAMP_DIFF", "DATE_DIFF":
		return p.partCall(e, name, sc)
	}
	def, ok := functions[name]
	if !ok {
		return nil, nil, p.errf(e, "function not found: %s", funcName(e.Func))
	}
	if len(e.Args) < def.min || def.max >= 0 && len(e.Args) > def.max {
		return nil, nil, p.errf(e, "wrong number of arguments to %s: %d", name, len(e.Args))
	}
	var fs []evalFn
	var ts []*Type
	for _, a := range e.Args {
		ea, ok := a.(*ast.ExprArg)
		if !ok {
			return nil, nil, p.errf(a, "unsupported argument to %s", name)
		}
		f, t, err := p.compile(ea.Expr, sc)
		if err != nil {
			return nil, nil, err
		}
		fs, ts = append(fs, f), append(ts, t)
	}
	out, msg := def.typ(ts)
	if msg != "" {
		return nil, nil, p.errf(e, "%s: %s", name, msg)
	}
	if out.Kind != KindNull && (name == "COALESCE" || name == "IFNULL" || name == "NULLIF" || name == "GREATEST" || name == "LEAST") {
		for i := range fs {
			var err error
			if fs[i], err = p.coerce(e.Args[i], fs[i], ts[i], out); err != nil {
				return nil, nil, err
			}
		}
	}
	return func(r *rowEnv) (Value, error) {
		args := make([]Value, len(fs))
		for i, f := range fs {
			v, err := f(r)
			if err != nil {
				return nil, err
			}
			if v == nil && !def.keepNull {
				return nil, nil
			}
			args[i] = v
		}
		var v Value
		var err error
		if def.evalT != nil {
			v, err = def.evalT(ts, args)
		} else {
			v, err = def.eval(r.x, args)
		}
		if err != nil && safe {
			return nil, nil
		}
		return v, err
	}, out, nil
}

func (p *planner) argExpr(a ast.Arg) (ast.Expr, bool) {
	ea, ok := a.(*ast.ExprArg)
	if !ok {
		return nil, false
	}
	return ea.Expr, true
}

// intervalCall compiles TIMESTAMP_ADD(ts, INTERVAL n PART) and its kin.
func (p *planner) intervalCall(e *ast.CallExpr, name string, sc *scope) (evalFn, *Type, error) {
	if len(e.Args) != 2 {
		return nil, nil, p.errf(e, "%s takes a value and an INTERVAL", name)
	}
	ve, _ := p.argExpr(e.Args[0])
	var iv *ast.IntervalLiteralSingle
	if ie, ok := p.argExpr(e.Args[1]); ok {
		if s, ok := ie.(*ast.IntervalLiteralSingle); ok {
			iv = s
		}
	}
	if ve == nil || iv == nil {
		return nil, nil, p.errf(e, "%s takes a value and an INTERVAL", name)
	}
	f, t, err := p.compile(ve, sc)
	if err != nil {
		return nil, nil, err
	}
	want := TTimestamp
	if strings.HasPrefix(name, "DATE") {
		want = TDate
	}
	if t.Kind != want.Kind && t.Kind != KindNull {
		return nil, nil, p.errf(ve, "%s needs a %s, not %s", name, want, t)
	}
	nx, ok := iv.Value.(ast.Expr)
	if !ok {
		return nil, nil, p.errf(iv, "unsupported interval")
	}
	nf, nt, err := p.compile(nx, sc)
	if err != nil {
		return nil, nil, err
	}
	if nt.Kind != KindInt64 {
		return nil, nil, p.errf(iv, "interval needs an INT64")
	}
	part := string(iv.DateTimePart)
	unit, isDur := timeParts[part]
	if !isDur && part != "WEEK" && part != "MONTH" && part != "QUARTER" && part != "YEAR" {
		return nil, nil, p.errf(iv, "unsupported interval part %s", part)
	}
	if want.Kind == KindTimestamp && !isDur {
		return nil, nil, p.errf(iv, "%s does not take %s", name, part)
	}
	sign := int64(1)
	if strings.HasSuffix(name, "_SUB") {
		sign = -1
	}
	return func(r *rowEnv) (Value, error) {
		v, err := f(r)
		if err != nil || v == nil {
			return nil, err
		}
		nv, err := nf(r)
		if err != nil || nv == nil {
			return nil, err
		}
		n := nv.(int64) * sign
		if tv, ok := v.(time.Time); ok {
			return tv.Add(time.Duration(n) * unit), nil
		}
		d := v.(Date).time()
		switch part {
		case "DAY":
			d = d.AddDate(0, 0, int(n))
		case "WEEK":
			d = d.AddDate(0, 0, int(7*n))
		case "MONTH":
			d = addMonths(d, int(n))
		case "QUARTER":
			d = addMonths(d, int(3*n))
		case "YEAR":
			d = addMonths(d, int(12*n))
		default:
			return nil, invalidf("%s does not take %s", name, part)
		}
		return dateOf(d), nil
	}, want, nil
}

// addMonths clamps to the month's last day, as GoogleSQL does.
func addMonths(t time.Time, n int) time.Time {
	first := time.Date(t.Year(), t.Month()+time.Month(n), 1, 0, 0, 0, 0, time.UTC)
	last := first.AddDate(0, 1, -1).Day()
	return time.Date(first.Year(), first.Month(), min(t.Day(), last), 0, 0, 0, 0, time.UTC)
}

// partName reads a date part given as a bare name (DAY, HOUR, ...).
func partName(a ast.Arg) (string, bool) {
	ea, ok := a.(*ast.ExprArg)
	if !ok {
		return "", false
	}
	switch x := ea.Expr.(type) {
	case *ast.Ident:
		return strings.ToUpper(x.Name), true
	case *ast.Path:
		return strings.ToUpper(x.SQL()), true
	}
	return "", false
}

func truncTime(t time.Time, part string) (time.Time, bool) {
	switch part {
	case "YEAR":
		return time.Date(t.Year(), 1, 1, 0, 0, 0, 0, time.UTC), true
	case "QUARTER":
		return time.Date(t.Year(), t.Month()-(t.Month()-1)%3, 1, 0, 0, 0, 0, time.UTC), true
	case "MONTH":
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC), true
	case "WEEK":
		d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		return d.AddDate(0, 0, -int(d.Weekday())), true
	}
	if u, ok := timeParts[part]; ok {
		return t.Truncate(u), true
	}
	return t, false
}

// partCall compiles TIMESTAMP_TRUNC, DATE_TRUNC, TIMESTAMP_DIFF, DATE_DIFF.
func (p *planner) partCall(e *ast.CallExpr, name string, sc *scope) (evalFn, *Type, error) {
	diff := strings.HasSuffix(name, "_DIFF")
	n := 2
	if diff {
		n = 3
	}
	if len(e.Args) != n {
		return nil, nil, p.errf(e, "wrong number of arguments to %s", name)
	}
	part, ok := partName(e.Args[n-1])
	if !ok {
		return nil, nil, p.errf(e, "%s needs a date part (DAY, HOUR, ...)", name)
	}
	want := TTimestamp
	if strings.HasPrefix(name, "DATE") {
		want = TDate
	}
	var fs []evalFn
	for _, a := range e.Args[:n-1] {
		x, ok := p.argExpr(a)
		if !ok {
			return nil, nil, p.errf(a, "unsupported argument")
		}
		f, t, err := p.compile(x, sc)
		if err != nil {
			return nil, nil, err
		}
		if t.Kind != want.Kind && t.Kind != KindNull {
			return nil, nil, p.errf(x, "%s needs a %s, not %s", name, want, t)
		}
		fs = append(fs, f)
	}
	if _, ok := truncTime(time.Time{}, part); !ok {
		return nil, nil, p.errf(e, "unsupported date part %s", part)
	}
	out := want
	if diff {
		out = TInt64
		if _, ok := timeParts[part]; !ok && want.Kind == KindTimestamp {
			return nil, nil, p.errf(e, "%s does not take %s", name, part)
		}
	}
	return func(r *rowEnv) (Value, error) {
		var ts []time.Time
		for _, f := range fs {
			v, err := f(r)
			if err != nil || v == nil {
				return nil, err
			}
			if d, ok := v.(Date); ok {
				ts = append(ts, d.time())
			} else {
				ts = append(ts, v.(time.Time))
			}
		}
		if !diff {
			t, _ := truncTime(ts[0], part)
			if want.Kind == KindDate {
				return dateOf(t), nil
			}
			return t, nil
		}
		if u, ok := timeParts[part]; ok {
			if want.Kind == KindDate && part != "DAY" {
				return nil, invalidf("DATE_DIFF does not take %s", part)
			}
			return int64(ts[0].Sub(ts[1]) / u), nil
		}
		a, b := ts[0], ts[1]
		switch part {
		case "WEEK":
			wa, _ := truncTime(a, "WEEK")
			wb, _ := truncTime(b, "WEEK")
			return int64(wa.Sub(wb) / (7 * 24 * time.Hour)), nil
		case "MONTH":
			return int64((a.Year()-b.Year())*12 + int(a.Month()) - int(b.Month())), nil
		case "QUARTER":
			return int64((a.Year()-b.Year())*4 + (int(a.Month())-1)/3 - (int(b.Month())-1)/3), nil
		}
		return int64(a.Year() - b.Year()), nil
	}, out, nil
}

// extract compiles EXTRACT(part FROM value).
func (p *planner) extract(e *ast.ExtractExpr, sc *scope) (evalFn, *Type, error) {
	if e.AtTimeZone != nil {
		return nil, nil, p.errf(e, "EXTRACT ... AT TIME ZONE is not supported")
	}
	f, t, err := p.compile(e.Expr, sc)
	if err != nil {
		return nil, nil, err
	}
	if t.Kind != KindTimestamp && t.Kind != KindDate && t.Kind != KindNull {
		return nil, nil, p.errf(e, "EXTRACT needs a TIMESTAMP or DATE, not %s", t)
	}
	part := strings.ToUpper(e.Part.Name)
	out := TInt64
	if part == "DATE" {
		out = TDate
	}
	get := map[string]func(time.Time) Value{
		"YEAR": func(t time.Time) Value { return int64(t.Year()) }, "MONTH": func(t time.Time) Value { return int64(t.Month()) },
		"DAY": func(t time.Time) Value { return int64(t.Day()) }, "HOUR": func(t time.Time) Value { return int64(t.Hour()) },
		"MINUTE": func(t time.Time) Value { return int64(t.Minute()) }, "SECOND": func(t time.Time) Value { return int64(t.Second()) },
		"MILLISECOND": func(t time.Time) Value { return int64(t.Nanosecond() / 1e6) },
		"MICROSECOND": func(t time.Time) Value { return int64(t.Nanosecond() / 1e3) },
		"DAYOFWEEK":   func(t time.Time) Value { return int64(t.Weekday()) + 1 }, "DAYOFYEAR": func(t time.Time) Value { return int64(t.YearDay()) },
		"QUARTER": func(t time.Time) Value { return int64((t.Month()-1)/3 + 1) },
		"DATE":    func(t time.Time) Value { return dateOf(t) },
	}[part]
	if get == nil {
		return nil, nil, p.errf(e.Part, "unsupported EXTRACT part %s", part)
	}
	return func(r *rowEnv) (Value, error) {
		v, err := f(r)
		if err != nil || v == nil {
			return nil, err
		}
		if d, ok := v.(Date); ok {
			return get(d.time()), nil
		}
		return get(v.(time.Time)), nil
	}, out, nil
}
