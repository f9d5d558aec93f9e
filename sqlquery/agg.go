package sqlquery

import (
	"bytes"
	"math"

	"github.com/cloudspannerecosystem/memefish/ast"
)

// aggregates are the aggregate functions; each makes an accumulator.
var aggregates = map[string]bool{
	"COUNT": true, "COUNTIF": true, "SUM": true, "AVG": true, "MIN": true, "MAX": true,
	"ANY_VALUE": true, "ARRAY_AGG": true, "STRING_AGG": true, "LOGICAL_AND": true, "LOGICAL_OR": true,
	"BIT_AND": true, "BIT_OR": true, "BIT_XOR": true, "APPROX_COUNT_DISTINCT": true,
	"APPROX_QUANTILES": true, "APPROX_TOP_COUNT": true, "APPROX_TOP_SUM": true,
}

// aggSpec is one aggregate of a grouped query.
type aggSpec struct {
	name     string
	args     []evalFn
	star     bool
	distinct bool
	out      *Type
	in       *Type
	// count is the approximate aggregates' n argument.
	count evalFn
	// mods are ARRAY_AGG's and STRING_AGG's modifiers (aggmod.go).
	mods *aggMods
}

// acc accumulates one aggregate over one group.
type acc struct {
	spec  *aggSpec
	n     int64
	i     int64
	f     float64
	float bool
	v     Value
	arr   Array
	parts [][]byte
	seen  map[string]bool
	set   bool
	err   error
	x     *approxState
	// A modified list aggregate's elements and LIMIT (aggmod.go).
	items  []modItem
	lim    int64
	limSet bool
}

func (p *planner) aggregate(at ast.Node, name string, args []ast.Arg, distinct bool, sc *scope) (evalFn, *Type, error) {
	switch name {
	case "APPROX_QUANTILES", "APPROX_TOP_COUNT", "APPROX_TOP_SUM":
		return p.approxAgg(at, name, args, distinct, sc)
	}
	approx, orig := name == "APPROX_COUNT_DISTINCT", name
	if approx {
		// An exact COUNT(DISTINCT x): a permitted estimate with no error.
		if distinct {
			return nil, nil, p.errf(at, "APPROX_COUNT_DISTINCT does not take DISTINCT")
		}
		name, distinct = "COUNT", true
	}
	spec := &aggSpec{name: name, distinct: distinct}
	if args == nil && name == "COUNT" {
		spec.star = true
	}
	var ts []*Type
	for _, a := range args {
		x, ok := p.argExpr(a)
		if !ok {
			return nil, nil, p.errf(a, "unsupported argument to %s", name)
		}
		f, t, err := p.compile(x, sc.inner)
		if err != nil {
			return nil, nil, err
		}
		spec.args = append(spec.args, f)
		ts = append(ts, t)
	}
	want := 1
	if name == "STRING_AGG" && len(ts) == 2 {
		want = 2
	}
	if !spec.star && len(ts) != want || approx && spec.star {
		return nil, nil, p.errf(at, "wrong number of arguments to %s", orig)
	}
	var in *Type
	if len(ts) > 0 {
		in = ts[0]
		spec.in = in
	}
	switch name {
	case "COUNT", "COUNTIF":
		spec.out = TInt64
		if approx && (in.Kind == KindArray || in.Kind == KindStruct || in.Kind == KindMap) {
			return nil, nil, p.errf(at, "APPROX_COUNT_DISTINCT cannot take a %s", in)
		}
		if name == "COUNTIF" && in.Kind != KindBool && in.Kind != KindNull {
			return nil, nil, p.errf(at, "COUNTIF needs a BOOL, not %s", in)
		}
	case "SUM":
		if !in.numeric() && in.Kind != KindNull {
			return nil, nil, p.errf(at, "SUM needs a number, not %s", in)
		}
		spec.out = TInt64
		if in.Kind == KindFloat32 || in.Kind == KindFloat64 {
			spec.out = TFloat64
		}
	case "AVG":
		if !in.numeric() && in.Kind != KindNull {
			return nil, nil, p.errf(at, "AVG needs a number, not %s", in)
		}
		spec.out = TFloat64
	case "MIN", "MAX":
		if in.Kind == KindMap || in.Kind == KindArray || in.Kind == KindStruct {
			return nil, nil, p.errf(at, "%s cannot take a %s", name, in)
		}
		spec.out = metaType(in)
	case "ANY_VALUE":
		spec.out = metaType(in)
	case "ARRAY_AGG":
		if in.Kind == KindArray {
			return nil, nil, p.errf(at, "ARRAY_AGG of arrays is not supported")
		}
		spec.out = ArrayOf(metaType(in))
	case "STRING_AGG":
		if in.Kind != KindString && in.Kind != KindBytes {
			return nil, nil, p.errf(at, "STRING_AGG needs STRING or BYTES, not %s", in)
		}
		spec.out = in
	case "LOGICAL_AND", "LOGICAL_OR":
		if in.Kind != KindBool && in.Kind != KindNull {
			return nil, nil, p.errf(at, "%s needs a BOOL, not %s", name, in)
		}
		spec.out = TBool
	case "BIT_AND", "BIT_OR", "BIT_XOR":
		if in.Kind != KindInt64 && in.Kind != KindNull {
			return nil, nil, p.errf(at, "%s needs an INT64, not %s", name, in)
		}
		spec.out = TInt64
	}
	idx := len(sc.aggs)
	sc.aggs = append(sc.aggs, spec)
	return func(r *rowEnv) (Value, error) { return r.aggv[idx], nil }, spec.out, nil
}

func (a *acc) add(e *rowEnv) error {
	s := a.spec
	if s.star {
		a.n++
		return nil
	}
	if s.count != nil {
		return a.addApprox(e)
	}
	v, err := s.args[0](e)
	if err != nil {
		return err
	}
	if m := s.mods; m != nil {
		// NULLs: STRING_AGG and ARRAY_AGG IGNORE NULLS drop them; else
		// ARRAY_AGG keeps them, an error if one is in the result.
		if v == nil && (s.name == "STRING_AGG" || m.ignoreNulls) {
			return nil
		}
		if s.distinct {
			k := "\x00"
			if v != nil {
				k = "\x01" + Format(v)
			}
			if a.seen == nil {
				a.seen = map[string]bool{}
			}
			if a.seen[k] {
				return nil
			}
			a.seen[k] = true
		}
		if s.name == "STRING_AGG" && len(s.args) > 1 && a.v == nil {
			sep, err := s.args[1](e)
			if err != nil {
				return err
			}
			a.v = sep
		}
		return a.addMod(e, v)
	}
	if s.name == "ARRAY_AGG" {
		if v == nil {
			return invalidf("ARRAY_AGG cannot hold NULL elements")
		}
	}
	if v == nil {
		return nil
	}
	if s.distinct {
		k := Format(v)
		if a.seen == nil {
			a.seen = map[string]bool{}
		}
		if a.seen[k] {
			return nil
		}
		a.seen[k] = true
	}
	a.n++
	switch s.name {
	case "COUNTIF":
		if v == true {
			a.i++
		}
	case "SUM", "AVG":
		if x, ok := v.(int64); ok && !a.float && s.name == "SUM" {
			sum := a.i + x
			if (sum > a.i) != (x > 0) {
				return invalidf("int64 overflow in SUM")
			}
			a.i = sum
		} else {
			f, _ := toFloat(v)
			a.f += f
		}
	case "MIN":
		if !a.set || compare(v, a.v) < 0 {
			a.v, a.set = v, true
		}
	case "MAX":
		if !a.set || compare(v, a.v) > 0 {
			a.v, a.set = v, true
		}
	case "ANY_VALUE":
		if !a.set {
			a.v, a.set = v, true
		}
	case "ARRAY_AGG":
		a.arr = append(a.arr, v)
	case "STRING_AGG":
		a.parts = append(a.parts, asBytes(v))
		if len(s.args) > 1 && a.v == nil {
			sep, err := s.args[1](e)
			if err != nil {
				return err
			}
			a.v = sep
		}
	case "LOGICAL_AND":
		if !a.set {
			a.v, a.set = true, true
		}
		a.v = a.v.(bool) && v.(bool)
	case "LOGICAL_OR":
		if !a.set {
			a.v, a.set = false, true
		}
		a.v = a.v.(bool) || v.(bool)
	case "BIT_AND":
		if !a.set {
			a.i, a.set = -1, true
		}
		a.i &= v.(int64)
	case "BIT_OR":
		a.i |= v.(int64)
	case "BIT_XOR":
		a.i ^= v.(int64)
	}
	return nil
}

func (a *acc) result() Value {
	s := a.spec
	if s.count != nil {
		return a.approxResult()
	}
	switch s.name {
	case "COUNT":
		return a.n
	case "COUNTIF":
		return a.i
	}
	if a.n == 0 {
		return nil
	}
	if s.mods != nil {
		vals, err := a.modResult()
		if err != nil {
			a.err = err
			return nil
		}
		if s.name == "ARRAY_AGG" {
			return Array(vals)
		}
		parts := make([][]byte, len(vals))
		for i, v := range vals {
			parts[i] = asBytes(v)
		}
		a.parts = parts
	}
	switch s.name {
	case "SUM":
		if s.out.Kind == KindInt64 {
			return a.i
		}
		return a.f
	case "AVG":
		return (a.f + float64(a.i)) / float64(a.n)
	case "ARRAY_AGG":
		return a.arr
	case "STRING_AGG":
		// (a.parts: the elements, ordered and cut when modified)
		sep := []byte(",")
		if a.v != nil {
			sep = asBytes(a.v)
		}
		out := bytes.Join(a.parts, sep)
		if s.out.Kind == KindString {
			return string(out)
		}
		return out
	case "BIT_AND", "BIT_OR", "BIT_XOR":
		return a.i
	}
	if f, ok := a.v.(float64); ok && math.IsNaN(f) {
		return f
	}
	return a.v
}
