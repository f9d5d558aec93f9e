package sqlquery

import (
	"math"
	"strings"
)

// More of the documented scalar functions: arrays, padding, trigonometry.

func init() {
	for name, def := range map[string]fnDef{
		"ARRAY_CONCAT": {min: 1, max: -1, typ: func(ts []*Type) (*Type, string) {
			t, msg := unifyTyp(ts)
			if msg == "" && t.Kind != KindArray {
				return nil, "ARRAY_CONCAT needs arrays"
			}
			return t, msg
		}, eval: func(_ *execCtx, a []Value) (Value, error) {
			var out Array
			for _, v := range a {
				out = append(out, v.(Array)...)
			}
			if out == nil {
				out = Array{}
			}
			return out, nil
		}},
		"ARRAY_FIRST": {min: 1, max: 1, typ: elemTyp, eval: func(_ *execCtx, a []Value) (Value, error) {
			arr := a[0].(Array)
			if len(arr) == 0 {
				return nil, invalidf("ARRAY_FIRST of an empty array")
			}
			return arr[0], nil
		}},
		"ARRAY_LAST": {min: 1, max: 1, typ: elemTyp, eval: func(_ *execCtx, a []Value) (Value, error) {
			arr := a[0].(Array)
			if len(arr) == 0 {
				return nil, invalidf("ARRAY_LAST of an empty array")
			}
			return arr[len(arr)-1], nil
		}},
		"ARRAY_FIRST_N": {min: 2, max: 2, typ: sameKind(KindArray), eval: func(_ *execCtx, a []Value) (Value, error) {
			arr, n := a[0].(Array), a[1].(int64)
			if n < 0 {
				return nil, invalidf("ARRAY_FIRST_N: n must not be negative")
			}
			return append(Array{}, arr[:min(int64(len(arr)), n)]...), nil
		}},
		"ARRAY_LAST_N": {min: 2, max: 2, typ: sameKind(KindArray), eval: func(_ *execCtx, a []Value) (Value, error) {
			arr, n := a[0].(Array), a[1].(int64)
			if n < 0 {
				return nil, invalidf("ARRAY_LAST_N: n must not be negative")
			}
			return append(Array{}, arr[int64(len(arr))-min(int64(len(arr)), n):]...), nil
		}},
		"ARRAY_INCLUDES": {min: 2, max: 2, typ: kindTyp(TBool, KindArray), eval: func(_ *execCtx, a []Value) (Value, error) {
			for _, e := range a[0].(Array) {
				if e != nil && compare(e, a[1]) == 0 {
					return true, nil
				}
			}
			return false, nil
		}},
		"ARRAY_INCLUDES_ANY": {min: 2, max: 2, typ: kindTyp(TBool, KindArray), eval: func(_ *execCtx, a []Value) (Value, error) {
			return includes(a[0].(Array), a[1].(Array), false), nil
		}},
		"ARRAY_INCLUDES_ALL": {min: 2, max: 2, typ: kindTyp(TBool, KindArray), eval: func(_ *execCtx, a []Value) (Value, error) {
			return includes(a[0].(Array), a[1].(Array), true), nil
		}},
		"ARRAY_IS_DISTINCT": {min: 1, max: 1, typ: kindTyp(TBool, KindArray), eval: func(_ *execCtx, a []Value) (Value, error) {
			arr := a[0].(Array)
			for i := range arr {
				for j := i + 1; j < len(arr); j++ {
					if arr[i] == nil && arr[j] == nil || arr[i] != nil && arr[j] != nil && compare(arr[i], arr[j]) == 0 {
						return false, nil
					}
				}
			}
			return true, nil
		}},
		"LPAD": {min: 2, max: 3, typ: strOrBytes(KindInt64), eval: pad(true)},
		"RPAD": {min: 2, max: 3, typ: strOrBytes(KindInt64), eval: pad(false)},
		"INITCAP": {min: 1, max: 1, typ: fixed(TString, KindString), eval: func(_ *execCtx, a []Value) (Value, error) {
			var b strings.Builder
			start := true
			for _, r := range a[0].(string) {
				if start {
					b.WriteString(strings.ToUpper(string(r)))
				} else {
					b.WriteString(strings.ToLower(string(r)))
				}
				start = strings.ContainsRune(" \t\n\r\v\f[](){}/|<>!?@\"^#$&~_,.:;*%+-", r)
			}
			return b.String(), nil
		}},
		"LOG": {min: 1, max: 2, typ: fixed(TFloat64, KindFloat64, KindFloat64), eval: func(_ *execCtx, a []Value) (Value, error) {
			x, _ := toFloat(a[0])
			if x <= 0 {
				return nil, invalidf("LOG of a non-positive number")
			}
			if len(a) == 1 {
				return math.Log(x), nil
			}
			b, _ := toFloat(a[1])
			if b <= 0 || b == 1 {
				return nil, invalidf("LOG base must be positive and not 1")
			}
			return math.Log(x) / math.Log(b), nil
		}},
		"SIN": floatFn(math.Sin), "COS": floatFn(math.Cos), "TAN": floatFn(math.Tan),
		"ASIN": floatFn(math.Asin), "ACOS": floatFn(math.Acos), "ATAN": floatFn(math.Atan),
		"SINH": floatFn(math.Sinh), "COSH": floatFn(math.Cosh), "TANH": floatFn(math.Tanh),
		"ATAN2": {min: 2, max: 2, typ: fixed(TFloat64, KindFloat64, KindFloat64), eval: func(_ *execCtx, a []Value) (Value, error) {
			y, _ := toFloat(a[0])
			x, _ := toFloat(a[1])
			return math.Atan2(y, x), nil
		}},
	} {
		functions[name] = def
	}
}

func elemTyp(ts []*Type) (*Type, string) {
	if ts[0].Kind != KindArray {
		return nil, "argument 1 must be an ARRAY, not " + ts[0].String()
	}
	return ts[0].Elem, ""
}

func includes(arr, want Array, all bool) bool {
	for _, w := range want {
		found := false
		for _, e := range arr {
			if e != nil && w != nil && compare(e, w) == 0 {
				found = true
				break
			}
		}
		if all && !found {
			return false
		}
		if !all && found {
			return true
		}
	}
	return all
}

// pad implements LPAD and RPAD: to a length in characters (STRING) or
// bytes (BYTES), with a pattern (default a space).
func pad(left bool) func(*execCtx, []Value) (Value, error) {
	return func(_ *execCtx, a []Value) (Value, error) {
		n := a[1].(int64)
		if n < 0 || n > 1<<20 {
			return nil, invalidf("pad length %d is out of range", n)
		}
		_, isStr := a[0].(string)
		unit := func(v Value) []string {
			var out []string
			if isStr {
				for _, r := range v.(string) {
					out = append(out, string(r))
				}
				return out
			}
			for _, c := range v.([]byte) {
				out = append(out, string([]byte{c}))
			}
			return out
		}
		s := unit(a[0])
		var p []string
		if len(a) > 2 {
			p = unit(a[2])
		} else {
			p = []string{" "}
		}
		if int64(len(s)) >= n {
			s = s[:n]
		} else {
			if len(p) == 0 {
				return nil, invalidf("pad pattern is empty")
			}
			fill := make([]string, 0, n-int64(len(s)))
			for i := 0; int64(len(fill)) < n-int64(len(s)); i++ {
				fill = append(fill, p[i%len(p)])
			}
			if left {
				s = append(fill, s...)
			} else {
				s = append(s, fill...)
			}
		}
		out := strings.Join(s, "")
		if isStr {
			return out, nil
		}
		return []byte(out), nil
	}
}
