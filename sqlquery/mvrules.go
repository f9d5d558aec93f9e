package sqlquery

import (
	"fmt"
	"strings"

	"github.com/cloudspannerecosystem/memefish"
	"github.com/cloudspannerecosystem/memefish/ast"
	"github.com/cloudspannerecosystem/memefish/token"
)

// Cloud Bigtable's rules for the query of a continuous materialized view
// (its "Continuous materialized view queries" page, and "Create an
// asynchronous secondary index" for the ORDER BY form):
//
//   - a SELECT over one table (no view, subquery, UNPACK, JOIN, WITH) with
//     a GROUP BY clause or, for an asynchronous secondary index, an ORDER
//     BY clause, not both; no LIMIT or OFFSET;
//   - only the aggregates COUNT, SUM, AVG, MIN, MAX, ANY_VALUE, BIT_AND,
//     BIT_OR, BIT_XOR (and HLL_COUNT.*, which ebbtable does not have);
//     no DISTINCT in them, no ARRAY_AGG, COUNTIF, ...;
//   - no SELECT *, no ARRAY or STRUCT values (constructors or output
//     columns), no map columns (a whole family), no DATE outputs, no
//     CURRENT_* or other non-deterministic functions, no DESC sort, no
//     nested queries;
//   - the row key: the GROUP BY columns (COUNT(*) alone needs one, as
//     `'*' AS _key ... GROUP BY _key`), or the ORDER BY columns, which must
//     be select-list columns, ascending, and include the table's row key
//     unchanged.
//
// mvAggregates are the aggregates a materialized view may use.
var mvAggregates = map[string]bool{
	"COUNT": true, "SUM": true, "AVG": true, "MIN": true, "MAX": true, "ANY_VALUE": true,
	"BIT_AND": true, "BIT_OR": true, "BIT_XOR": true,
}

// mvNondeterministic are the functions whose value depends on when they
// run: Cloud Bigtable refuses them in a materialized view.
var mvNondeterministic = map[string]bool{
	"CURRENT_TIMESTAMP": true, "CURRENT_DATE": true, "CURRENT_TIME": true, "CURRENT_DATETIME": true,
	"RAND": true, "GENERATE_UUID": true, "NEW_UUID": true,
}

// MaterializedKey checks a materialized view's query (sql, planned as p)
// against Cloud Bigtable's rules beyond CheckMaterialized's and returns
// the view's row key columns: indexes into p.Columns, in key order (the
// GROUP BY keys, or the ORDER BY keys of a secondary index). Errors wrap
// ErrInvalid, with the position of the offending part.
func (p *Plan) MaterializedKey(sql string) (key []int, err error) {
	defer func() {
		if r := recover(); r != nil {
			key, err = nil, &Error{Msg: fmt.Sprintf("cannot check the query: %v", r)}
		}
	}()
	if err := p.CheckMaterialized(); err != nil {
		return nil, err
	}
	if q := quoteKeywordCalls(sql); q != sql {
		sql = q
	}
	pl := &planner{file: &token.File{Buffer: sql}}
	stmt, err := memefish.ParseQuery("", sql)
	if err != nil {
		return nil, invalidf("cannot parse query: %v", err)
	}
	qe, ok := stmt.Query.(*ast.Query)
	var sel *ast.Select
	var order *ast.OrderBy
	if ok && qe.With == nil {
		sel, _ = qe.Query.(*ast.Select)
		order = qe.OrderBy
	} else if s, ok := stmt.Query.(*ast.Select); ok {
		sel = s
	}
	if sel == nil {
		return nil, invalidf("a materialized view's query must be one SELECT")
	}
	if err := mvWalk(pl, sel, order); err != nil {
		return nil, err
	}
	for i, c := range p.Columns {
		switch c.Type.Kind {
		case KindMap:
			return nil, invalidf("a materialized view cannot have a map column (%s is a whole column family); select its qualifiers", colName(c, i))
		case KindArray, KindStruct:
			return nil, invalidf("a materialized view cannot have an %s column (%s)", c.Type, colName(c, i))
		case KindDate:
			return nil, invalidf("a materialized view cannot have a DATE column (%s): use a TIMESTAMP or a STRING", colName(c, i))
		}
	}
	resolve := func(e ast.Expr) int { return mvResolve(sel, p.Columns, e) }
	if sel.GroupBy == nil {
		if order == nil {
			return nil, pl.errf(sel, "a materialized view's query needs GROUP BY: its columns are the view's row key (for a single group, `'*' AS _key ... GROUP BY _key`)")
		}
		hasRowKey := false
		for _, oi := range order.Items {
			if oi.Dir == ast.DirectionDesc {
				return nil, pl.errf(oi, "a materialized view (an asynchronous secondary index) sorts ascending only: DESC is not allowed")
			}
			i := resolve(oi.Expr)
			if i < 0 {
				return nil, pl.errf(oi.Expr, "every ORDER BY key of a materialized view must be a column of its SELECT list")
			}
			if mvIsRowKey(sel.Results[i]) {
				hasRowKey = true
			}
			key = append(key, i)
		}
		if !hasRowKey {
			return nil, pl.errf(order, "the ORDER BY of a materialized view (an asynchronous secondary index) must include the table's row key, _key, unchanged")
		}
	} else {
		for _, ge := range sel.GroupBy.Exprs {
			i := resolve(ge)
			if i < 0 {
				return nil, pl.errf(ge, "every GROUP BY key of a materialized view must be a column of its SELECT list: the keys are the view's row key")
			}
			key = append(key, i)
		}
	}
	seen := map[int]bool{}
	for _, i := range key {
		if seen[i] {
			return nil, invalidf("materialized view key column %s is named twice", colName(p.Columns[i], i))
		}
		seen[i] = true
		switch p.Columns[i].Type.Kind {
		case KindBytes, KindString, KindInt64, KindTimestamp:
		default:
			return nil, invalidf("a materialized view's row key column %s is %s: a key column must be BYTES, STRING, INT64 or TIMESTAMP", colName(p.Columns[i], i), p.Columns[i].Type)
		}
	}
	for i, c := range p.Columns {
		if strings.EqualFold(c.Name, "_key") && !seen[i] {
			return nil, invalidf("a materialized view's _key column must be one of its row key columns (GROUP BY or ORDER BY it)")
		}
	}
	return key, nil
}

func colName(c Column, i int) string {
	if c.Name == "" {
		return fmt.Sprintf("column %d", i+1)
	}
	return c.Name
}

// mvWalk refuses the constructs a materialized view's query cannot use.
func mvWalk(pl *planner, sel *ast.Select, order *ast.OrderBy) error {
	var err error
	fail := func(n ast.Node, format string, args ...any) {
		if err == nil {
			err = pl.errf(n, format, args...)
		}
	}
	visit := func(n ast.Node) bool {
		if err != nil {
			return false
		}
		switch x := n.(type) {
		case *ast.Star, *ast.DotStar:
			fail(x, "a materialized view cannot SELECT *: name its columns")
		case *ast.ScalarSubQuery, *ast.ArraySubQuery, *ast.ExistsSubQuery, *ast.InExpr:
			if in, ok := x.(*ast.InExpr); ok {
				if _, sub := in.Right.(*ast.SubQueryInCondition); !sub {
					return true
				}
			}
			fail(x, "a materialized view's query cannot nest queries")
		case *ast.ArrayLiteral:
			fail(x, "a materialized view's query cannot use ARRAY values")
		case *ast.TypedStructLiteral, *ast.TypelessStructLiteral, *ast.TupleStructLiteral:
			fail(x, "a materialized view's query cannot use STRUCT values")
		case *ast.Ident:
			if mvNondeterministic[strings.ToUpper(x.Name)] {
				fail(x, "a materialized view's query cannot use %s or another non-deterministic function", strings.ToUpper(x.Name))
			}
		case *ast.CallExpr:
			name := strings.ToUpper(funcName(x.Func))
			if mvNondeterministic[strings.TrimPrefix(name, "SAFE.")] {
				fail(x, "a materialized view's query cannot use %s or another non-deterministic function", name)
			} else if aggregates[name] || strings.HasPrefix(name, "HLL_COUNT.") {
				if !mvAggregates[name] {
					fail(x, "a materialized view cannot use the aggregate %s (COUNT, SUM, AVG, MIN, MAX, ANY_VALUE, BIT_AND, BIT_OR and BIT_XOR only)", name)
				} else if x.Distinct {
					fail(x, "a materialized view's aggregates cannot be DISTINCT")
				}
			}
		}
		return err == nil
	}
	ast.Inspect(sel, visit)
	if order != nil {
		ast.Inspect(order, visit)
	}
	return err
}

// mvResolve finds the select-list column a GROUP BY or ORDER BY key names:
// a position, an alias, or the same expression; -1 when none.
func mvResolve(sel *ast.Select, cols []Column, e ast.Expr) int {
	if lit, ok := e.(*ast.IntLiteral); ok {
		n, err := intLit(lit)
		if err != nil || n < 1 || int(n) > len(sel.Results) {
			return -1
		}
		return int(n) - 1
	}
	if id, ok := e.(*ast.Ident); ok {
		for i, it := range sel.Results {
			if a, ok := it.(*ast.Alias); ok && strings.EqualFold(a.As.Alias.Name, id.Name) {
				return i
			}
		}
	}
	text := e.SQL()
	for i, it := range sel.Results {
		var x ast.Expr
		switch it := it.(type) {
		case *ast.Alias:
			x = it.Expr
		case *ast.ExprSelectItem:
			x = it.Expr
		}
		if x != nil && x.SQL() == text {
			return i
		}
	}
	return -1
}

// mvIsRowKey reports whether a select item is the table's row key
// unchanged: `_key` or `t._key`, aliased or not.
func mvIsRowKey(it ast.SelectItem) bool {
	var x ast.Expr
	switch it := it.(type) {
	case *ast.Alias:
		x = it.Expr
	case *ast.ExprSelectItem:
		x = it.Expr
	}
	switch x := x.(type) {
	case *ast.Ident:
		return strings.EqualFold(x.Name, "_key")
	case *ast.Path:
		return len(x.Idents) == 2 && strings.EqualFold(x.Idents[1].Name, "_key")
	}
	return false
}
