package sqlquery

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
)

// The JSON functions Bigtable documents. Bigtable has no JSON type: the
// input is a JSON-formatted STRING, and results are STRINGs (JSON text
// for the query functions, the scalar's text for the value functions).
// Input that is not valid JSON gives NULL; a malformed JSONPath is an
// error.

func init() {
	jsonTyp := func(out *Type) func([]*Type) (*Type, string) {
		return fixed(out, KindString, KindString)
	}
	for name, def := range map[string]fnDef{
		"JSON_QUERY":          {min: 2, max: 2, typ: jsonTyp(TString), eval: jsonFn(false, jsonQuery)},
		"JSON_EXTRACT":        {min: 2, max: 2, typ: jsonTyp(TString), eval: jsonFn(true, jsonQuery)},
		"JSON_VALUE":          {min: 1, max: 2, typ: jsonTyp(TString), eval: jsonFn(false, jsonValue)},
		"JSON_EXTRACT_SCALAR": {min: 1, max: 2, typ: jsonTyp(TString), eval: jsonFn(true, jsonValue)},
		"JSON_QUERY_ARRAY":    {min: 1, max: 2, typ: jsonTyp(ArrayOf(TString)), eval: jsonFn(false, jsonQueryArray)},
		"TO_JSON_STRING": {min: 1, max: 2, typ: func(ts []*Type) (*Type, string) {
			if len(ts) == 2 && ts[1].Kind != KindBool && ts[1].Kind != KindNull {
				return nil, "argument 2 must be BOOL, not " + ts[1].String()
			}
			return TString, ""
		}, keepNull: true, evalT: func(ts []*Type, a []Value) (Value, error) {
			var b bytes.Buffer
			toJSON(&b, ts[0], a[0])
			if len(a) == 2 && a[1] == true {
				var out bytes.Buffer
				if err := json.Indent(&out, b.Bytes(), "", "  "); err == nil {
					return out.String(), nil
				}
			}
			return b.String(), nil
		}},
	} {
		functions[name] = def
	}
}

func jsonFn(legacy bool, f func(raw json.RawMessage) Value) func(*execCtx, []Value) (Value, error) {
	return func(_ *execCtx, a []Value) (Value, error) {
		path := "$"
		if len(a) > 1 {
			path = a[1].(string)
		}
		steps, err := parseJSONPath(path, legacy)
		if err != nil {
			return nil, err
		}
		doc := []byte(a[0].(string))
		if !json.Valid(doc) {
			return nil, nil
		}
		raw := json.RawMessage(doc)
		for _, s := range steps {
			if raw, err = s.apply(raw); err != nil || raw == nil {
				return nil, nil
			}
		}
		return f(raw), nil
	}
}

func jsonQuery(raw json.RawMessage) Value {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return nil
	}
	return b.String()
}

func jsonValue(raw json.RawMessage) Value {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	switch raw[0] {
	case '{', '[', 'n':
		return nil
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil
		}
		return s
	}
	return string(raw)
}

func jsonQueryArray(raw json.RawMessage) Value {
	var elems []json.RawMessage
	if json.Unmarshal(raw, &elems) != nil || elems == nil {
		return nil
	}
	out := Array{}
	for _, e := range elems {
		out = append(out, jsonQuery(e))
	}
	return out
}

// jsonStep is one member or element access of a JSONPath.
type jsonStep struct {
	key   string
	index int // -1: a member access
}

func (s jsonStep) apply(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		idx := s.index
		if idx < 0 {
			n, err := strconv.Atoi(s.key)
			if err != nil {
				return nil, nil
			}
			idx = n
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil || idx < 0 || idx >= len(elems) {
			return nil, err
		}
		return elems[idx], nil
	}
	if len(raw) > 0 && raw[0] == '{' && s.index < 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, err
		}
		return obj[s.key], nil
	}
	return nil, nil
}

// parseJSONPath reads $ followed by .member, ."quoted member" (standard)
// or ['quoted member'] (legacy), and [index] steps.
func parseJSONPath(p string, legacy bool) ([]jsonStep, error) {
	bad := func() ([]jsonStep, error) { return nil, invalidf("invalid JSONPath %q", p) }
	if !strings.HasPrefix(p, "$") {
		return bad()
	}
	var steps []jsonStep
	s := p[1:]
	for s != "" {
		switch s[0] {
		case '.':
			s = s[1:]
			if !legacy && strings.HasPrefix(s, `"`) {
				end := strings.IndexByte(s[1:], '"')
				if end < 0 {
					return bad()
				}
				steps = append(steps, jsonStep{key: s[1 : end+1], index: -1})
				s = s[end+2:]
				continue
			}
			end := strings.IndexAny(s, ".[")
			if end < 0 {
				end = len(s)
			}
			if end == 0 {
				return bad()
			}
			steps = append(steps, jsonStep{key: s[:end], index: -1})
			s = s[end:]
		case '[':
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return bad()
			}
			in := strings.TrimSpace(s[1:end])
			s = s[end+1:]
			if len(in) >= 2 && (in[0] == '\'' || in[0] == '"') && in[len(in)-1] == in[0] {
				steps = append(steps, jsonStep{key: in[1 : len(in)-1], index: -1})
				continue
			}
			n, err := strconv.Atoi(in)
			if err != nil || n < 0 {
				return bad()
			}
			steps = append(steps, jsonStep{index: n})
		default:
			return bad()
		}
	}
	return steps, nil
}

// toJSON writes v (of type t) as JSON: INT64 beyond ±2^53 as a string,
// non-finite floats as "NaN", "Infinity", "-Infinity", BYTES in base64,
// a STRUCT as an object of its fields, a MAP as an object whose member
// names are its keys' text (BYTES keys as they are).
func toJSON(b *bytes.Buffer, t *Type, v Value) {
	str := func(s string) {
		enc := json.NewEncoder(b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		b.Truncate(b.Len() - 1) // Encode's newline
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case int64:
		if x > 1<<53 || x < -(1<<53) {
			str(strconv.FormatInt(x, 10))
		} else {
			b.WriteString(strconv.FormatInt(x, 10))
		}
	case float64, float32:
		f, _ := toFloat(x)
		switch {
		case math.IsNaN(f):
			str("NaN")
		case math.IsInf(f, 1):
			str("Infinity")
		case math.IsInf(f, -1):
			str("-Infinity")
		default:
			bits := 64
			if _, ok := x.(float32); ok {
				bits = 32
			}
			b.WriteString(strconv.FormatFloat(f, 'g', -1, bits))
		}
	case string:
		str(x)
	case []byte:
		str(base64.StdEncoding.EncodeToString(x))
	case time.Time:
		str(x.UTC().Format("2006-01-02T15:04:05.999999Z"))
	case Date:
		str(x.String())
	case Array:
		var et *Type
		if t != nil {
			et = t.Elem
		}
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			toJSON(b, et, e)
		}
		b.WriteByte(']')
	case Struct:
		b.WriteByte('{')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			var ft *Type
			name := ""
			if t != nil && i < len(t.Fields) {
				name, ft = t.Fields[i].Name, t.Fields[i].Type
			}
			str(name)
			b.WriteByte(':')
			toJSON(b, ft, e)
		}
		b.WriteByte('}')
	case *Map:
		var vt *Type
		if t != nil {
			vt = t.Val
		}
		b.WriteByte('{')
		for i := range x.Keys {
			if i > 0 {
				b.WriteByte(',')
			}
			switch k := x.Keys[i].(type) {
			case string, []byte:
				str(asString(k))
			default:
				str(Format(k))
			}
			b.WriteByte(':')
			toJSON(b, vt, x.Vals[i])
		}
		b.WriteByte('}')
	default:
		str(Format(v))
	}
}
