package sqlquery

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cloudspannerecosystem/memefish/ast"
)

// scope resolves names while compiling expressions.
type scope struct {
	p   *planner
	src source
	// grouped scopes (after GROUP BY or with aggregates) see group keys and
	// aggregates; inner is the row scope their arguments are compiled in.
	grouped    bool
	inner      *scope
	groupText  []string
	groupTypes []*Type
	aggs       []*aggSpec
}

// column resolves a source column.
func (s *scope) column(name string) (evalFn, *Type, bool) {
	switch src := s.src.(type) {
	case *tableSource:
		if strings.EqualFold(name, "_key") {
			return func(e *rowEnv) (Value, error) { return e.row.Key, nil }, TBytes, true
		}
		c, ok := src.column(name)
		if !ok {
			return nil, nil, false
		}
		fam, hist := c.Name, src.history
		return func(e *rowEnv) (Value, error) { return familyValue(e.row, fam, hist), nil }, c.Type, true
	default:
		for i, c := range s.src.columns() {
			if c.Name != "" && strings.EqualFold(c.Name, name) {
				i := i
				return func(e *rowEnv) (Value, error) { return e.vals[i], nil }, c.Type, true
			}
		}
	}
	return nil, nil, false
}

// sourceAlias is the name a column may be qualified with.
func (s *scope) qualifies(name string) bool {
	switch src := s.src.(type) {
	case *tableSource:
		return strings.EqualFold(name, src.alias) || src.alias == "" && name == src.name
	case *derivedSource:
		return src.alias != "" && strings.EqualFold(name, src.alias)
	}
	return false
}

func constFn(v Value) evalFn { return func(*rowEnv) (Value, error) { return v, nil } }

func invalidf(format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}

func intLit(l *ast.IntLiteral) (int64, error) {
	v := l.Value
	neg := strings.HasPrefix(v, "-")
	v = strings.TrimLeft(v, "+-")
	var n uint64
	var err error
	if l.Base == 16 || strings.HasPrefix(strings.ToLower(v), "0x") {
		n, err = strconv.ParseUint(strings.TrimPrefix(strings.ToLower(v), "0x"), 16, 64)
	} else {
		n, err = strconv.ParseUint(v, 10, 64)
	}
	if err != nil {
		return 0, err
	}
	if neg {
		if n > 1<<63 {
			return 0, strconv.ErrRange
		}
		return -int64(n), nil
	}
	if n > math.MaxInt64 {
		return 0, strconv.ErrRange
	}
	return int64(n), nil
}

// compile turns an expression into a function of the row, with its type.
func (p *planner) compile(x ast.Expr, sc *scope) (evalFn, *Type, error) {
	if sc.grouped {
		text := x.SQL()
		for i, g := range sc.groupText {
			if g == text {
				i := i
				return func(e *rowEnv) (Value, error) { return e.gkeys[i], nil }, sc.groupTypes[i], nil
			}
		}
		switch c := x.(type) {
		case *ast.CountStarExpr:
			return p.aggregate(c, "COUNT", nil, false, sc)
		case *ast.CallExpr:
			name := strings.ToUpper(funcName(c.Func))
			if _, ok := aggregates[name]; ok {
				return p.aggregateCall(c, name, sc)
			}
		case *ast.Ident:
			if _, _, ok := sc.inner.column(c.Name); ok {
				return nil, nil, p.errf(c, "column %s is neither grouped nor aggregated", c.Name)
			}
		case *ast.Path:
			return nil, nil, p.errf(c, "column %s is neither grouped nor aggregated", c.SQL())
		}
	} else {
		switch c := x.(type) {
		case *ast.CountStarExpr:
			return nil, nil, p.errf(c, "aggregate COUNT(*) is not allowed here")
		case *ast.CallExpr:
			if _, ok := aggregates[strings.ToUpper(funcName(c.Func))]; ok {
				return nil, nil, p.errf(c, "aggregate %s is not allowed here", funcName(c.Func))
			}
		}
	}
	switch e := x.(type) {
	case *ast.NullLiteral:
		return constFn(nil), TNull, nil
	case *ast.BoolLiteral:
		return constFn(e.Value), TBool, nil
	case *ast.IntLiteral:
		n, err := intLit(e)
		if err != nil {
			return nil, nil, p.errf(e, "integer literal %s is out of range", e.Value)
		}
		return constFn(n), TInt64, nil
	case *ast.FloatLiteral:
		f, err := strconv.ParseFloat(e.Value, 64)
		if err != nil {
			return nil, nil, p.errf(e, "bad floating point literal %s", e.Value)
		}
		return constFn(f), TFloat64, nil
	case *ast.StringLiteral:
		return constFn(e.Value), TString, nil
	case *ast.BytesLiteral:
		return constFn(e.Value), TBytes, nil
	case *ast.DateLiteral:
		d, err := parseDate(e.Value.Value)
		if err != nil {
			return nil, nil, p.errf(e, "%v", err)
		}
		return constFn(d), TDate, nil
	case *ast.TimestampLiteral:
		t, err := parseTimestamp(e.Value.Value)
		if err != nil {
			return nil, nil, p.errf(e, "%v", err)
		}
		return constFn(t), TTimestamp, nil
	case *ast.Param:
		t, ok := p.params[e.Name]
		if !ok {
			return nil, nil, p.errf(e, "query parameter @%s has no declared type", e.Name)
		}
		name := e.Name
		return func(r *rowEnv) (Value, error) { return r.x.params[name], nil }, t, nil
	case *ast.ParenExpr:
		return p.compile(e.Expr, sc)
	case *ast.Ident:
		f, t, ok := sc.column(e.Name)
		if !ok {
			return nil, nil, p.errf(e, "unrecognized name: %s", e.Name)
		}
		return f, t, nil
	case *ast.Path:
		// alias.column, or column.field...
		ids := e.Idents
		if len(ids) > 1 && sc.qualifies(ids[0].Name) {
			if _, _, ok := sc.column(ids[1].Name); ok {
				ids = ids[1:]
			}
		}
		f, t, ok := sc.column(ids[0].Name)
		if !ok {
			return nil, nil, p.errf(e, "unrecognized name: %s", e.SQL())
		}
		for _, id := range ids[1:] {
			var err error
			if f, t, err = p.field(id, f, t); err != nil {
				return nil, nil, err
			}
		}
		return f, t, nil
	case *ast.SelectorExpr:
		f, t, err := p.compile(e.Expr, sc)
		if err != nil {
			return nil, nil, err
		}
		return p.field(e.Ident, f, t)
	case *ast.IndexExpr:
		return p.index(e, sc)
	case *ast.ArrayLiteral:
		return p.arrayLit(e, sc)
	case *ast.TypelessStructLiteral:
		var fs []evalFn
		st := &Type{Kind: KindStruct}
		for _, a := range e.Values {
			var ex ast.Expr
			name := ""
			switch v := a.(type) {
			case *ast.Alias:
				ex, name = v.Expr, v.As.Alias.Name
			case *ast.ExprArg:
				ex = v.Expr
				if id, ok := ex.(*ast.Ident); ok {
					name = id.Name
				}
			}
			f, t, err := p.compile(ex, sc)
			if err != nil {
				return nil, nil, err
			}
			fs = append(fs, f)
			st.Fields = append(st.Fields, Field{name, metaType(t)})
		}
		return structFn(fs), st, nil
	case *ast.TupleStructLiteral:
		var fs []evalFn
		st := &Type{Kind: KindStruct}
		for _, v := range e.Values {
			f, t, err := p.compile(v, sc)
			if err != nil {
				return nil, nil, err
			}
			fs = append(fs, f)
			st.Fields = append(st.Fields, Field{"", metaType(t)})
		}
		return structFn(fs), st, nil
	case *ast.TypedStructLiteral:
		if len(e.Fields) != len(e.Values) {
			return nil, nil, p.errf(e, "STRUCT has %d fields and %d values", len(e.Fields), len(e.Values))
		}
		var fs []evalFn
		st := &Type{Kind: KindStruct}
		for i, v := range e.Values {
			ft, err := p.astType(e.Fields[i].Type)
			if err != nil {
				return nil, nil, err
			}
			f, t, err := p.compile(v, sc)
			if err != nil {
				return nil, nil, err
			}
			if f, err = p.coerce(v, f, t, ft); err != nil {
				return nil, nil, err
			}
			name := ""
			if e.Fields[i].Ident != nil {
				name = e.Fields[i].Ident.Name
			}
			fs = append(fs, f)
			st.Fields = append(st.Fields, Field{name, ft})
		}
		return structFn(fs), st, nil
	case *ast.UnaryExpr:
		return p.unary(e, sc)
	case *ast.BinaryExpr:
		return p.binary(e, sc)
	case *ast.IsNullExpr:
		f, _, err := p.compile(e.Left, sc)
		if err != nil {
			return nil, nil, err
		}
		not := e.Not
		return func(r *rowEnv) (Value, error) {
			v, err := f(r)
			if err != nil {
				return nil, err
			}
			return (v == nil) != not, nil
		}, TBool, nil
	case *ast.IsBoolExpr:
		f, t, err := p.compile(e.Left, sc)
		if err != nil {
			return nil, nil, err
		}
		if t.Kind != KindBool && t.Kind != KindNull {
			return nil, nil, p.errf(e, "IS TRUE/FALSE needs a BOOL, not %s", t)
		}
		not, want := e.Not, e.Right
		return func(r *rowEnv) (Value, error) {
			v, err := f(r)
			if err != nil {
				return nil, err
			}
			return (v == want) != not, nil
		}, TBool, nil
	case *ast.BetweenExpr:
		lf, lt, err := p.compile(e.Left, sc)
		if err != nil {
			return nil, nil, err
		}
		af, at, err := p.compile(e.RightStart, sc)
		if err != nil {
			return nil, nil, err
		}
		bf, bt, err := p.compile(e.RightEnd, sc)
		if err != nil {
			return nil, nil, err
		}
		if !comparable(lt, at) || !comparable(lt, bt) {
			return nil, nil, p.errf(e, "BETWEEN cannot compare %s with %s and %s", lt, at, bt)
		}
		not := e.Not
		return func(r *rowEnv) (Value, error) {
			v, err := lf(r)
			if err != nil {
				return nil, err
			}
			a, err := af(r)
			if err != nil {
				return nil, err
			}
			b, err := bf(r)
			if err != nil {
				return nil, err
			}
			if v == nil || a == nil || b == nil {
				return nil, nil
			}
			return (compare(v, a) >= 0 && compare(v, b) <= 0) != not, nil
		}, TBool, nil
	case *ast.InExpr:
		return p.in(e, sc)
	case *ast.CastExpr:
		f, t, err := p.compile(e.Expr, sc)
		if err != nil {
			return nil, nil, err
		}
		to, err := p.astType(e.Type)
		if err != nil {
			return nil, nil, err
		}
		if !castable(t, to) {
			return nil, nil, p.errf(e, "cannot cast %s to %s", t, to)
		}
		safe := e.Safe
		return func(r *rowEnv) (Value, error) {
			v, err := f(r)
			if err != nil {
				return nil, err
			}
			out, err := castValue(v, t, to)
			if err != nil && safe {
				return nil, nil
			}
			return out, err
		}, to, nil
	case *ast.IfExpr:
		return p.conditional(e, []ast.Expr{e.Expr}, []ast.Expr{e.TrueResult}, e.ElseResult, nil, sc)
	case *ast.CaseExpr:
		var conds, thens []ast.Expr
		for _, w := range e.Whens {
			conds = append(conds, w.Cond)
			thens = append(thens, w.Then)
		}
		var els ast.Expr
		if e.Else != nil {
			els = e.Else.Expr
		}
		return p.conditional(e, conds, thens, els, e.Expr, sc)
	case *ast.CallExpr:
		return p.call(e, sc)
	case *ast.ExtractExpr:
		return p.extract(e, sc)
	case *ast.CountStarExpr:
		return nil, nil, p.errf(e, "COUNT(*) is not allowed here")
	case *ast.ScalarSubQuery, *ast.ArraySubQuery, *ast.ExistsSubQuery:
		return nil, nil, p.errf(x, "subqueries are not supported")
	}
	return nil, nil, p.errf(x, "unsupported expression %s", x.SQL())
}

func structFn(fs []evalFn) evalFn {
	return func(r *rowEnv) (Value, error) {
		out := make(Struct, len(fs))
		for i, f := range fs {
			v, err := f(r)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
}

func (p *planner) field(id *ast.Ident, f evalFn, t *Type) (evalFn, *Type, error) {
	if t.Kind != KindStruct {
		return nil, nil, p.errf(id, "cannot access field %s of a %s", id.Name, t)
	}
	for i, fd := range t.Fields {
		if strings.EqualFold(fd.Name, id.Name) {
			i := i
			return func(r *rowEnv) (Value, error) {
				v, err := f(r)
				if err != nil || v == nil {
					return nil, err
				}
				return v.(Struct)[i], nil
			}, fd.Type, nil
		}
	}
	return nil, nil, p.errf(id, "field %s not found in %s", id.Name, t)
}

func (p *planner) index(e *ast.IndexExpr, sc *scope) (evalFn, *Type, error) {
	// fam['q'] on a table reads the column without building the family.
	if id, ok := e.Expr.(*ast.Ident); ok && !sc.grouped {
		if ts, ok := sc.src.(*tableSource); ok && !strings.EqualFold(id.Name, "_key") && ts.has(id.Name) {
			if q, ok := constKey(e.Index); ok {
				c, _ := ts.column(id.Name)
				fam, hist := c.Name, ts.history
				return func(r *rowEnv) (Value, error) { return columnValue(r.row, fam, q, hist), nil }, c.Type.Val, nil
			}
		}
	}
	f, t, err := p.compile(e.Expr, sc)
	if err != nil {
		return nil, nil, err
	}
	var ix ast.Expr
	mode := ""
	switch s := e.Index.(type) {
	case *ast.ExprArg:
		ix = s.Expr
	case *ast.SubscriptSpecifierKeyword:
		ix, mode = s.Expr, strings.ToUpper(string(s.Keyword))
	default:
		return nil, nil, p.errf(e, "unsupported subscript")
	}
	kf, kt, err := p.compile(ix, sc)
	if err != nil {
		return nil, nil, err
	}
	switch t.Kind {
	case KindMap:
		if mode != "" {
			return nil, nil, p.errf(e, "a MAP takes a key subscript, not %s", mode)
		}
		if !comparable(t.Key, kt) {
			return nil, nil, p.errf(ix, "MAP key is %s, not %s", t.Key, kt)
		}
		return func(r *rowEnv) (Value, error) {
			m, err := f(r)
			if err != nil || m == nil {
				return nil, err
			}
			k, err := kf(r)
			if err != nil || k == nil {
				return nil, err
			}
			return m.(*Map).Get(k), nil
		}, t.Val, nil
	case KindArray:
		if kt.Kind != KindInt64 {
			return nil, nil, p.errf(ix, "array subscript must be INT64, not %s", kt)
		}
		base, safe := int64(0), strings.HasPrefix(mode, "SAFE_")
		if strings.HasSuffix(mode, "ORDINAL") {
			base = 1
		}
		return func(r *rowEnv) (Value, error) {
			a, err := f(r)
			if err != nil || a == nil {
				return nil, err
			}
			k, err := kf(r)
			if err != nil || k == nil {
				return nil, err
			}
			i := k.(int64) - base
			arr := a.(Array)
			if i < 0 || i >= int64(len(arr)) {
				if safe {
					return nil, nil
				}
				return nil, invalidf("array index %d is out of bounds", k)
			}
			return arr[i], nil
		}, t.Elem, nil
	}
	return nil, nil, p.errf(e, "cannot subscript a %s", t)
}

// constKey is a literal map key: a STRING or BYTES literal.
func constKey(s ast.SubscriptSpecifier) ([]byte, bool) {
	a, ok := s.(*ast.ExprArg)
	if !ok {
		return nil, false
	}
	switch l := a.Expr.(type) {
	case *ast.StringLiteral:
		return []byte(l.Value), true
	case *ast.BytesLiteral:
		return l.Value, true
	}
	return nil, false
}

func (p *planner) arrayLit(e *ast.ArrayLiteral, sc *scope) (evalFn, *Type, error) {
	var et *Type
	if e.Type != nil {
		var err error
		if et, err = p.astType(e.Type); err != nil {
			return nil, nil, err
		}
	}
	var fs []evalFn
	var ts []*Type
	for _, v := range e.Values {
		f, t, err := p.compile(v, sc)
		if err != nil {
			return nil, nil, err
		}
		fs = append(fs, f)
		ts = append(ts, t)
	}
	if et == nil {
		var err error
		if et, err = p.unify(e, ts); err != nil {
			return nil, nil, err
		}
		et = metaType(et)
	}
	for i := range fs {
		var err error
		if fs[i], err = p.coerce(e.Values[i], fs[i], ts[i], et); err != nil {
			return nil, nil, err
		}
	}
	if et.Kind == KindArray {
		return nil, nil, p.errf(e, "arrays of arrays are not supported")
	}
	return func(r *rowEnv) (Value, error) {
		out := make(Array, len(fs))
		for i, f := range fs {
			v, err := f(r)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}, ArrayOf(et), nil
}

// unify finds the common supertype of ts (NULL fits any; INT64 widens to
// FLOAT64; FLOAT32 to FLOAT64).
func (p *planner) unify(at ast.Node, ts []*Type) (*Type, error) {
	out := TNull
	for _, t := range ts {
		switch {
		case t.Kind == KindNull:
		case out.Kind == KindNull:
			out = t
		case out.Equal(t):
		case out.numeric() && t.numeric():
			out = TFloat64
		case out.Kind == KindStruct && t.Kind == KindStruct && len(out.Fields) == len(t.Fields):
		default:
			return nil, p.errf(at, "no common supertype for %s and %s", out, t)
		}
	}
	return out, nil
}

// coerce converts values of type from to type to (NULL, numeric widening,
// STRING literal to BYTES).
func (p *planner) coerce(at ast.Node, f evalFn, from, to *Type) (evalFn, error) {
	if from.Equal(to) || from.Kind == KindNull {
		return f, nil
	}
	if from.numeric() && to.numeric() || from.Kind == KindString && to.Kind == KindBytes ||
		from.Kind == KindStruct && to.Kind == KindStruct && len(from.Fields) == len(to.Fields) {
		return func(r *rowEnv) (Value, error) {
			v, err := f(r)
			if err != nil || v == nil {
				return nil, err
			}
			return castValue(v, from, to)
		}, nil
	}
	return nil, p.errf(at, "expected %s, got %s", to, from)
}

// comparable reports whether values of a and b can be compared.
func comparable(a, b *Type) bool {
	switch {
	case a.Kind == KindNull || b.Kind == KindNull:
		return true
	case a.numeric() && b.numeric():
		return true
	case (a.Kind == KindBytes || a.Kind == KindString) && (b.Kind == KindBytes || b.Kind == KindString):
		return true
	case a.Kind == KindMap || b.Kind == KindMap:
		return false
	case a.Kind == KindArray && b.Kind == KindArray:
		return comparable(a.Elem, b.Elem)
	case a.Kind == KindStruct && b.Kind == KindStruct:
		if len(a.Fields) != len(b.Fields) {
			return false
		}
		for i := range a.Fields {
			if !comparable(a.Fields[i].Type, b.Fields[i].Type) {
				return false
			}
		}
		return true
	}
	return a.Kind == b.Kind
}

func (p *planner) unary(e *ast.UnaryExpr, sc *scope) (evalFn, *Type, error) {
	f, t, err := p.compile(e.Expr, sc)
	if err != nil {
		return nil, nil, err
	}
	switch e.Op {
	case ast.OpNot:
		if t.Kind != KindBool && t.Kind != KindNull {
			return nil, nil, p.errf(e, "NOT needs a BOOL, not %s", t)
		}
		return func(r *rowEnv) (Value, error) {
			v, err := f(r)
			if err != nil || v == nil {
				return nil, err
			}
			return !v.(bool), nil
		}, TBool, nil
	case ast.OpPlus:
		if !t.numeric() && t.Kind != KindNull {
			return nil, nil, p.errf(e, "unary + needs a number, not %s", t)
		}
		return f, t, nil
	case ast.OpMinus:
		if !t.numeric() && t.Kind != KindNull {
			return nil, nil, p.errf(e, "unary - needs a number, not %s", t)
		}
		return func(r *rowEnv) (Value, error) {
			v, err := f(r)
			if err != nil || v == nil {
				return nil, err
			}
			switch x := v.(type) {
			case int64:
				if x == math.MinInt64 {
					return nil, invalidf("int64 overflow: -(%d)", x)
				}
				return -x, nil
			case float64:
				return -x, nil
			case float32:
				return -x, nil
			}
			return nil, nil
		}, t, nil
	case ast.OpBitNot:
		if t.Kind != KindInt64 && t.Kind != KindNull {
			return nil, nil, p.errf(e, "~ needs an INT64, not %s", t)
		}
		return func(r *rowEnv) (Value, error) {
			v, err := f(r)
			if err != nil || v == nil {
				return nil, err
			}
			return ^v.(int64), nil
		}, TInt64, nil
	}
	return nil, nil, p.errf(e, "unsupported operator %s", e.Op)
}

func (p *planner) binary(e *ast.BinaryExpr, sc *scope) (evalFn, *Type, error) {
	lf, lt, err := p.compile(e.Left, sc)
	if err != nil {
		return nil, nil, err
	}
	rf, rt, err := p.compile(e.Right, sc)
	if err != nil {
		return nil, nil, err
	}
	switch e.Op {
	case ast.OpAnd, ast.OpOr:
		for _, t := range []*Type{lt, rt} {
			if t.Kind != KindBool && t.Kind != KindNull {
				return nil, nil, p.errf(e, "%s needs BOOL operands, not %s", e.Op, t)
			}
		}
		and := e.Op == ast.OpAnd
		return func(r *rowEnv) (Value, error) {
			a, err := lf(r)
			if err != nil {
				return nil, err
			}
			if a != nil && a.(bool) != and {
				return !and, nil
			}
			b, err := rf(r)
			if err != nil {
				return nil, err
			}
			if b != nil && b.(bool) != and {
				return !and, nil
			}
			if a == nil || b == nil {
				return nil, nil
			}
			return and, nil
		}, TBool, nil
	case ast.OpEqual, ast.OpNotEqual, ast.OpLess, ast.OpGreater, ast.OpLessEqual, ast.OpGreaterEqual:
		if !comparable(lt, rt) {
			return nil, nil, p.errf(e, "cannot compare %s with %s", lt, rt)
		}
		op := e.Op
		return func(r *rowEnv) (Value, error) {
			a, err := lf(r)
			if err != nil {
				return nil, err
			}
			b, err := rf(r)
			if err != nil {
				return nil, err
			}
			if a == nil || b == nil {
				return nil, nil
			}
			if isNaN(a) || isNaN(b) {
				return op == ast.OpNotEqual, nil
			}
			c := compare(a, b)
			switch op {
			case ast.OpEqual:
				return c == 0, nil
			case ast.OpNotEqual:
				return c != 0, nil
			case ast.OpLess:
				return c < 0, nil
			case ast.OpGreater:
				return c > 0, nil
			case ast.OpLessEqual:
				return c <= 0, nil
			}
			return c >= 0, nil
		}, TBool, nil
	case ast.OpLike, ast.OpNotLike:
		if !(lt.Kind == KindString || lt.Kind == KindBytes || lt.Kind == KindNull) || !(rt.Kind == KindString || rt.Kind == KindBytes || rt.Kind == KindNull) {
			return nil, nil, p.errf(e, "LIKE needs STRING or BYTES operands, not %s and %s", lt, rt)
		}
		not := e.Op == ast.OpNotLike
		var cached string
		var re *likeMatcher
		return func(r *rowEnv) (Value, error) {
			a, err := lf(r)
			if err != nil {
				return nil, err
			}
			b, err := rf(r)
			if err != nil {
				return nil, err
			}
			if a == nil || b == nil {
				return nil, nil
			}
			pat := string(asBytes(b))
			if re == nil || pat != cached {
				if re, err = newLike(pat); err != nil {
					return nil, err
				}
				cached = pat
			}
			return re.match(asBytes(a)) != not, nil
		}, TBool, nil
	case ast.OpConcat:
		t := lt
		if t.Kind == KindNull {
			t = rt
		}
		if t.Kind != KindString && t.Kind != KindBytes && t.Kind != KindArray {
			return nil, nil, p.errf(e, "|| needs STRING, BYTES or ARRAY operands, not %s", t)
		}
		return func(r *rowEnv) (Value, error) {
			a, err := lf(r)
			if err != nil {
				return nil, err
			}
			b, err := rf(r)
			if err != nil {
				return nil, err
			}
			if a == nil || b == nil {
				return nil, nil
			}
			switch x := a.(type) {
			case string:
				return x + asString(b), nil
			case []byte:
				return append(append([]byte{}, x...), asBytes(b)...), nil
			case Array:
				return append(append(Array{}, x...), b.(Array)...), nil
			}
			return nil, nil
		}, t, nil
	case ast.OpAdd, ast.OpSub, ast.OpMul, ast.OpDiv:
		return p.arith(e, string(e.Op), lf, lt, rf, rt)
	case ast.OpBitAnd, ast.OpBitOr, ast.OpBitXor, ast.OpBitLeftShift, ast.OpBitRightShift:
		if lt.Kind != KindInt64 && lt.Kind != KindNull || rt.Kind != KindInt64 && rt.Kind != KindNull {
			return nil, nil, p.errf(e, "%s needs INT64 operands, not %s and %s", e.Op, lt, rt)
		}
		op := e.Op
		return func(r *rowEnv) (Value, error) {
			a, err := lf(r)
			if err != nil {
				return nil, err
			}
			b, err := rf(r)
			if err != nil || a == nil || b == nil {
				return nil, err
			}
			x, y := a.(int64), b.(int64)
			switch op {
			case ast.OpBitAnd:
				return x & y, nil
			case ast.OpBitOr:
				return x | y, nil
			case ast.OpBitXor:
				return x ^ y, nil
			case ast.OpBitLeftShift:
				if y < 0 {
					return nil, invalidf("negative shift")
				}
				if y >= 64 {
					return int64(0), nil
				}
				return x << uint(y), nil
			}
			if y < 0 {
				return nil, invalidf("negative shift")
			}
			if y >= 64 {
				return int64(0), nil
			}
			return int64(uint64(x) >> uint(y)), nil
		}, TInt64, nil
	}
	return nil, nil, p.errf(e, "unsupported operator %s", e.Op)
}

func isNaN(v Value) bool {
	switch x := v.(type) {
	case float64:
		return math.IsNaN(x)
	case float32:
		return math.IsNaN(float64(x))
	}
	return false
}

// arith compiles + - * /. INT64 with INT64 stays INT64 (overflow is an
// error) except for /, which gives FLOAT64; any float gives FLOAT64.
// TIMESTAMP and DATE take no arithmetic here (see TIMESTAMP_ADD).
func (p *planner) arith(at ast.Node, op string, lf evalFn, lt *Type, rf evalFn, rt *Type) (evalFn, *Type, error) {
	for _, t := range []*Type{lt, rt} {
		if !t.numeric() && t.Kind != KindNull {
			return nil, nil, p.errf(at, "%s needs numbers, not %s and %s", op, lt, rt)
		}
	}
	out := TFloat64
	if (lt.Kind == KindInt64 || lt.Kind == KindNull) && (rt.Kind == KindInt64 || rt.Kind == KindNull) && op != "/" {
		out = TInt64
	}
	return func(r *rowEnv) (Value, error) {
		a, err := lf(r)
		if err != nil {
			return nil, err
		}
		b, err := rf(r)
		if err != nil || a == nil || b == nil {
			return nil, err
		}
		return arithValues(op, a, b, out.Kind == KindInt64)
	}, out, nil
}

func arithValues(op string, a, b Value, ints bool) (Value, error) {
	if ints {
		x, y := a.(int64), b.(int64)
		switch op {
		case "+":
			s := x + y
			if (s > x) != (y > 0) {
				return nil, invalidf("int64 overflow: %d + %d", x, y)
			}
			return s, nil
		case "-":
			s := x - y
			if (s < x) != (y > 0) {
				return nil, invalidf("int64 overflow: %d - %d", x, y)
			}
			return s, nil
		case "*":
			if x == 0 || y == 0 {
				return int64(0), nil
			}
			s := x * y
			if s/y != x || x == -1 && y == math.MinInt64 || y == -1 && x == math.MinInt64 {
				return nil, invalidf("int64 overflow: %d * %d", x, y)
			}
			return s, nil
		}
	}
	x, _ := toFloat(a)
	y, _ := toFloat(b)
	switch op {
	case "+":
		return x + y, nil
	case "-":
		return x - y, nil
	case "*":
		return x * y, nil
	}
	if y == 0 {
		return nil, invalidf("division by zero: %v / %v", x, y)
	}
	return x / y, nil
}

func (p *planner) in(e *ast.InExpr, sc *scope) (evalFn, *Type, error) {
	lf, lt, err := p.compile(e.Left, sc)
	if err != nil {
		return nil, nil, err
	}
	var list []evalFn
	var arr evalFn
	switch c := e.Right.(type) {
	case *ast.ValuesInCondition:
		for _, v := range c.Exprs {
			f, t, err := p.compile(v, sc)
			if err != nil {
				return nil, nil, err
			}
			if !comparable(lt, t) {
				return nil, nil, p.errf(v, "IN cannot compare %s with %s", lt, t)
			}
			list = append(list, f)
		}
	case *ast.UnnestInCondition:
		f, t, err := p.compile(c.Expr, sc)
		if err != nil {
			return nil, nil, err
		}
		if t.Kind != KindArray || !comparable(lt, t.Elem) {
			return nil, nil, p.errf(c, "IN UNNEST needs an ARRAY of %s, not %s", lt, t)
		}
		arr = f
	default:
		return nil, nil, p.errf(e, "IN with a subquery is not supported")
	}
	not := e.Not
	return func(r *rowEnv) (Value, error) {
		v, err := lf(r)
		if err != nil || v == nil {
			return nil, err
		}
		sawNull := false
		check := func(w Value) bool {
			if w == nil {
				sawNull = true
				return false
			}
			return compare(v, w) == 0 && !isNaN(v)
		}
		if arr != nil {
			a, err := arr(r)
			if err != nil {
				return nil, err
			}
			if a != nil {
				for _, w := range a.(Array) {
					if check(w) {
						return !not, nil
					}
				}
			}
		}
		for _, f := range list {
			w, err := f(r)
			if err != nil {
				return nil, err
			}
			if check(w) {
				return !not, nil
			}
		}
		if sawNull {
			return nil, nil
		}
		return not, nil
	}, TBool, nil
}

// conditional compiles IF and CASE: conds are BOOL tests (or, with a CASE
// operand, values compared to it).
func (p *planner) conditional(at ast.Node, conds, thens []ast.Expr, els ast.Expr, operand ast.Expr, sc *scope) (evalFn, *Type, error) {
	var of evalFn
	var ot *Type
	if operand != nil {
		var err error
		if of, ot, err = p.compile(operand, sc); err != nil {
			return nil, nil, err
		}
	}
	var cfs, tfs []evalFn
	var ts []*Type
	for i := range conds {
		cf, ct, err := p.compile(conds[i], sc)
		if err != nil {
			return nil, nil, err
		}
		if operand != nil {
			if !comparable(ot, ct) {
				return nil, nil, p.errf(conds[i], "CASE cannot compare %s with %s", ot, ct)
			}
		} else if ct.Kind != KindBool && ct.Kind != KindNull {
			return nil, nil, p.errf(conds[i], "condition must be BOOL, not %s", ct)
		}
		tf, tt, err := p.compile(thens[i], sc)
		if err != nil {
			return nil, nil, err
		}
		cfs, tfs, ts = append(cfs, cf), append(tfs, tf), append(ts, tt)
	}
	ef := constFn(nil)
	if els != nil {
		f, t, err := p.compile(els, sc)
		if err != nil {
			return nil, nil, err
		}
		ef = f
		ts = append(ts, t)
	}
	out, err := p.unify(at, ts)
	if err != nil {
		return nil, nil, err
	}
	for i := range tfs {
		if tfs[i], err = p.coerce(thens[i], tfs[i], ts[i], out); err != nil {
			return nil, nil, err
		}
	}
	if els != nil {
		if ef, err = p.coerce(els, ef, ts[len(ts)-1], out); err != nil {
			return nil, nil, err
		}
	}
	return func(r *rowEnv) (Value, error) {
		var ov Value
		if of != nil {
			var err error
			if ov, err = of(r); err != nil {
				return nil, err
			}
		}
		for i, cf := range cfs {
			c, err := cf(r)
			if err != nil {
				return nil, err
			}
			hit := false
			if of != nil {
				hit = ov != nil && c != nil && compare(ov, c) == 0
			} else {
				hit = c == true
			}
			if hit {
				return tfs[i](r)
			}
		}
		return ef(r)
	}, out, nil
}

// astType converts a type name.
func (p *planner) astType(t ast.Type) (*Type, error) {
	switch x := t.(type) {
	case *ast.SimpleType:
		switch x.Name {
		case ast.BoolTypeName:
			return TBool, nil
		case ast.Int64TypeName:
			return TInt64, nil
		case ast.Float32TypeName:
			return TFloat32, nil
		case ast.Float64TypeName:
			return TFloat64, nil
		case ast.StringTypeName:
			return TString, nil
		case ast.BytesTypeName:
			return TBytes, nil
		case ast.DateTypeName:
			return TDate, nil
		case ast.TimestampTypeName:
			return TTimestamp, nil
		}
		return nil, p.errf(x, "type %s is not supported", x.Name)
	case *ast.ArrayType:
		et, err := p.astType(x.Item)
		if err != nil {
			return nil, err
		}
		return ArrayOf(et), nil
	case *ast.StructType:
		st := &Type{Kind: KindStruct}
		for _, f := range x.Fields {
			ft, err := p.astType(f.Type)
			if err != nil {
				return nil, err
			}
			name := ""
			if f.Ident != nil {
				name = f.Ident.Name
			}
			st.Fields = append(st.Fields, Field{name, ft})
		}
		return st, nil
	case *ast.NamedType:
		return nil, p.errf(x, "type %s is not supported", x.SQL())
	}
	return nil, p.errf(t, "unsupported type")
}

func asBytes(v Value) []byte {
	switch x := v.(type) {
	case []byte:
		return x
	case string:
		return []byte(x)
	}
	return nil
}

func asString(v Value) string {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case string:
		return x
	}
	return ""
}

func parseDate(s string) (Date, error) {
	t, err := time.Parse("2006-1-2", strings.TrimSpace(s))
	if err != nil {
		return Date{}, invalidf("invalid date %q", s)
	}
	return dateOf(t), nil
}

// parseTimestamp reads the canonical GoogleSQL timestamp forms; no zone
// means UTC.
func parseTimestamp(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{
		time.RFC3339Nano, "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999 Z07:00",
		"2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "2006-01-02 15:04:05.999999999-07",
		"2006-01-02T15:04:05.999999999-07", "2006-01-02",
	} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC().Truncate(time.Microsecond), nil
		}
	}
	if i := strings.LastIndexByte(s, ' '); i > 0 {
		if loc, err := time.LoadLocation(s[i+1:]); err == nil {
			for _, layout := range []string{"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", "2006-01-02"} {
				if t, err := time.ParseInLocation(layout, s[:i], loc); err == nil {
					return t.UTC().Truncate(time.Microsecond), nil
				}
			}
		}
	}
	return time.Time{}, invalidf("invalid timestamp %q", s)
}
