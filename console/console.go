package console

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
)

//go:embed templates/*.html
var templateFS embed.FS

// static holds uPlot (dist/uPlot.iife.min.js, dist/uPlot.min.css and its
// LICENSE, from the npm package uplot 1.6.32) and the console's own script
// and style sheet: nothing is fetched at run time.
//
//go:embed static
var staticFS embed.FS

// Options configures a Console.
type Options struct {
	Engine      Engine
	Collector   Collector
	RowTTL      RowTTL
	Backups     Backups
	Replication Replication
	// Gatherer is sampled into the history the plots draw.
	Gatherer prometheus.Gatherer
	// History bounds the in-memory metric history (its clock defaults to
	// Clock).
	History HistoryOptions
	Clock   clock.Clock
	Logger  *slog.Logger
	// Cluster is this process's cluster id, shown in the header.
	Cluster string
	// Writes enables the actions that change data (a GC pass, a row
	// deletion run). Off, the console only reads.
	Writes bool
	// SQL, when set, serves the SQL page at /sql (a query box; see
	// sql.go) and the pages link to it. The console has no SQL of its
	// own: the server runs the queries.
	SQL SQLRunner
	// Changes, when set, reads the change tail's records (in a cluster:
	// every tablet's, merged in commit order); nil reads this node's
	// engine.
	Changes ChangeTail
}

// Console serves the web console. It is an http.Handler for the HTTP
// port's root.
type Console struct {
	opts    Options
	hist    *History
	mux     *http.ServeMux
	pages   map[string]*template.Template
	started time.Time
}

// New builds a console. Start begins the metric history.
func New(opts Options) (*Console, error) {
	if opts.Engine == nil || opts.Collector == nil || opts.RowTTL == nil || opts.Backups == nil || opts.Gatherer == nil {
		return nil, errors.New("console: Engine, Collector, RowTTL, Backups and Gatherer are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Replication == nil {
		opts.Replication = func(*table.Meta) ReplicationState { return ReplicationState{Cluster: opts.Cluster} }
	}
	if opts.History.Clock == nil {
		opts.History.Clock = opts.Clock
	}
	c := &Console{opts: opts, hist: NewHistory(opts.Gatherer, opts.History), started: opts.Clock.Now()}
	if err := c.parseTemplates(); err != nil {
		return nil, err
	}
	c.routes()
	return c, nil
}

// Start begins sampling the metric history.
func (c *Console) Start() { c.hist.Start() }

// Stop ends the history's sampling.
func (c *Console) Stop() { c.hist.Stop() }

// History is the console's metric history.
func (c *Console) History() *History { return c.hist }

func (c *Console) routes() {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /t/{project}/{instance}/{table}", c.tablePage)
	mux.HandleFunc("GET /t/{project}/{instance}/{table}/gc", c.gcPage)
	mux.HandleFunc("GET /t/{project}/{instance}/{table}/plots.json", c.plotsJSON)
	mux.HandleFunc("GET /t/{project}/{instance}/{table}/rows", c.rowsPage)
	mux.HandleFunc("GET /t/{project}/{instance}/{table}/changes", c.changesPage)
	mux.HandleFunc("GET /t/{project}/{instance}/{table}/changes.json", c.changesJSON)
	mux.HandleFunc("GET /t/{project}/{instance}/{table}/dryrun", c.dryRunPage)
	mux.HandleFunc("POST /t/{project}/{instance}/{table}/gc-run", c.gcRun)
	mux.HandleFunc("POST /t/{project}/{instance}/{table}/ttl-run", c.ttlRun)
	if c.opts.SQL != nil {
		mux.HandleFunc("GET /sql", c.sqlPage)
	}
	c.mux = mux
}

// ServeHTTP serves the console's pages, scripts and JSON.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// The pages load only their own scripts and styles; uPlot sets styles
	// through the DOM, which a style-src policy does not restrict.
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

func (c *Console) parseTemplates() error {
	c.pages = map[string]*template.Template{}
	pages := []string{"overview", "table", "gc", "rows", "changes", "dryrun", "sql", "error"}
	for _, p := range pages {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return fmt.Errorf("console: template %s: %w", p, err)
		}
		c.pages[p] = t
	}
	return nil
}

// page is what every template gets: the layout's fields and the page's own.
type page struct {
	Title   string
	Cluster string
	Now     time.Time
	Writes  bool
	SQL     bool
	// Table, when the page is about one table: its links.
	Table *tableRef
	// Tab names the table page shown, for the tab bar.
	Tab  string
	Data any
}

// tableRef names a table and builds its links.
type tableRef struct {
	Project, Instance, Name string
}

func (t *tableRef) InstanceName() string {
	return "projects/" + t.Project + "/instances/" + t.Instance
}

// Path is the table page's path; Path "gc" its GC page's.
func (t *tableRef) Path(sub ...string) string {
	p := "/t/" + url.PathEscape(t.Project) + "/" + url.PathEscape(t.Instance) + "/" + url.PathEscape(t.Name)
	for _, s := range sub {
		p += "/" + s
	}
	return p
}

func (c *Console) render(w http.ResponseWriter, status int, name string, p page) {
	p.Cluster = c.opts.Cluster
	p.Now = c.opts.Clock.Now().UTC()
	p.Writes = c.opts.Writes
	p.SQL = c.opts.SQL != nil
	var buf bytes.Buffer
	if err := c.pages[name].Execute(&buf, p); err != nil {
		c.opts.Logger.Error("console: render", "page", name, "err", err)
		http.Error(w, "console: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// fail renders the error page.
func (c *Console) fail(w http.ResponseWriter, status int, t *tableRef, err error) {
	c.render(w, status, "error", page{Title: http.StatusText(status), Table: t, Data: err.Error()})
}
