package sqlquery

import (
	"bytes"
	"slices"
	"strings"

	"github.com/cloudspannerecosystem/memefish/ast"
)

// keyRange is [lo, hi) in row-key order; hi nil means unbounded.
type keyRange struct{ lo, hi []byte }

// keyPred is a WHERE conjunct on _key: given the parameters, the key
// ranges it admits.
type keyPred func(e *rowEnv) ([]keyRange, error)

func succ(k []byte) []byte { return append(bytes.Clone(k), 0) }

// prefixEnd is the first key after every key with prefix p (nil: none).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// keyPredicates turns the WHERE clause's conditions on _key into row
// ranges: =, IN, <, <=, >, >=, BETWEEN, STARTS_WITH and LIKE 'prefix%'
// with a constant (literal or parameter) on the other side, combined
// through AND (intersection; a side without key terms does not narrow)
// and OR (union, when both sides narrow). The whole clause is still
// evaluated on every row read; the ranges only narrow what is read.
func (p *planner) keyPredicates(where ast.Expr, sc *scope) []keyPred {
	if kp := p.keyTerm(where, sc); kp != nil {
		return []keyPred{kp}
	}
	return nil
}

func (p *planner) keyTerm(x ast.Expr, sc *scope) keyPred {
	if pe, ok := x.(*ast.ParenExpr); ok {
		return p.keyTerm(pe.Expr, sc)
	}
	b, ok := x.(*ast.BinaryExpr)
	if !ok || b.Op != ast.OpAnd && b.Op != ast.OpOr {
		return p.keyPred(x, sc)
	}
	l, r := p.keyTerm(b.Left, sc), p.keyTerm(b.Right, sc)
	if b.Op == ast.OpAnd {
		switch {
		case l == nil:
			return r
		case r == nil:
			return l
		}
		return func(e *rowEnv) ([]keyRange, error) {
			a, err := l(e)
			if err != nil {
				return nil, err
			}
			c, err := r(e)
			if err != nil {
				return nil, err
			}
			return intersect(normalize(a), normalize(c)), nil
		}
	}
	if l == nil || r == nil {
		return nil
	}
	return func(e *rowEnv) ([]keyRange, error) {
		a, err := l(e)
		if err != nil {
			return nil, err
		}
		c, err := r(e)
		if err != nil {
			return nil, err
		}
		return normalize(append(append([]keyRange{}, a...), c...)), nil
	}
}

func isKey(x ast.Expr) bool {
	id, ok := x.(*ast.Ident)
	return ok && strings.EqualFold(id.Name, "_key")
}

// constant compiles x if it is a literal or parameter of STRING or BYTES.
func (p *planner) constant(x ast.Expr) evalFn {
	switch x.(type) {
	case *ast.StringLiteral, *ast.BytesLiteral, *ast.Param:
	default:
		return nil
	}
	f, t, err := p.compile(x, &scope{p: p, src: oneRow{}})
	if err != nil || t.Kind != KindString && t.Kind != KindBytes {
		return nil
	}
	return f
}

func (p *planner) keyPred(x ast.Expr, sc *scope) keyPred {
	one := func(f evalFn, mk func(k []byte) []keyRange) keyPred {
		return func(e *rowEnv) ([]keyRange, error) {
			v, err := f(e)
			if err != nil {
				return nil, err
			}
			if v == nil {
				return []keyRange{}, nil
			}
			return mk(asBytes(v)), nil
		}
	}
	switch b := x.(type) {
	case *ast.BinaryExpr:
		l, r, op := b.Left, b.Right, b.Op
		if isKey(r) && !isKey(l) {
			l, r = r, l
			switch op {
			case ast.OpLess:
				op = ast.OpGreater
			case ast.OpGreater:
				op = ast.OpLess
			case ast.OpLessEqual:
				op = ast.OpGreaterEqual
			case ast.OpGreaterEqual:
				op = ast.OpLessEqual
			}
		}
		if !isKey(l) {
			return nil
		}
		if op == ast.OpLike {
			if s, ok := r.(*ast.StringLiteral); ok {
				if pre, ok := likePrefix(s.Value); ok {
					return func(*rowEnv) ([]keyRange, error) {
						return []keyRange{{lo: []byte(pre), hi: prefixEnd([]byte(pre))}}, nil
					}
				}
			}
			return nil
		}
		f := p.constant(r)
		if f == nil {
			return nil
		}
		switch op {
		case ast.OpEqual:
			return one(f, func(k []byte) []keyRange { return []keyRange{{lo: k, hi: succ(k)}} })
		case ast.OpLess:
			return one(f, func(k []byte) []keyRange { return []keyRange{{lo: []byte{}, hi: k}} })
		case ast.OpLessEqual:
			return one(f, func(k []byte) []keyRange { return []keyRange{{lo: []byte{}, hi: succ(k)}} })
		case ast.OpGreater:
			return one(f, func(k []byte) []keyRange { return []keyRange{{lo: succ(k)}} })
		case ast.OpGreaterEqual:
			return one(f, func(k []byte) []keyRange { return []keyRange{{lo: k}} })
		}
	case *ast.BetweenExpr:
		if !isKey(b.Left) || b.Not {
			return nil
		}
		lo, hi := p.constant(b.RightStart), p.constant(b.RightEnd)
		if lo == nil || hi == nil {
			return nil
		}
		return func(e *rowEnv) ([]keyRange, error) {
			a, err := lo(e)
			if err != nil {
				return nil, err
			}
			z, err := hi(e)
			if err != nil {
				return nil, err
			}
			if a == nil || z == nil || bytes.Compare(asBytes(a), asBytes(z)) > 0 {
				return []keyRange{}, nil
			}
			return []keyRange{{lo: asBytes(a), hi: succ(asBytes(z))}}, nil
		}
	case *ast.InExpr:
		vc, ok := b.Right.(*ast.ValuesInCondition)
		if !isKey(b.Left) || b.Not || !ok {
			return nil
		}
		var fs []evalFn
		for _, v := range vc.Exprs {
			f := p.constant(v)
			if f == nil {
				return nil
			}
			fs = append(fs, f)
		}
		return func(e *rowEnv) ([]keyRange, error) {
			var out []keyRange
			for _, f := range fs {
				v, err := f(e)
				if err != nil {
					return nil, err
				}
				if v != nil {
					k := asBytes(v)
					out = append(out, keyRange{lo: k, hi: succ(k)})
				}
			}
			return normalize(out), nil
		}
	case *ast.CallExpr:
		if strings.EqualFold(funcName(b.Func), "STARTS_WITH") && len(b.Args) == 2 {
			a0, _ := p.argExpr(b.Args[0])
			a1, _ := p.argExpr(b.Args[1])
			if a0 == nil || a1 == nil || !isKey(a0) {
				return nil
			}
			f := p.constant(a1)
			if f == nil {
				return nil
			}
			return one(f, func(k []byte) []keyRange { return []keyRange{{lo: k, hi: prefixEnd(k)}} })
		}
	}
	return nil
}

// normalize sorts ranges and merges overlaps.
func normalize(rs []keyRange) []keyRange {
	slices.SortFunc(rs, func(a, b keyRange) int { return bytes.Compare(a.lo, b.lo) })
	out := []keyRange{}
	for _, r := range rs {
		if r.hi != nil && bytes.Compare(r.lo, r.hi) >= 0 {
			continue
		}
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.hi == nil || bytes.Compare(r.lo, last.hi) <= 0 {
				if last.hi != nil && (r.hi == nil || bytes.Compare(r.hi, last.hi) > 0) {
					last.hi = r.hi
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// intersect intersects two normalized range lists (nil: everything).
func intersect(a, b []keyRange) []keyRange {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	out := []keyRange{}
	for _, x := range a {
		for _, y := range b {
			lo := x.lo
			if bytes.Compare(y.lo, lo) > 0 {
				lo = y.lo
			}
			hi := x.hi
			if hi == nil || y.hi != nil && bytes.Compare(y.hi, hi) < 0 {
				hi = y.hi
			}
			if hi == nil || bytes.Compare(lo, hi) < 0 {
				out = append(out, keyRange{lo, hi})
			}
		}
	}
	return normalize(out)
}
