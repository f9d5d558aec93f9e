package sqlquery

import (
	"slices"

	"github.com/cloudspannerecosystem/memefish/ast"
)

// Aggregate call modifiers (GoogleSQL's aggregate function calls):
// ARRAY_AGG([DISTINCT] x [{IGNORE | RESPECT} NULLS] [ORDER BY key [ASC |
// DESC], ...] [LIMIT n]) and STRING_AGG([DISTINCT] x [, sep] [ORDER BY
// ...] [LIMIT n]). ORDER BY orders the elements (NULL first ascending,
// last descending; equal keys keep the input's order); LIMIT keeps the
// first n of them (n a non-negative INT64 literal or parameter); IGNORE
// NULLS drops NULL inputs of ARRAY_AGG, RESPECT NULLS (the default) keeps
// them, and an array with a NULL element in the result is an error.
// STRING_AGG always drops NULLs. With DISTINCT every ORDER BY key must be
// the aggregated expression. HAVING MAX/MIN and other aggregates'
// modifiers are refused.

// aggOrder is an ORDER BY key of an aggregate call.
type aggOrder struct {
	eval evalFn
	desc bool
}

// aggMods are an aggregate call's modifiers.
type aggMods struct {
	order       []aggOrder
	limit       int64 // -1: none
	limitPar    string
	ignoreNulls bool
	respect     bool
}

func (m *aggMods) any() bool {
	return m != nil && (len(m.order) > 0 || m.limit >= 0 || m.limitPar != "" || m.ignoreNulls || m.respect)
}

// aggregateCall compiles an aggregate call with its modifiers.
func (p *planner) aggregateCall(c *ast.CallExpr, name string, sc *scope) (evalFn, *Type, error) {
	if c.Having != nil || len(c.NamedArgs) > 0 {
		return nil, nil, p.errf(c, "unsupported modifiers in call to %s", name)
	}
	list := name == "ARRAY_AGG" || name == "STRING_AGG"
	if !list && (c.NullHandling != nil || c.OrderBy != nil || c.Limit != nil) {
		return nil, nil, p.errf(c, "unsupported modifiers in call to %s", name)
	}
	if name == "STRING_AGG" && c.NullHandling != nil {
		return nil, nil, p.errf(c.NullHandling, "STRING_AGG takes no IGNORE NULLS or RESPECT NULLS")
	}
	f, t, err := p.aggregate(c, name, c.Args, c.Distinct, sc)
	if err != nil || !list {
		return f, t, err
	}
	spec := sc.aggs[len(sc.aggs)-1]
	m := &aggMods{limit: -1}
	switch c.NullHandling.(type) {
	case *ast.IgnoreNulls:
		m.ignoreNulls = true
	case *ast.RespectNulls:
		m.respect = true
	}
	if c.OrderBy != nil {
		arg := ""
		if len(c.Args) > 0 {
			if x, ok := p.argExpr(c.Args[0]); ok {
				arg = x.SQL()
			}
		}
		for _, oi := range c.OrderBy.Items {
			if oi.Collate != nil {
				return nil, nil, p.errf(oi, "COLLATE is not supported")
			}
			if c.Distinct && oi.Expr.SQL() != arg {
				return nil, nil, p.errf(oi.Expr, "with DISTINCT, %s's ORDER BY keys must be its argument", name)
			}
			kf, kt, err := p.compile(oi.Expr, sc.inner)
			if err != nil {
				return nil, nil, err
			}
			if kt.Kind == KindMap || kt.Kind == KindArray || kt.Kind == KindStruct {
				return nil, nil, p.errf(oi.Expr, "cannot ORDER BY a value of type %s", kt)
			}
			m.order = append(m.order, aggOrder{eval: kf, desc: oi.Dir == ast.DirectionDesc})
		}
	}
	if c.Limit != nil {
		if c.Limit.Offset != nil {
			return nil, nil, p.errf(c.Limit.Offset, "OFFSET is not supported")
		}
		switch n := c.Limit.Count.(type) {
		case *ast.IntLiteral:
			v, err := intLit(n)
			if err != nil || v < 0 {
				return nil, nil, p.errf(n, "LIMIT needs a non-negative INT64")
			}
			m.limit = v
		case *ast.Param:
			if pt, ok := p.params[n.Name]; !ok || pt.Kind != KindInt64 {
				return nil, nil, p.errf(n, "LIMIT parameter @%s must be declared INT64", n.Name)
			}
			m.limitPar = n.Name
		default:
			return nil, nil, p.errf(c.Limit, "LIMIT needs an INT64 literal or parameter")
		}
	}
	if m.any() {
		spec.mods = m
	}
	return f, t, nil
}

// limitOf is the call's LIMIT for this execution (-1: none).
func (m *aggMods) limitOf(e *rowEnv) (int64, error) {
	if m.limitPar == "" {
		return m.limit, nil
	}
	v := e.x.params[m.limitPar]
	if v == nil {
		return 0, invalidf("LIMIT parameter @%s is NULL", m.limitPar)
	}
	if n := v.(int64); n >= 0 {
		return n, nil
	}
	return 0, invalidf("LIMIT must not be negative")
}

// modItem is an element kept by a modified ARRAY_AGG or STRING_AGG.
type modItem struct {
	v    Value
	keys []Value
}

// addMod adds v (already past DISTINCT) to a modified list aggregate.
func (a *acc) addMod(e *rowEnv, v Value) error {
	m := a.spec.mods
	if !a.limSet {
		n, err := m.limitOf(e)
		if err != nil {
			return err
		}
		a.lim, a.limSet = n, true
	}
	a.n++
	if len(m.order) == 0 && a.lim >= 0 && int64(len(a.items)) >= a.lim {
		return nil // the first n are kept
	}
	it := modItem{v: v}
	for _, o := range m.order {
		k, err := o.eval(e)
		if err != nil {
			return err
		}
		it.keys = append(it.keys, k)
	}
	a.items = append(a.items, it)
	return nil
}

// modResult orders and cuts the kept elements.
func (a *acc) modResult() ([]Value, error) {
	m := a.spec.mods
	items := a.items
	if len(m.order) > 0 {
		slices.SortStableFunc(items, func(x, y modItem) int {
			for i, o := range m.order {
				c := compare(x.keys[i], y.keys[i])
				if o.desc {
					c = -c
				}
				if c != 0 {
					return c
				}
			}
			return 0
		})
	}
	if a.lim >= 0 && int64(len(items)) > a.lim {
		items = items[:a.lim]
	}
	out := make([]Value, len(items))
	for i, it := range items {
		if it.v == nil && a.spec.name == "ARRAY_AGG" {
			return nil, invalidf("ARRAY_AGG cannot hold NULL elements (use IGNORE NULLS)")
		}
		out[i] = it.v
	}
	return out, nil
}
