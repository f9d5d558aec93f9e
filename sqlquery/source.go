package sqlquery

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cloudspannerecosystem/memefish/ast"
	"github.com/cloudspannerecosystem/memefish/token"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/table"
)

// execCtx is what one execution shares: parameter values, the time the
// query started, the catalog.
type execCtx struct {
	ctx    context.Context
	cat    Catalog
	params map[string]Value
	now    time.Time
	// rowKey, when set, is told the table row key (or a kept view's
	// position) of each result row of an unordered query just before the
	// row is passed on (RunAfter).
	rowKey func(key []byte)
	// afterSrc, when set, is the kept view whose positions RunAfter
	// reports; after is the position to resume after (nil: the start).
	after    []byte
	afterSrc source
	// resume, when set, is a positioned run's state (position.go).
	resume *resumeState
}

// rowEnv is the row an expression is evaluated on.
type rowEnv struct {
	x *execCtx
	// row is the table row (table sources).
	row *cell.Row
	// vals are the row's column values (derived sources).
	vals []Value
	// pos is the position of a kept view's row.
	pos []byte
	// gkeys and aggv are a group's key values and aggregate results.
	gkeys []Value
	aggv  []Value
}

type evalFn func(e *rowEnv) (Value, error)

// source is a FROM clause: its columns and its rows.
type source interface {
	columns() []Column
	column(name string) (Column, bool)
	has(name string) bool
	// scan calls fn for each row whose _key lies in keys (nil: all rows).
	scan(x *execCtx, keys []keyRange, fn func(e *rowEnv) error) error
}

// oneRow is the source of a SELECT without FROM: one row, no columns.
type oneRow struct{}

func (oneRow) columns() []Column            { return nil }
func (oneRow) column(string) (Column, bool) { return Column{}, false }
func (oneRow) has(string) bool              { return false }
func (oneRow) scan(x *execCtx, _ []keyRange, fn func(*rowEnv) error) error {
	return fn(&rowEnv{x: x})
}

// tableSource reads a table: _key and one column per family.
type tableSource struct {
	name, alias string
	fams        []string
	history     bool
	// Temporal arguments, evaluated per execution (nil: absent).
	before, after, beforeEq, afterEq, asOf evalFn
	latestN                                evalFn
}

func (t *tableSource) famType() *Type {
	if t.history {
		return MapOf(TBytes, ArrayOf(tCell))
	}
	return MapOf(TBytes, TBytes)
}

func (t *tableSource) columns() []Column {
	cols := []Column{{"_key", TBytes}}
	for _, f := range t.fams {
		cols = append(cols, Column{f, t.famType()})
	}
	return cols
}

func (t *tableSource) column(name string) (Column, bool) {
	if strings.EqualFold(name, "_key") {
		return Column{"_key", TBytes}, true
	}
	if slices.Contains(t.fams, name) {
		return Column{name, t.famType()}, true
	}
	return Column{}, false
}

func (t *tableSource) has(name string) bool { _, ok := t.column(name); return ok }

// cellFilter applies temporal arguments: a timestamp window and, with
// history, latest_n versions per column; without history only each
// column's newest cell is kept.
type cellFilter struct {
	lo, hi  int64 // inclusive, micros
	n       int64 // 0: all
	history bool
}

// CellBounds describes a query's cell filter f so a reader can cut cells
// before it runs: f keeps only cells with timestamps in [lo, hi] (micros)
// and, among those, the newest versions of each column (0: all). ok is
// false when f is not a query's cell filter. Applying f after such a cut
// gives what f alone gives.
func CellBounds(f table.RowFilter) (lo, hi, versions int64, ok bool) {
	c, ok := f.(*cellFilter)
	if !ok {
		return 0, 0, 0, false
	}
	versions = c.n
	if !c.history {
		versions = 1
	}
	return c.lo, c.hi, versions, true
}

func (f *cellFilter) Apply(r cell.Row) cell.Row {
	out := r.Cells[:0]
	var prev *cell.Cell
	var n int64
	for i := range r.Cells {
		c := &r.Cells[i]
		if c.Timestamp < f.lo || c.Timestamp > f.hi {
			continue
		}
		if prev != nil && cell.SameColumn(prev, c) {
			n++
		} else {
			n = 1
		}
		prev = c
		if !f.history && n > 1 || f.n > 0 && n > f.n {
			continue
		}
		out = append(out, *c)
	}
	r.Cells = out
	return r
}

func tsArg(e *rowEnv, f evalFn) (int64, bool, error) {
	if f == nil {
		return 0, false, nil
	}
	v, err := f(e)
	if err != nil || v == nil {
		return 0, false, err
	}
	return v.(time.Time).UnixMicro(), true, nil
}

func (t *tableSource) filter(x *execCtx) (*cellFilter, error) {
	e := &rowEnv{x: x}
	f := &cellFilter{lo: -1 << 63, hi: 1<<63 - 1, history: t.history}
	if v, ok, err := tsArg(e, t.before); err != nil {
		return nil, err
	} else if ok {
		f.hi = min(f.hi, v-1)
	}
	if v, ok, err := tsArg(e, t.beforeEq); err != nil {
		return nil, err
	} else if ok {
		f.hi = min(f.hi, v)
	}
	if v, ok, err := tsArg(e, t.asOf); err != nil {
		return nil, err
	} else if ok {
		f.hi = min(f.hi, v)
	}
	if v, ok, err := tsArg(e, t.after); err != nil {
		return nil, err
	} else if ok {
		f.lo = max(f.lo, v+1)
	}
	if v, ok, err := tsArg(e, t.afterEq); err != nil {
		return nil, err
	} else if ok {
		f.lo = max(f.lo, v)
	}
	if t.latestN != nil {
		v, err := t.latestN(e)
		if err != nil {
			return nil, err
		}
		if n, ok := v.(int64); ok {
			if n <= 0 {
				return nil, invalidf("latest_n must be positive, not %d", n)
			}
			f.n = n
		}
	}
	return f, nil
}

func (t *tableSource) scan(x *execCtx, keys []keyRange, fn func(*rowEnv) error) error {
	f, err := t.filter(x)
	if err != nil {
		return err
	}
	req := table.ReadRequest{Filter: f}
	if keys != nil {
		if len(keys) == 0 {
			return nil
		}
		for _, k := range keys {
			if k.hi == nil && len(k.lo) == 0 {
				req.Ranges = nil
				break
			}
			req.Ranges = append(req.Ranges, table.RowRange{Start: k.lo, End: k.hi})
		}
	}
	env := &rowEnv{x: x}
	return x.cat.ReadRows(x.ctx, t.name, req, func(r cell.Row) error {
		env.row = &r
		return fn(env)
	})
}

// familyCells returns the cells of family fam in r (a sub-slice).
func familyCells(r *cell.Row, fam string) []cell.Cell {
	i := 0
	for i < len(r.Cells) && r.Cells[i].Family != fam {
		i++
	}
	j := i
	for j < len(r.Cells) && r.Cells[j].Family == fam {
		j++
	}
	return r.Cells[i:j]
}

func cellStruct(c *cell.Cell) Struct {
	return Struct{time.UnixMicro(c.Timestamp).UTC(), c.Value}
}

// familyValue is a family as a MAP: qualifier to newest value, or with
// history to its cells newest first.
func familyValue(r *cell.Row, fam string, history bool) Value {
	cells := familyCells(r, fam)
	m := &Map{}
	cell.Columns(cells, func(col []cell.Cell) {
		m.Keys = append(m.Keys, col[0].Qualifier)
		if !history {
			m.Vals = append(m.Vals, col[0].Value)
			return
		}
		arr := make(Array, len(col))
		for i := range col {
			arr[i] = cellStruct(&col[i])
		}
		m.Vals = append(m.Vals, arr)
	})
	return m
}

// columnValue is fam['q']: the newest value, or with history the cells.
func columnValue(r *cell.Row, fam string, q []byte, history bool) Value {
	cells := familyCells(r, fam)
	for i := range cells {
		if !bytes.Equal(cells[i].Qualifier, q) {
			continue
		}
		if !history {
			return cells[i].Value
		}
		var arr Array
		for j := i; j < len(cells) && bytes.Equal(cells[j].Qualifier, q); j++ {
			arr = append(arr, cellStruct(&cells[j]))
		}
		return arr
	}
	return nil
}

// derivedSource is a view or subquery: the inner query's rows, or a kept
// materialized view's stored rows.
type derivedSource struct {
	q      *query
	alias  string
	keyCol int // index of the _key column ranges apply to, or -1
	// passKeys: key ranges on keyCol may narrow the scan (and are then
	// applied exactly): innerPass, or the view's rows are kept.
	passKeys bool
	// innerPass: key ranges on keyCol may narrow the inner query's scan.
	innerPass bool
	// stored names a kept materialized view (StoredViews) read instead of
	// running q; q still gives its columns, and runs if the view is no
	// longer kept.
	stored string
}

func (d *derivedSource) columns() []Column { return d.q.cols }

func (d *derivedSource) column(name string) (Column, bool) {
	for _, c := range d.q.cols {
		if c.Name != "" && strings.EqualFold(c.Name, name) {
			return c, true
		}
	}
	return Column{}, false
}

func (d *derivedSource) has(name string) bool { _, ok := d.column(name); return ok }

func (d *derivedSource) scan(x *execCtx, keys []keyRange, fn func(*rowEnv) error) error {
	env := &rowEnv{x: x}
	var after []byte
	if x.afterSrc == d {
		after = x.after
	}
	if d.stored != "" {
		if sv, ok := x.cat.(StoredViews); ok {
			if keys != nil && len(keys) == 0 {
				return nil
			}
			var ranges []table.RowRange
			for _, k := range keys {
				ranges = append(ranges, table.RowRange{Start: k.lo, End: k.hi})
			}
			kept, err := sv.ScanStored(x.ctx, d.stored, ranges, after, func(pos []byte, vals []Value) error {
				env.vals, env.pos = vals, pos
				return fn(env)
			})
			if kept || err != nil {
				return err
			}
		}
		if x.afterSrc == d {
			// Its rows would have no positions.
			return fmt.Errorf("%w: materialized view %s is no longer kept", ErrStale, d.stored)
		}
	}
	var inner []keyRange
	if d.innerPass {
		inner = keys
		if after != nil && d.direct() {
			// Resuming (RunFrom): the rows before the position's row
			// need not be read.
			inner = intersect(inner, []keyRange{{lo: after}})
		}
	}
	exact := keys != nil && !d.innerPass && d.keyCol >= 0
	ix := x
	var rowKey []byte
	if d.direct() {
		// Each row is one table row, in key order: its row key is its
		// position.
		c := *x
		c.rowKey = func(k []byte) { rowKey = k }
		ix = &c
	}
	return d.q.run(ix, inner, func(vals []Value) error {
		if exact {
			k, _ := vals[d.keyCol].([]byte)
			if k == nil || !inRanges(keys, k) {
				return nil
			}
		}
		env.vals, env.pos = vals, rowKey
		return fn(env)
	})
}

// direct reports whether the inner query reads a table row by row in key
// order (not grouped, no ORDER BY; a LIMIT allowed), directly or through
// views that do: each of its rows is then positioned by its table row key.
func (d *derivedSource) direct() bool {
	q := d.q
	if d.stored != "" || q.grouped || len(q.order) > 0 {
		return false
	}
	switch s := q.src.(type) {
	case *tableSource:
		return true
	case *derivedSource:
		return s.direct()
	}
	return false
}

// inRanges reports whether k lies in one of rs.
func inRanges(rs []keyRange, k []byte) bool {
	for _, r := range rs {
		if bytes.Compare(k, r.lo) >= 0 && (r.hi == nil || bytes.Compare(k, r.hi) < 0) {
			return true
		}
	}
	return false
}

// unpackSource is UNPACK(subquery): one row per timestamp of the inner
// row's history columns, with _timestamp.
type unpackSource struct {
	inner *derivedSource
	cols  []Column
	// kind per inner column: 0 passes, 1 an ARRAY of cells, 2 a MAP of
	// them.
	kinds []int
	tsAt  int // position of _timestamp in cols
}

func newUnpack(inner *derivedSource) *unpackSource {
	u := &unpackSource{inner: inner}
	at := 0
	for i, c := range inner.q.cols {
		if strings.EqualFold(c.Name, "_key") {
			at = i + 1
		}
	}
	for i, c := range inner.q.cols {
		if i == at {
			u.cols = append(u.cols, Column{"_timestamp", TTimestamp})
		}
		k, t := 0, c.Type
		if isHistory(t) {
			k, t = 1, t.Elem.Fields[1].Type
		} else if t.Kind == KindMap && isHistory(t.Val) {
			k, t = 2, MapOf(t.Key, t.Val.Elem.Fields[1].Type)
		}
		u.kinds = append(u.kinds, k)
		u.cols = append(u.cols, Column{c.Name, t})
	}
	if at == len(inner.q.cols) {
		u.cols = append(u.cols, Column{"_timestamp", TTimestamp})
	}
	u.tsAt = at
	return u
}

func isHistory(t *Type) bool {
	return t.Kind == KindArray && t.Elem.Kind == KindStruct && len(t.Elem.Fields) == 2 &&
		t.Elem.Fields[0].Name == "timestamp" && t.Elem.Fields[0].Type.Kind == KindTimestamp && t.Elem.Fields[1].Name == "value"
}

func (u *unpackSource) columns() []Column { return u.cols }

func (u *unpackSource) column(name string) (Column, bool) {
	for _, c := range u.cols {
		if c.Name != "" && strings.EqualFold(c.Name, name) {
			return c, true
		}
	}
	return Column{}, false
}

func (u *unpackSource) has(name string) bool { _, ok := u.column(name); return ok }

// direct reports whether the inner query reads a table row by row in key
// order (not grouped, no ORDER BY): its rows then have positions, the
// row key and the timestamp (newest first).
func (u *unpackSource) direct() bool { return u.inner.direct() }

// unpackPos is the position of the row for timestamp ts of table row key:
// the escaped key, then the timestamp descending.
func unpackPos(key []byte, ts time.Time) []byte {
	b := make([]byte, 0, len(key)+10)
	for _, c := range key {
		if c == 0 {
			b = append(b, 0, 0xFF)
			continue
		}
		b = append(b, c)
	}
	b = append(b, 0, 1)
	return binary.BigEndian.AppendUint64(b, ^(uint64(ts.UnixMicro()) ^ 1<<63))
}

func (u *unpackSource) scan(x *execCtx, keys []keyRange, fn func(*rowEnv) error) error {
	env := &rowEnv{x: x}
	direct := u.direct()
	return u.inner.scan(x, keys, func(in *rowEnv) error {
		// A direct inner query's rows carry their table row key.
		var rowKey []byte
		if direct {
			rowKey = in.pos
		}
		var stamps []time.Time
		add := func(a Array) {
			for _, s := range a {
				stamps = append(stamps, s.(Struct)[0].(time.Time))
			}
		}
		for i, v := range in.vals {
			switch {
			case v == nil:
			case u.kinds[i] == 1:
				add(v.(Array))
			case u.kinds[i] == 2:
				for _, mv := range v.(*Map).Vals {
					if mv != nil {
						add(mv.(Array))
					}
				}
			}
		}
		slices.SortFunc(stamps, func(a, b time.Time) int { return b.Compare(a) })
		stamps = slices.CompactFunc(stamps, func(a, b time.Time) bool { return a.Equal(b) })
		at := func(a Array, ts time.Time) Value {
			for _, s := range a {
				if st := s.(Struct); st[0].(time.Time).Equal(ts) {
					return st[1]
				}
			}
			return nil
		}
		for _, ts := range stamps {
			out := make([]Value, 0, len(u.cols))
			for i, v := range in.vals {
				if i == u.tsAt {
					out = append(out, ts)
				}
				switch {
				case v == nil || u.kinds[i] == 0:
					out = append(out, v)
				case u.kinds[i] == 1:
					out = append(out, at(v.(Array), ts))
				default:
					m := v.(*Map)
					nm := &Map{}
					for j, mv := range m.Vals {
						if mv == nil {
							continue
						}
						if val := at(mv.(Array), ts); val != nil {
							nm.Keys = append(nm.Keys, m.Keys[j])
							nm.Vals = append(nm.Vals, val)
						}
					}
					out = append(out, nm)
				}
			}
			if u.tsAt == len(in.vals) {
				out = append(out, ts)
			}
			env.vals, env.pos = out, nil
			if rowKey != nil {
				env.pos = unpackPos(rowKey, ts)
			}
			if err := fn(env); err != nil {
				return err
			}
		}
		return nil
	})
}

// planSource plans a FROM clause.
func (p *planner) planSource(te ast.TableExpr) (source, error) {
	switch x := te.(type) {
	case *ast.TableName:
		if x.Hint != nil || x.Sample != nil {
			return nil, p.errf(x, "table hints and TABLESAMPLE are not supported")
		}
		alias := ""
		if x.As != nil {
			alias = x.As.Alias.Name
		}
		return p.namedSource(x.Table, x.Table.Name, alias, nil)
	case *ast.TVFCallExpr:
		if x.Hint != nil || x.Sample != nil {
			return nil, p.errf(x, "table hints and TABLESAMPLE are not supported")
		}
		name := funcName(x.Name)
		if strings.EqualFold(name, "UNPACK") && len(x.Name.Idents) == 1 {
			if len(x.Args) != 1 || len(x.NamedArgs) != 0 {
				return nil, p.errf(x, "UNPACK takes one subquery")
			}
			ea, ok := x.Args[0].(*ast.ExprArg)
			if !ok {
				return nil, p.errf(x, "UNPACK takes one subquery")
			}
			sq, ok := ea.Expr.(*ast.ScalarSubQuery)
			if !ok {
				return nil, p.errf(ea, "UNPACK takes one subquery")
			}
			d, err := p.derived(sq.Query, "")
			if err != nil {
				return nil, err
			}
			return newUnpack(d), nil
		}
		if len(x.Name.Idents) != 1 {
			return nil, p.errf(x, "unknown table function %s", name)
		}
		if len(x.Args) > 0 {
			return nil, p.errf(x, "table %s takes named temporal arguments only (name => value)", name)
		}
		return p.namedSource(x.Name.Idents[0], name, "", x.NamedArgs)
	case *ast.SubQueryTableExpr:
		alias := ""
		if x.As != nil {
			alias = x.As.Alias.Name
		}
		return p.derived(x.Query, alias)
	case *ast.ParenTableExpr:
		return p.planSource(x.Source)
	case *ast.Join:
		return nil, p.errf(x, "JOIN is not supported")
	}
	return nil, p.errf(te, "unsupported FROM clause")
}

func (p *planner) derived(qe ast.QueryExpr, alias string) (*derivedSource, error) {
	q, err := p.planQuery(qe)
	if err != nil {
		return nil, err
	}
	d := &derivedSource{q: q, alias: alias, keyCol: -1}
	p.setKeyPass(d)
	return d, nil
}

// setKeyPass finds a pass-through _key column and decides whether key
// ranges on it may narrow the inner scan: only when the inner query has
// no LIMIT and is not grouped, or grouped by _key alone.
func (p *planner) setKeyPass(d *derivedSource) {
	q := d.q
	for i, it := range q.items {
		if it.keyPass {
			d.keyCol = i
		}
	}
	if d.keyCol >= 0 && q.limit < 0 && q.limitPar == "" {
		d.innerPass = !q.grouped || len(q.groups) == 1 && q.groupedByKey
	}
	d.passKeys = d.innerPass
	if d.stored == "" {
		return
	}
	// A kept view's rows are stored by their _key column: ranges on it
	// narrow the read, whatever the view's query.
	for i, c := range q.cols {
		if c.Name == "_key" && c.Type.Kind == KindBytes {
			d.keyCol, d.passKeys = i, true
		}
	}
}

// maxViewDepth bounds views defined through views.
const maxViewDepth = 8

func (p *planner) namedSource(at ast.Node, name, alias string, args []*ast.NamedArg) (source, error) {
	if q, ok := p.cat.View(name); ok {
		if len(args) > 0 {
			return nil, p.errf(at, "view %s takes no temporal arguments", name)
		}
		if p.depth >= maxViewDepth {
			return nil, p.errf(at, "views nest deeper than %d", maxViewDepth)
		}
		sub := &planner{cat: p.cat, file: &token.File{Buffer: q}, params: map[string]*Type{}, depth: p.depth + 1}
		vq, err := sub.planSQL(q)
		p.tables = append(p.tables, sub.tables...)
		if err != nil {
			var pe *Error
			if errors.As(err, &pe) {
				return nil, p.errf(at, "in view %s: %s", name, pe.Error())
			}
			return nil, err
		}
		d := &derivedSource{q: vq, alias: alias, keyCol: -1}
		if sv, ok := p.cat.(StoredViews); ok && sv.Stored(name) {
			d.stored = name
		}
		p.setKeyPass(d)
		return d, nil
	}
	fams, err := p.cat.Families(name)
	if errors.Is(err, ErrNoTable) {
		return nil, p.errf(at, "table or view not found: %s", name)
	}
	if err != nil {
		return nil, err
	}
	t := &tableSource{name: name, alias: alias, fams: fams}
	p.tables = append(p.tables, name)
	empty := &scope{p: p, src: oneRow{}}
	for _, a := range args {
		arg := strings.ToLower(a.Name.Name)
		switch arg {
		case "with_history", "latest_n", "before", "after", "before_or_equal", "after_or_equal", "as_of":
		default:
			return nil, p.errf(a.Name, "unknown temporal argument %s", a.Name.Name)
		}
		f, ty, err := p.compile(a.Value, empty)
		if err != nil {
			return nil, err
		}
		want := TTimestamp
		switch arg {
		case "with_history":
			want = TBool
		case "latest_n":
			want = TInt64
		}
		if ty.Kind != want.Kind {
			return nil, p.errf(a.Value, "%s needs a %s, not %s", a.Name.Name, want, ty)
		}
		switch arg {
		case "with_history":
			v, err := f(&rowEnv{x: &execCtx{}})
			if err != nil {
				return nil, p.errf(a.Value, "with_history needs a constant BOOL")
			}
			t.history = v == true
		case "latest_n":
			t.latestN = f
		case "before":
			t.before = f
		case "after":
			t.after = f
		case "before_or_equal":
			t.beforeEq = f
		case "after_or_equal":
			t.afterEq = f
		case "as_of":
			t.asOf = f
		default:
			return nil, p.errf(a.Name, "unknown temporal argument %s", a.Name.Name)
		}
	}
	if t.asOf != nil && t.history {
		return nil, p.errf(at, "as_of applies only without with_history")
	}
	if t.latestN != nil && !t.history {
		return nil, p.errf(at, "latest_n needs with_history => TRUE")
	}
	return t, nil
}
