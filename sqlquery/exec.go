package sqlquery

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/ebbtable/ebbtable/table"
)

// errStop ends a scan early (LIMIT reached).
var errStop = errors.New("stop")

// Run executes the plan: fn receives each result row, in order. params
// holds a value (or nil for NULL) for each declared parameter; now is the
// query's CURRENT_TIMESTAMP.
func (p *Plan) Run(ctx context.Context, cat Catalog, params map[string]Value, now time.Time, fn func(row []Value) error) error {
	x := &execCtx{ctx: ctx, cat: cat, params: params, now: now.UTC()}
	return p.root.run(x, nil, fn)
}

func (q *query) run(x *execCtx, outer []keyRange, fn func([]Value) error) error {
	env := &rowEnv{x: x}
	keys := outer
	for _, kp := range q.keyPreds {
		rs, err := kp(env)
		if err != nil {
			return err
		}
		keys = intersect(keys, normalize(rs))
	}
	limit := q.limit
	if q.limitPar != "" {
		v := x.params[q.limitPar]
		if v == nil {
			return invalidf("LIMIT parameter @%s is NULL", q.limitPar)
		}
		if limit = v.(int64); limit < 0 {
			return invalidf("LIMIT must not be negative")
		}
	}
	// A positioned run resumed after a position: the LIMIT counts the
	// rows got before, and rows at or before the position are skipped.
	rs := x.resume
	if rs != nil && rs.q != q {
		rs = nil
	}
	if rs != nil && rs.from != nil && limit > 0 {
		if limit -= int64(rs.from.Done); limit <= 0 {
			return nil
		}
	}
	if limit == 0 {
		return nil
	}
	type sorted struct {
		vals, keys []Value
		tie        []byte
	}
	var buf []sorted
	var emitted int64
	less := func(a, b sorted) int {
		return q.comparePos(a.keys, a.tie, b.keys, b.tie)
	}
	emit := func(e *rowEnv) error {
		vals := make([]Value, len(q.items))
		for i, it := range q.items {
			v, err := it.eval(e)
			if err != nil {
				return err
			}
			vals[i] = v
		}
		// The row's position (position.go): ORDER BY values, then the
		// group's keys, then a tie.
		var ks []Value
		for _, o := range q.order {
			if o.out >= 0 {
				ks = append(ks, vals[o.out])
				continue
			}
			v, err := o.eval(e)
			if err != nil {
				return err
			}
			ks = append(ks, v)
		}
		ks = append(ks, e.gkeys...)
		var tie []byte
		if rs != nil || len(q.order) > 0 {
			tie = tieOf(e, vals)
			if rs != nil && rs.skip(ks, tie) {
				return nil
			}
		}
		if len(q.order) == 0 {
			if x.rowKey != nil {
				if e.row != nil {
					x.rowKey(e.row.Key)
				} else if e.pos != nil {
					x.rowKey(e.pos)
				}
			}
			if rs != nil {
				rs.at.advance(q, ks, tie)
			}
			if err := fn(vals); err != nil {
				return err
			}
			emitted++
			if limit > 0 && emitted >= limit {
				return errStop
			}
			return nil
		}
		buf = append(buf, sorted{vals, ks, bytes.Clone(tie)})
		// ORDER BY with LIMIT keeps only the best rows so far: sort and
		// cut whenever twice the limit has gathered.
		if limit > 0 && int64(len(buf)) >= 2*limit+1024 {
			slices.SortFunc(buf, less)
			clear(buf[limit:])
			buf = buf[:limit]
		}
		return nil
	}
	type group struct {
		keys []Value
		id   string
		accs []*acc
	}
	var groups []*group
	index := map[string]*group{}
	newGroup := func(keys []Value) *group {
		g := &group{keys: keys}
		for _, s := range q.aggs {
			g.accs = append(g.accs, &acc{spec: s})
		}
		return g
	}
	err := q.src.scan(x, keys, func(e *rowEnv) error {
		if err := x.ctx.Err(); err != nil {
			return err
		}
		if q.where != nil {
			v, err := q.where(e)
			if err != nil {
				return err
			}
			if v != true {
				return nil
			}
		}
		if !q.grouped {
			return emit(e)
		}
		gk := make([]Value, len(q.groups))
		var id []byte
		for i, g := range q.groups {
			v, err := g(e)
			if err != nil {
				return err
			}
			gk[i] = v
			id = appendKey(id, v)
		}
		g := index[string(id)]
		if g == nil {
			g = newGroup(gk)
			g.id = string(id)
			index[string(id)] = g
			groups = append(groups, g)
		}
		for _, a := range g.accs {
			if err := a.add(e); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, errStop) {
		return nil
	}
	if err != nil {
		return err
	}
	if q.grouped {
		if len(groups) == 0 && len(q.groups) == 0 {
			groups = append(groups, newGroup(nil))
		}
		if len(q.order) == 0 {
			// Groups come in the order of their keys (their positions).
			slices.SortFunc(groups, func(a, b *group) int {
				for i := range a.keys {
					if c := compare(a.keys[i], b.keys[i]); c != 0 {
						return c
					}
				}
				return strings.Compare(a.id, b.id)
			})
		}
		for _, g := range groups {
			e := &rowEnv{x: x, gkeys: g.keys, pos: []byte(g.id), aggv: make([]Value, len(g.accs))}
			for i, a := range g.accs {
				e.aggv[i] = a.result()
				if a.err != nil {
					return a.err
				}
			}
			if err := emit(e); err != nil {
				if errors.Is(err, errStop) {
					return nil
				}
				return err
			}
		}
	}
	if len(q.order) == 0 {
		return nil
	}
	slices.SortFunc(buf, less)
	for i, r := range buf {
		if limit > 0 && int64(i) >= limit {
			break
		}
		if rs != nil {
			rs.at.advance(q, r.keys, r.tie)
		}
		if err := fn(r.vals); err != nil {
			return err
		}
	}
	return nil
}

// appendKey appends a group key's encoding: a kind tag and the value's text.
func appendKey(b []byte, v Value) []byte {
	s := Format(v)
	switch v.(type) {
	case nil:
		b = append(b, 0)
	case []byte:
		b = append(b, 1)
		s = string(v.([]byte))
	default:
		b = append(b, 2)
	}
	b = append(b, byte(len(s)>>24), byte(len(s)>>16), byte(len(s)>>8), byte(len(s)))
	return append(b, s...)
}

// KeyColumn is the index of the result's _key column when it is the
// table's row key passed through unchanged (so a reader may narrow the
// query to some keys with RunKeys); -1 otherwise.
func (p *Plan) KeyColumn() int {
	q := p.root
	for i, it := range q.items {
		if it.keyPass && q.limit < 0 && q.limitPar == "" && (!q.grouped || len(q.groups) == 1 && q.groupedByKey) {
			return i
		}
	}
	return -1
}

// RunKeys is Run narrowed to the rows whose KeyColumn lies in keys or
// ranges (both empty: every row). Without a KeyColumn it is Run.
func (p *Plan) RunKeys(ctx context.Context, cat Catalog, params map[string]Value, now time.Time, keys [][]byte, ranges []table.RowRange, fn func(row []Value) error) error {
	if p.KeyColumn() < 0 || len(keys) == 0 && len(ranges) == 0 {
		return p.Run(ctx, cat, params, now, fn)
	}
	var rs []keyRange
	for _, k := range keys {
		rs = append(rs, keyRange{lo: k, hi: succ(k)})
	}
	for _, r := range ranges {
		kr := keyRange{lo: r.Start, hi: r.End}
		if kr.lo == nil {
			kr.lo = []byte{}
		}
		if r.StartOpen {
			kr.lo = succ(r.Start)
		}
		if r.EndClosed && r.End != nil {
			kr.hi = succ(r.End)
		}
		rs = append(rs, kr)
	}
	x := &execCtx{ctx: ctx, cat: cat, params: params, now: now.UTC()}
	return p.root.run(x, normalize(rs), fn)
}

// tieOf is the last part of a row's position: the table row key, a kept
// view's or UNPACK's position, a group's key, or else the row's values.
func tieOf(e *rowEnv, vals []Value) []byte {
	switch {
	case e.row != nil:
		return e.row.Key
	case e.pos != nil:
		return e.pos
	}
	return encodeList(nil, vals)
}
