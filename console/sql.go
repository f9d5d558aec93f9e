package console

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/ebbtable/ebbtable/sqlquery"
)

// The SQL page: a query box over one instance. The server plans and runs
// the query through the same code as the data API's ExecuteQuery (the
// console holds no SQL of its own), and the page shows the result as a
// table, up to SQLRowCap rows.

// SQLRowCap is how many rows the SQL page shows; it says when a result
// had more.
const SQLRowCap = 1000

// SQLRunner runs Bigtable SQL as the data API does.
type SQLRunner interface {
	// Query plans query against instance ("projects/P/instances/I")
	// with its parameters. Its error reads as the RPC's status does:
	// "INVALID_ARGUMENT: …" with the line:column of a bad query.
	Query(ctx context.Context, instance, query string, params []SQLParam) (SQLQuery, error)
	// ParamTypes are the types a parameter can be given as text.
	ParamTypes() []string
}

// SQLParam is a query parameter as the page's form gives it: @Name, of
// type Type, Value as text.
type SQLParam struct{ Name, Type, Value string }

// SQLQuery is a planned query.
type SQLQuery struct {
	Columns []sqlquery.Column
	// Run streams the rows to fn, stopping when fn returns an error.
	// Its own errors read as Query's do.
	Run func(ctx context.Context, fn func(row []sqlquery.Value) error) error
}

type sqlColumn struct{ Name, Type string }

// sqlCell is a value as the page prints it (sqlquery.Format, as
// `ebbtable sql` prints it); Null marks a NULL.
type sqlCell struct {
	Text string
	Null bool
}

type sqlData struct {
	Instances []string
	Instance  string
	Tables    []string
	Query     string
	// Params are the parameters given, then an empty row to add one.
	Params     []SQLParam
	ParamTypes []string
	Ran        bool
	Columns    []sqlColumn
	Rows       [][]sqlCell
	Cap        int64
	Count      int64
	Capped     bool
	Err        string
	Took       time.Duration
}

// errRowCap stops a run at the row cap.
type errRowCap struct{}

func (errRowCap) Error() string { return "console: row cap reached" }

func (c *Console) sqlPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := sqlData{Instance: q.Get("instance"), Query: q.Get("q"), Cap: SQLRowCap, ParamTypes: c.opts.SQL.ParamTypes()}
	names, types, values := q["pn"], q["pt"], q["pv"]
	for i, n := range names {
		n = strings.TrimPrefix(strings.TrimSpace(n), "@")
		if n == "" {
			continue
		}
		p := SQLParam{Name: n, Type: "STRING"}
		if i < len(types) {
			p.Type = types[i]
		}
		if i < len(values) {
			p.Value = values[i]
		}
		d.Params = append(d.Params, p)
	}
	tables := map[string][]string{}
	for _, m := range c.opts.Engine.Tables("") {
		tables[m.Instance] = append(tables[m.Instance], m.Name)
	}
	for inst := range tables {
		d.Instances = append(d.Instances, inst)
	}
	if d.Instance != "" && tables[d.Instance] == nil {
		// An instance without tables, or a wrong name: the query's error
		// will say which.
		d.Instances = append(d.Instances, d.Instance)
	}
	sort.Strings(d.Instances)
	if d.Instance == "" && len(d.Instances) > 0 {
		d.Instance = d.Instances[0]
	}
	d.Tables = tables[d.Instance]
	sort.Strings(d.Tables)
	if strings.TrimSpace(d.Query) != "" && d.Instance != "" {
		d.Ran = true
		start := c.opts.Clock.Now()
		c.runSQL(r.Context(), &d)
		d.Took = c.opts.Clock.Now().Sub(start)
	}
	d.Params = append(d.Params, SQLParam{Type: "STRING"}) // a row to add one
	c.render(w, http.StatusOK, "sql", page{Title: "SQL", Tab: "sql", Data: d})
}

// runSQL runs d.Query, filling in the columns and up to d.Cap rows, or
// the error.
func (c *Console) runSQL(ctx context.Context, d *sqlData) {
	pq, err := c.opts.SQL.Query(ctx, d.Instance, d.Query, d.Params)
	if err != nil {
		d.Err = err.Error()
		return
	}
	for _, col := range pq.Columns {
		d.Columns = append(d.Columns, sqlColumn{Name: col.Name, Type: col.Type.String()})
	}
	err = pq.Run(ctx, func(row []sqlquery.Value) error {
		if int64(len(d.Rows)) == d.Cap {
			d.Capped = true
			return errRowCap{}
		}
		cells := make([]sqlCell, len(row))
		for i, v := range row {
			cells[i] = sqlCell{Text: sqlquery.Format(v), Null: v == nil}
		}
		d.Rows = append(d.Rows, cells)
		d.Count++
		return nil
	})
	if err != nil && !d.Capped {
		d.Err = err.Error()
	}
}

// SQLPath is the SQL page's path with a first query over the table.
func (t *tableRef) SQLPath() string {
	return "/sql?instance=" + url.QueryEscape(t.InstanceName()) + "&q=" + url.QueryEscape("SELECT * FROM `"+t.Name+"` LIMIT 10")
}
