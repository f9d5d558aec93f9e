package sqlquery

import (
	"sort"

	"github.com/cloudspannerecosystem/memefish/ast"
)

// The approximate aggregates APPROX_QUANTILES, APPROX_TOP_COUNT and
// APPROX_TOP_SUM, computed exactly (a permitted estimate with no error).
// Their last argument, the INT64 count n, must be positive.

// approxAgg compiles one of the three approximate aggregates.
func (p *planner) approxAgg(at ast.Node, name string, args []ast.Arg, distinct bool, sc *scope) (evalFn, *Type, error) {
	want := 2
	if name == "APPROX_TOP_SUM" {
		want = 3
	}
	if len(args) != want {
		return nil, nil, p.errf(at, "wrong number of arguments to %s", name)
	}
	if distinct && name != "APPROX_QUANTILES" {
		return nil, nil, p.errf(at, "%s does not take DISTINCT", name)
	}
	spec := &aggSpec{name: name, distinct: distinct}
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
	in := ts[0]
	spec.in = in
	if in.Kind == KindArray || in.Kind == KindStruct || in.Kind == KindMap {
		return nil, nil, p.errf(at, "%s cannot take a %s", name, in)
	}
	if k := ts[want-1].Kind; k != KindInt64 && k != KindNull {
		return nil, nil, p.errf(at, "%s: the count must be INT64, not %s", name, ts[want-1])
	}
	spec.count = spec.args[want-1]
	elem := metaType(in)
	switch name {
	case "APPROX_QUANTILES":
		spec.out = ArrayOf(elem)
	case "APPROX_TOP_COUNT":
		spec.out = ArrayOf(&Type{Kind: KindStruct, Fields: []Field{{"value", elem}, {"count", TInt64}}})
	case "APPROX_TOP_SUM":
		w := ts[1]
		sum := TInt64
		switch w.Kind {
		case KindInt64, KindNull:
		case KindFloat32, KindFloat64:
			sum = TFloat64
		default:
			return nil, nil, p.errf(at, "APPROX_TOP_SUM: the weight must be a number, not %s", w)
		}
		spec.out = ArrayOf(&Type{Kind: KindStruct, Fields: []Field{{"value", elem}, {"sum", sum}}})
	}
	idx := len(sc.aggs)
	sc.aggs = append(sc.aggs, spec)
	return func(r *rowEnv) (Value, error) { return r.aggv[idx], nil }, spec.out, nil
}

// approxState is an approximate aggregate's state over one group.
type approxState struct {
	n     int64
	vals  Array
	top   map[string]*topEntry
	float bool
}

// topEntry is one distinct value's count or sum.
type topEntry struct {
	v   Value
	i   int64
	f   float64
	set bool // a non-NULL weight was seen
}

func (a *acc) addApprox(e *rowEnv) error {
	s := a.spec
	if a.x == nil {
		a.x = &approxState{float: s.out.Elem.Kind == KindStruct && s.out.Elem.Fields[1].Type.Kind == KindFloat64}
	}
	x := a.x
	nv, err := s.count(e)
	if err != nil {
		return err
	}
	n, _ := nv.(int64)
	if nv == nil || n <= 0 {
		return invalidf("%s: the count must be a positive INT64, got %s", s.name, Format(nv))
	}
	x.n = n
	v, err := s.args[0](e)
	if err != nil {
		return err
	}
	if s.name == "APPROX_QUANTILES" {
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
		x.vals = append(x.vals, v)
		a.n++
		return nil
	}
	var w Value = int64(1)
	if s.name == "APPROX_TOP_SUM" {
		if w, err = s.args[1](e); err != nil {
			return err
		}
	}
	k := "\x00NULL"
	if v != nil {
		k = "v" + Format(v)
	}
	if x.top == nil {
		x.top = map[string]*topEntry{}
	}
	t := x.top[k]
	if t == nil {
		t = &topEntry{v: v}
		x.top[k] = t
	}
	a.n++
	if w == nil {
		return nil
	}
	t.set = true
	if x.float {
		f, _ := toFloat(w)
		t.f += f
	} else {
		i := w.(int64)
		sum := t.i + i
		if (sum > t.i) != (i > 0) {
			return invalidf("int64 overflow in %s", s.name)
		}
		t.i = sum
	}
	return nil
}

func (a *acc) approxResult() Value {
	x := a.x
	if x == nil || a.n == 0 {
		return nil
	}
	if a.spec.name == "APPROX_QUANTILES" {
		vs := x.vals
		sort.SliceStable(vs, func(i, j int) bool { return compare(vs[i], vs[j]) < 0 })
		out := make(Array, 0, x.n+1)
		cnt := int64(len(vs))
		for i := int64(0); i <= x.n; i++ {
			// The nearest rank: the ceil(i*N/n)-th smallest, the minimum first.
			r := (i*cnt + x.n - 1) / x.n
			if r > 0 {
				r--
			}
			out = append(out, vs[r])
		}
		return out
	}
	es := make([]*topEntry, 0, len(x.top))
	for _, t := range x.top {
		es = append(es, t)
	}
	sort.Slice(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if a.set != b.set {
			return a.set
		}
		if x.float && a.f != b.f {
			return a.f > b.f
		}
		if !x.float && a.i != b.i {
			return a.i > b.i
		}
		return compare(a.v, b.v) < 0
	})
	if int64(len(es)) > x.n {
		es = es[:x.n]
	}
	out := make(Array, len(es))
	for i, t := range es {
		var c Value = t.i
		switch {
		case !t.set:
			c = nil
		case x.float:
			c = t.f
		}
		out[i] = Struct{t.v, c}
	}
	return out
}
