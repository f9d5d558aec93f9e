package sqlquery

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cloudspannerecosystem/memefish"
	"github.com/cloudspannerecosystem/memefish/ast"
	"github.com/cloudspannerecosystem/memefish/token"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/table"
)

// ErrInvalid marks a query that cannot be planned or run: bad syntax, an
// unknown table, column or function, a type error (INVALID_ARGUMENT).
var ErrInvalid = errors.New("ebbtable: invalid query")

// ErrNoTable marks a query naming a table or view that does not exist.
var ErrNoTable = errors.New("ebbtable: no such table or view")

// Catalog is what a query reads: the tables' families, the views' queries
// and the rows, read as ReadRows reads them.
type Catalog interface {
	// Families returns a table's column families in order; an error
	// wrapping ErrNoTable when there is no such table.
	Families(table string) ([]string, error)
	// View returns the query of a logical or materialized view.
	View(name string) (query string, ok bool)
	// ReadRows reads rows as the data API's ReadRows does.
	ReadRows(ctx context.Context, table string, req table.ReadRequest, fn func(cell.Row) error) error
}

// StoredViews is implemented by a Catalog whose materialized views keep
// their result rows (maintained incrementally): FROM such a view reads the
// kept rows instead of running the view's query.
type StoredViews interface {
	// Stored reports whether view name's rows are kept; asked when a
	// query is planned.
	Stored(name string) bool
	// ScanStored brings the kept rows up to date with every write before
	// the call and passes them to fn in _key order, all from one
	// consistent state: those whose _key lies in ranges (nil: all), after
	// position after (nil: from the start). pos is the row's position, a
	// key unique in the view that grows in the order rows come. kept is
	// false when the view's rows are no longer kept; nothing was passed.
	ScanStored(ctx context.Context, name string, ranges []table.RowRange, after []byte, fn func(pos []byte, row []Value) error) (kept bool, err error)
}

// ErrStale is returned when a plan no longer fits what it reads (a view
// it read the kept rows of is no longer kept); the query must be planned
// again.
var ErrStale = errors.New("ebbtable: the query must be planned again")

// EngineCatalog is a Catalog over a table engine's instance.
type EngineCatalog struct {
	Engine   *table.Engine
	Instance string
	// Views looks up a view's query; nil: no views.
	Views func(name string) (string, bool)
	// Kept and ScanKept, when set, make the catalog's kept views
	// StoredViews (Stored and ScanStored).
	Kept     func(name string) bool
	ScanKept func(ctx context.Context, name string, ranges []table.RowRange, after []byte, fn func(pos []byte, row []Value) error) (bool, error)
	// Read, when set, reads a table's rows instead of Engine (a cluster
	// node reads every tablet of the table, wherever it lives); it reads
	// as Engine.ReadRows does.
	Read func(ctx context.Context, name string, req table.ReadRequest, fn func(cell.Row) error) error
}

// Stored implements StoredViews.
func (c EngineCatalog) Stored(name string) bool {
	return c.Kept != nil && c.ScanKept != nil && c.Kept(name)
}

// ScanStored implements StoredViews.
func (c EngineCatalog) ScanStored(ctx context.Context, name string, ranges []table.RowRange, after []byte, fn func(pos []byte, row []Value) error) (bool, error) {
	if c.ScanKept == nil {
		return false, nil
	}
	return c.ScanKept(ctx, name, ranges, after, fn)
}

// Families implements Catalog.
func (c EngineCatalog) Families(name string) ([]string, error) {
	m, err := c.Engine.Table(c.Instance, name)
	if err != nil {
		if errors.Is(err, table.ErrTableNotFound) {
			return nil, fmt.Errorf("%w: %s", ErrNoTable, name)
		}
		return nil, err
	}
	fams := make([]string, len(m.Families))
	for i, f := range m.Families {
		fams[i] = f.Name
	}
	return fams, nil
}

// View implements Catalog.
func (c EngineCatalog) View(name string) (string, bool) {
	if c.Views == nil {
		return "", false
	}
	return c.Views(name)
}

// ReadRows implements Catalog.
func (c EngineCatalog) ReadRows(ctx context.Context, name string, req table.ReadRequest, fn func(cell.Row) error) error {
	if c.Read != nil {
		return c.Read(ctx, name, req, fn)
	}
	return c.Engine.ReadRows(ctx, c.Instance, name, req, fn)
}

// Column is a result column.
type Column struct {
	Name string
	Type *Type
}

// Plan is a prepared query: its result columns and how to compute them.
type Plan struct {
	Columns []Column
	// Tables are the tables the query reads (through views too).
	Tables []string
	// Params are the declared parameter types.
	Params map[string]*Type
	root   *query
}

// planner carries what planning one statement needs.
type planner struct {
	cat    Catalog
	file   *token.File
	params map[string]*Type
	tables []string
	depth  int
}

// Error is a planning error with its position in the query.
type Error struct {
	Line, Column int // 1-based; 0 when unknown
	Msg          string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("%d:%d: %s", e.Line, e.Column, e.Msg)
}

// Unwrap makes every planning error an ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

func (p *planner) errf(n ast.Node, format string, args ...any) error {
	e := &Error{Msg: fmt.Sprintf(format, args...)}
	if n != nil && p.file != nil {
		l, c := p.file.ResolvePos(n.Pos())
		if l >= 0 {
			e.Line, e.Column = l+1, c+1
		}
	}
	return e
}

// Prepare parses and plans a query. Parameters must be declared in
// params. Errors wrap ErrInvalid (with a line:column) or ErrNoTable.
func Prepare(cat Catalog, sql string, params map[string]*Type) (plan *Plan, err error) {
	defer func() {
		if r := recover(); r != nil {
			plan, err = nil, &Error{Msg: fmt.Sprintf("cannot parse query: %v", r)}
		}
	}()
	p := &planner{cat: cat, file: &token.File{Buffer: sql}, params: params}
	q, err := p.planSQL(sql)
	if err != nil {
		return nil, err
	}
	return &Plan{Columns: q.cols, Tables: p.tables, Params: params, root: q}, nil
}

func (p *planner) planSQL(sql string) (*query, error) {
	if q := quoteKeywordCalls(sql); q != sql {
		sql, p.file = q, &token.File{Buffer: q}
	}
	stmt, err := memefish.ParseQuery("", sql)
	if err != nil {
		var me memefish.MultiError
		if errors.As(err, &me) && len(me) > 0 && me[0].Position != nil {
			return nil, &Error{Line: me[0].Position.Line + 1, Column: me[0].Position.Column + 1, Msg: "syntax error: " + me[0].Message}
		}
		return nil, &Error{Msg: err.Error()}
	}
	if stmt.Hint != nil {
		return nil, p.errf(stmt.Hint, "statement hints are not supported")
	}
	return p.planQuery(stmt.Query)
}

func (p *planner) planQuery(qe ast.QueryExpr) (*query, error) {
	var order *ast.OrderBy
	var limit *ast.Limit
	for {
		switch x := qe.(type) {
		case *ast.Query:
			if x.With != nil {
				return nil, p.errf(x.With, "WITH is not supported")
			}
			if x.ForUpdate != nil || len(x.PipeOperators) > 0 {
				return nil, p.errf(x, "FOR UPDATE and pipe syntax are not supported")
			}
			if order != nil || limit != nil {
				if x.OrderBy != nil || x.Limit != nil {
					return nil, p.errf(x, "nested ORDER BY or LIMIT is not supported")
				}
			} else {
				order, limit = x.OrderBy, x.Limit
			}
			qe = x.Query
			continue
		case *ast.SubQuery:
			qe = x.Query
			continue
		case *ast.Select:
			return p.planSelect(x, order, limit)
		case *ast.CompoundQuery:
			return nil, p.errf(x, "%s is not supported", x.Op)
		default:
			return nil, p.errf(qe, "this query form is not supported")
		}
	}
}

// outItem is a select-list column.
type outItem struct {
	col  Column
	eval evalFn
	// keyPass is set when the item is the source's _key unchanged (views
	// pass _key ranges through such a column).
	keyPass bool
}

// orderItem is an ORDER BY key: an output column or a hidden expression.
type orderItem struct {
	out  int // index into outputs, or -1
	eval evalFn
	desc bool
}

// query is a planned SELECT.
type query struct {
	src      source
	where    evalFn
	keyPreds []keyPred
	items    []outItem
	cols     []Column
	grouped  bool
	// groupedByKey: GROUP BY _key of a table (or pass-through) alone.
	groupedByKey bool
	groups       []evalFn
	aggs         []*aggSpec
	order        []orderItem
	limit        int64 // -1: none
	limitPar     string
}

func (p *planner) planSelect(s *ast.Select, order *ast.OrderBy, limit *ast.Limit) (*query, error) {
	if s.AllOrDistinct == ast.AllOrDistinctDistinct {
		return nil, p.errf(s, "SELECT DISTINCT is not supported")
	}
	if s.As != nil {
		return nil, p.errf(s, "SELECT AS is not supported")
	}
	if s.Having != nil {
		return nil, p.errf(s.Having, "HAVING is not supported")
	}
	q := &query{limit: -1}
	if s.From != nil {
		src, err := p.planSource(s.From.Source)
		if err != nil {
			return nil, err
		}
		q.src = src
	} else {
		q.src = oneRow{}
	}
	rs := &scope{p: p, src: q.src}
	if s.Where != nil {
		w, t, err := p.compile(s.Where.Expr, rs)
		if err != nil {
			return nil, err
		}
		if t.Kind != KindBool && t.Kind != KindNull {
			return nil, p.errf(s.Where.Expr, "WHERE needs a BOOL, not %s", t)
		}
		q.where = w
		// Key terms narrow the read when _key is the table's row key:
		// a table, or a view passing it through.
		switch src := q.src.(type) {
		case *tableSource:
			q.keyPreds = p.keyPredicates(s.Where.Expr, rs)
		case *derivedSource:
			if src.passKeys {
				q.keyPreds = p.keyPredicates(s.Where.Expr, rs)
			}
		}
	}
	// Grouping: an explicit GROUP BY, or aggregates in the select list.
	aliases := map[string]ast.Expr{}
	for _, it := range s.Results {
		if a, ok := it.(*ast.Alias); ok {
			aliases[strings.ToLower(a.As.Alias.Name)] = a.Expr
		}
	}
	hasAgg := false
	for _, it := range s.Results {
		ast.Inspect(it, func(n ast.Node) bool {
			switch c := n.(type) {
			case *ast.CountStarExpr:
				hasAgg = true
			case *ast.CallExpr:
				if _, ok := aggregates[strings.ToUpper(funcName(c.Func))]; ok {
					hasAgg = true
				}
			}
			return true
		})
	}
	sc := rs
	if s.GroupBy != nil || hasAgg {
		q.grouped = true
		gs := &scope{p: p, src: q.src, inner: rs, grouped: true}
		if s.GroupBy != nil {
			for _, ge := range s.GroupBy.Exprs {
				if lit, ok := ge.(*ast.IntLiteral); ok {
					n, err := intLit(lit)
					if err != nil || n < 1 || int(n) > len(s.Results) {
						return nil, p.errf(lit, "GROUP BY position %s is out of range", lit.Value)
					}
					switch it := s.Results[n-1].(type) {
					case *ast.Alias:
						ge = it.Expr
					case *ast.ExprSelectItem:
						ge = it.Expr
					default:
						return nil, p.errf(lit, "GROUP BY position %s names no expression", lit.Value)
					}
				}
				// A select-list alias overrides a FROM column of the same
				// name (GoogleSQL; Bigtable's `'*' AS _key ... GROUP BY
				// _key`).
				if id, ok := ge.(*ast.Ident); ok {
					if ae, ok := aliases[strings.ToLower(id.Name)]; ok {
						ge = ae
					}
				}
				f, t, err := p.compile(ge, rs)
				if err != nil {
					return nil, err
				}
				if t.Kind == KindMap || t.Kind == KindArray || t.Kind == KindStruct {
					return nil, p.errf(ge, "cannot GROUP BY a value of type %s", t)
				}
				q.groups = append(q.groups, f)
				q.groupedByKey = len(s.GroupBy.Exprs) == 1 && isKeyRef(ge, rs)
				gs.groupText = append(gs.groupText, ge.SQL())
				gs.groupTypes = append(gs.groupTypes, t)
			}
		}
		sc = gs
	}
	for _, it := range s.Results {
		items, err := p.selectItem(it, sc)
		if err != nil {
			return nil, err
		}
		q.items = append(q.items, items...)
	}
	if q.grouped {
		q.aggs = sc.aggs
	}
	for _, it := range q.items {
		q.cols = append(q.cols, it.col)
	}
	if order != nil {
		for _, oi := range order.Items {
			if oi.Collate != nil {
				return nil, p.errf(oi, "COLLATE is not supported")
			}
			o := orderItem{out: -1, desc: oi.Dir == ast.DirectionDesc}
			if id, ok := oi.Expr.(*ast.Ident); ok {
				for i, c := range q.cols {
					if c.Name != "" && strings.EqualFold(c.Name, id.Name) {
						o.out = i
						break
					}
				}
			}
			if lit, ok := oi.Expr.(*ast.IntLiteral); ok {
				n, err := intLit(lit)
				if err != nil || n < 1 || int(n) > len(q.cols) {
					return nil, p.errf(lit, "ORDER BY position %s is out of range", lit.Value)
				}
				o.out = int(n) - 1
			}
			if o.out < 0 {
				f, t, err := p.compile(oi.Expr, sc)
				if err != nil {
					return nil, err
				}
				if t.Kind == KindMap || t.Kind == KindArray || t.Kind == KindStruct {
					return nil, p.errf(oi.Expr, "cannot ORDER BY a value of type %s", t)
				}
				o.eval = f
			} else if k := q.cols[o.out].Type.Kind; k == KindMap || k == KindArray || k == KindStruct {
				return nil, p.errf(oi.Expr, "cannot ORDER BY a value of type %s", q.cols[o.out].Type)
			}
			q.order = append(q.order, o)
		}
		if q.grouped {
			q.aggs = sc.aggs
		}
	}
	if limit != nil {
		if limit.Offset != nil {
			return nil, p.errf(limit.Offset, "OFFSET is not supported")
		}
		switch c := limit.Count.(type) {
		case *ast.IntLiteral:
			n, err := intLit(c)
			if err != nil || n < 0 {
				return nil, p.errf(c, "LIMIT needs a non-negative INT64")
			}
			q.limit = n
		case *ast.Param:
			t, ok := p.params[c.Name]
			if !ok || t.Kind != KindInt64 {
				return nil, p.errf(c, "LIMIT parameter @%s must be declared INT64", c.Name)
			}
			q.limitPar = c.Name
		default:
			return nil, p.errf(limit, "LIMIT needs an INT64 literal or parameter")
		}
	}
	return q, nil
}

func (p *planner) selectItem(it ast.SelectItem, sc *scope) ([]outItem, error) {
	switch x := it.(type) {
	case *ast.Star:
		if sc.grouped {
			return nil, p.errf(x, "SELECT * cannot be used with GROUP BY or aggregates")
		}
		var out []outItem
		cols := sc.src.columns()
		except := map[string]bool{}
		if x.Except != nil {
			for _, id := range x.Except.Columns {
				if !sc.src.has(id.Name) {
					return nil, p.errf(id, "EXCEPT names unknown column %s", id.Name)
				}
				except[strings.ToLower(id.Name)] = true
			}
		}
		replace := map[string]*ast.StarModifierReplaceItem{}
		if x.Replace != nil {
			for _, r := range x.Replace.Columns {
				if !sc.src.has(r.Name.Name) {
					return nil, p.errf(r.Name, "REPLACE names unknown column %s", r.Name.Name)
				}
				replace[strings.ToLower(r.Name.Name)] = r
			}
		}
		for _, c := range cols {
			lc := strings.ToLower(c.Name)
			if except[lc] {
				continue
			}
			if r, ok := replace[lc]; ok {
				f, t, err := p.compile(r.Expr, sc)
				if err != nil {
					return nil, err
				}
				out = append(out, outItem{col: Column{c.Name, metaType(t)}, eval: f})
				continue
			}
			f, t, _ := sc.column(c.Name)
			out = append(out, outItem{col: Column{c.Name, t}, eval: f, keyPass: c.Name == "_key"})
		}
		return out, nil
	case *ast.DotStar:
		f, t, err := p.compile(x.Expr, sc)
		if err != nil {
			return nil, err
		}
		if t.Kind != KindStruct {
			return nil, p.errf(x, "%s.* needs a STRUCT, not %s", x.Expr.SQL(), t)
		}
		if x.Except != nil || x.Replace != nil {
			return nil, p.errf(x, "EXCEPT and REPLACE on expr.* are not supported")
		}
		var out []outItem
		for i, fd := range t.Fields {
			i := i
			out = append(out, outItem{col: Column{fd.Name, metaType(fd.Type)}, eval: func(e *rowEnv) (Value, error) {
				v, err := f(e)
				if err != nil || v == nil {
					return nil, err
				}
				return v.(Struct)[i], nil
			}})
		}
		return out, nil
	case *ast.Alias:
		f, t, err := p.compile(x.Expr, sc)
		if err != nil {
			return nil, err
		}
		return []outItem{{col: Column{x.As.Alias.Name, metaType(t)}, eval: f, keyPass: isKeyRef(x.Expr, sc) && x.As.Alias.Name == "_key"}}, nil
	case *ast.ExprSelectItem:
		f, t, err := p.compile(x.Expr, sc)
		if err != nil {
			return nil, err
		}
		name := ""
		switch e := x.Expr.(type) {
		case *ast.Ident:
			name = e.Name
			if c, ok := sc.src.column(e.Name); ok {
				name = c.Name
			}
		case *ast.Path:
			name = e.Idents[len(e.Idents)-1].Name
		case *ast.SelectorExpr:
			name = e.Ident.Name
		}
		return []outItem{{col: Column{name, metaType(t)}, eval: f, keyPass: isKeyRef(x.Expr, sc) && name == "_key"}}, nil
	}
	return nil, p.errf(it, "unsupported select item")
}

// isKeyRef reports whether e is the source's _key column, unchanged.
func isKeyRef(e ast.Expr, sc *scope) bool {
	id, ok := e.(*ast.Ident)
	if !ok || !strings.EqualFold(id.Name, "_key") {
		return false
	}
	switch s := sc.src.(type) {
	case *tableSource:
		return true
	case *derivedSource:
		return s.keyCol >= 0
	}
	return false
}

// metaType reports an untyped NULL as INT64, as result metadata needs a
// type.
func metaType(t *Type) *Type {
	if t.Kind == KindNull {
		return TInt64
	}
	return t
}

func funcName(p *ast.Path) string {
	parts := make([]string, len(p.Idents))
	for i, id := range p.Idents {
		parts[i] = id.Name
	}
	return strings.Join(parts, ".")
}
