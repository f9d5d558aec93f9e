package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/chromedp/chromedp"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/internal/testkit/servertest"
	"github.com/ebbtable/ebbtable/rowttl"
	"github.com/ebbtable/ebbtable/server"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/metadata"
)

const (
	project  = "proj"
	instance = "inst"
	instName = "projects/" + project + "/instances/" + instance
)

// chromiumPath finds Debian's chromium. Without it the browser tests skip,
// except in CI (CI=true), where a missing browser is a failure: .ci/run
// installs it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed; .ci/run installs it with apt-get install chromium")
	}
	t.Skip("chromium is not installed (apt-get install chromium); the browser tests need it")
	return ""
}

// consoleEnv is a real server (gRPC, Pebble on disk, the HTTP port with
// the console) on loopback, on a fake clock, holding data written through
// the official client.
type consoleEnv struct {
	srv    *server.Server
	clock  *clock.Fake
	base   string
	admin  *bigtable.AdminClient
	client *bigtable.Client
}

func startServer(t *testing.T) *consoleEnv {
	t.Helper()
	env := servertest.Start(t, servertest.WithOptions(func(o *server.Options) {
		o.HTTPAddr, o.ClusterID, o.ConsoleWrites = "127.0.0.1:0", "c1", true
		o.GC = collector.Options{Interval: time.Hour}
	}))
	return &consoleEnv{srv: env.Srv, clock: env.Clock, base: "http://" + env.Srv.HTTPAddr(), admin: env.Admin, client: env.Client}
}

// fill writes the data the pages show: a table "events" with a GC rule, a
// row deletion policy, a change stream and a backup, holding expired,
// superseded and live cells; and a plain table "clicks".
func (e *consoleEnv) fill(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	rule := bigtable.UnionPolicy(bigtable.MaxAgePolicy(10*24*time.Hour), bigtable.MaxVersionsPolicy(2))
	if err := e.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "events", ChangeStreamRetention: 24 * time.Hour,
		ColumnFamilies: map[string]bigtable.Family{"cf": {GCPolicy: rule}, "meta": {GCPolicy: bigtable.MaxVersionsPolicy(1)}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.CreateTable(ctx, "clicks"); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.CreateColumnFamily(ctx, "clicks", "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := rowttl.Exec(e.srv.Engine(), instName, "ALTER TABLE events ADD ROW DELETION POLICY (OLDER_THAN(`meta:ts`, INTERVAL 30 DAY))"); err != nil {
		t.Fatal(err)
	}
	e.write(t, 0)
	clicks := e.client.Open("clicks")
	for i := range 5 {
		m := bigtable.NewMutation()
		m.Set("c", "n", bigtable.ServerTime, []byte(fmt.Sprint(i)))
		if err := clicks.Apply(ctx, fmt.Sprintf("click#%02d", i), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.admin.CreateBackup(ctx, "events", "c1", "nightly", e.clock.Now().Add(7*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// write puts a round of cells into events: per user a new version of
// cf:click (older ones fall to versions() > 2), an old cell (age), one
// with a one-minute native TTL, and a row timestamp; some rows are past
// the row deletion policy.
func (e *consoleEnv) write(t *testing.T, round int) {
	t.Helper()
	ctx := context.Background()
	tbl := e.client.Open("events")
	now := e.clock.Now()
	old := bigtable.Time(now.Add(-20 * 24 * time.Hour))
	ttlCtx := metadata.AppendToOutgoingContext(ctx, server.MetaCellTTL, "1m")
	for i := range 12 {
		row := fmt.Sprintf("user#%03d", i)
		m := bigtable.NewMutation()
		m.Set("cf", "click", bigtable.Time(now.Add(time.Duration(round)*time.Second)), []byte(fmt.Sprintf("page-%d-%d", i, round)))
		m.Set("cf", "old", old-bigtable.Timestamp(round*1000), []byte("from last month"))
		ts := now.Add(-time.Duration(i) * 24 * time.Hour)
		if i%4 == 3 {
			ts = now.Add(-45 * 24 * time.Hour) // expired by the policy
		}
		m.Set("meta", "ts", bigtable.ServerTime, []byte(ts.UTC().Format(time.RFC3339)))
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
		s := bigtable.NewMutation()
		s.Set("cf", "session", bigtable.ServerTime, []byte("short-lived"))
		if err := tbl.Apply(ttlCtx, row, s); err != nil {
			t.Fatal(err)
		}
	}
}

// post sends a form POST the way the page's button does.
func (e *consoleEnv) post(t *testing.T, path string) {
	t.Helper()
	resp, err := http.PostForm(e.base+path, url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK { // after the redirect to the table page
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, body)
	}
}

// history builds a few minutes of history: rounds of writes, time passing,
// GC passes and row deletion runs (each action also takes a sample).
func (e *consoleEnv) history(t *testing.T) {
	t.Helper()
	tp := "/t/" + project + "/" + instance + "/events"
	e.post(t, tp+"/ttl-run")
	for round := 1; round <= 4; round++ {
		e.write(t, round)
		e.clock.Advance(30 * time.Second)
		e.post(t, tp+"/gc-run")
	}
	e.clock.Advance(45 * time.Second) // the one-minute TTL cells of the last round expire
	e.post(t, tp+"/ttl-run")
	e.write(t, 5) // its expired rows wait, hidden, for the next run
	e.post(t, "/t/"+project+"/"+instance+"/clicks/gc-run")
}

// browser is headless chromium, collecting every exception, console error
// and browser-log error (a failed load, a refused script) any page raises.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

// One Chromium serves every browser test of the package (starting it is
// the costly part: about a CPU-second under -race load): each test gets its
// own tab in its own browser context (no cookies, storage or cache shared),
// closed when the test ends. TestMain closes the browser.
var chromium struct {
	once   sync.Once
	ctx    context.Context // the browser's first tab, kept open
	cancel func()
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if chromium.cancel != nil {
		chromium.cancel()
	}
	os.Exit(code)
}

// startChromium starts the shared browser once.
func startChromium(exe string) (context.Context, error) {
	chromium.once.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(exe),
			chromedp.NoSandbox, // CI runs as root
			chromedp.DisableGPU,
			chromedp.WindowSize(1100, 750),
			chromedp.Flag("disable-dev-shm-usage", true),
			// Tests talk to loopback only: Chromium resolves no host name but
			// the loopback ones, and does not probe for DNS over HTTPS, update
			// components or fetch field trials.
			chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1"),
			// The last three cost CPU and no test uses them: headless Chromium
			// still loads the address bar's WebUI popups (two renderers per
			// window, that is per browser context: about 2 CPU-s at start and
			// one per test), and it keeps a spare renderer started for the next
			// navigation (the package's tests started 21 renderers, 5 without).
			// Pages still run in a renderer of their own browser context.
			chromedp.Flag("disable-features", "DnsOverHttps,OptimizationHints,MediaRouter,Translate,AutofillServerCommunication,CertificateTransparencyComponentUpdater,"+
				"WebUIOmniboxPopup,WebUIOmniboxAimPopup,SpareRendererForSitePerProcess"),
			chromedp.Flag("dns-over-https-mode", "off"),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-domain-reliability", true),
			chromedp.Flag("disable-field-trial-config", true),
			chromedp.Flag("no-pings", true),
		)
		actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelC := chromedp.NewContext(actx)
		chromium.ctx, chromium.cancel = ctx, func() { cancelC(); cancelA() }
		chromium.err = chromedp.Do(ctx, chromedp.Navigate("about:blank"))
	})
	return chromium.ctx, chromium.err
}

func newBrowser(t *testing.T, exe string) *browser {
	t.Helper()
	root, err := startChromium(exe)
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := chromedp.NewContext(root, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	b := &browser{ctx: ctx}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				b.mu.Lock()
				b.errors = append(b.errors, m.String())
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// do runs steps with a time limit.
func (b *browser) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates a script on the page shown.
func eval[T any](t *testing.T, b *browser, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

// text is the text of the first element sel matches.
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return v
}

// visit loads a page and waits for sel to show, then fails on any error
// the page raised by then.
func (b *browser) visit(t *testing.T, u, sel string) {
	t.Helper()
	b.mu.Lock()
	b.errors = nil
	b.mu.Unlock()
	b.do(t, chromedp.Navigate(u), chromedp.WaitVisible(chromedp.CSS(sel)))
	b.checkErrors(t, u)
}

func (b *browser) checkErrors(t *testing.T, u string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errors) > 0 {
		t.Fatalf("%s raised errors:\n%s", u, strings.Join(b.errors, "\n"))
	}
}

// links returns the links of the page shown.
func (b *browser) links(t *testing.T) []string {
	t.Helper()
	return eval[[]string](t, b, `[...document.querySelectorAll("a[href]")].map(a => a.getAttribute("href"))`)
}

func screenshot(t *testing.T, b *browser, name string) {
	t.Helper()
	dir := os.Getenv("CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "console-"+name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestConsoleInBrowser loads every page of the console in headless
// chromium against a real server holding data: no page raises an
// exception or a console error, the plots draw the history, the row
// browser marks hidden cells, the change-stream tail fills, the dry runs
// answer, and every link on the pages resolves.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel() // its own server and browser tab
	exe := chromiumPath(t)
	e := startServer(t)
	e.fill(t)
	e.history(t)
	b := newBrowser(t, exe)
	tp := e.base + "/t/" + project + "/" + instance + "/events"

	seen := map[string]bool{}
	var hrefs []string
	collect := func() {
		for _, h := range b.links(t) {
			if !seen[h] {
				seen[h] = true
				hrefs = append(hrefs, h)
			}
		}
	}

	// Overview: both tables, and the link to one works.
	b.visit(t, e.base+"/", "a.tablelink")
	text := b.text(t, "main")
	for _, want := range []string{"events", "clicks", "OLDER_THAN(`meta:ts`, INTERVAL 30 DAY)", "on, 24h0m0s"} {
		if !strings.Contains(text, want) {
			t.Errorf("overview lacks %q:\n%s", want, text)
		}
	}
	screenshot(t, b, "overview")
	collect()
	b.do(t, chromedp.Click(chromedp.CSS(`a.tablelink[href$="/events"]`)), chromedp.WaitVisible(chromedp.CSS("h1")))
	if h1 := b.text(t, "h1"); h1 != "events" {
		t.Fatalf("the table link led to %q", h1)
	}

	// Table page: rules as cbt writes them, the policy, stream, backup.
	b.visit(t, tp, "h1")
	text = b.text(t, "main")
	for _, want := range []string{"(age() > 10d || versions() > 2)", "OLDER_THAN(`meta:ts`, INTERVAL 30 DAY)", "retention 24h0m0s", "backups/nightly", "this cluster c1", "watermark 20"} {
		if !strings.Contains(text, want) {
			t.Errorf("table page lacks %q:\n%s", want, text)
		}
	}
	screenshot(t, b, "table")
	collect()

	// GC and TTL plots: a canvas per plot, each with the history's points,
	// and lines in the ones this history must have fed.
	b.visit(t, tp+"/gc", `#plots[data-ready="1"]`)
	plots := eval[int](t, b, `document.querySelectorAll("#plots .plot").length`)
	canvases := eval[int](t, b, `document.querySelectorAll("#plots .plot canvas").length`)
	points := eval[map[string]string](t, b, `Object.fromEntries([...document.querySelectorAll("#plots .plot")].map(p => [p.id, p.dataset.points]))`)
	lines := eval[map[string]string](t, b, `Object.fromEntries([...document.querySelectorAll("#plots .plot")].map(p => [p.id, p.dataset.lines]))`)
	if plots != 12 || canvases < plots {
		t.Fatalf("%d plots, %d canvases; want 12 plots with a canvas each", plots, canvases)
	}
	for id, n := range points {
		if n == "" || n == "0" || n == "1" {
			t.Errorf("plot %s has %s points", id, n)
		}
	}
	for _, id := range []string{"debt-cells", "collected-cells", "collected-bytes", "pass-duration", "next-pass", "age-cutoff", "size", "ttl-watermark", "ttl-deleted", "ttl-next"} {
		if lines["plot-"+id] == "" || lines["plot-"+id] == "0" {
			t.Errorf("plot %s drew no line (lines %v)", id, lines)
		}
	}
	screenshot(t, b, "gc")
	if os.Getenv("CONSOLE_SCREENSHOTS") != "" {
		b.do(t, chromedp.ScrollIntoView(chromedp.ID("plot-age-cutoff")))
		screenshot(t, b, "gc-ttl")
	}
	collect()

	// Rows: visible cells, then hidden ones marked.
	b.visit(t, tp+"/rows", "table.rows")
	text = b.text(t, "main")
	if !strings.Contains(text, "user#000") || strings.Contains(text, "hidden:") {
		t.Errorf("row browser without hidden cells:\n%.2000s", text)
	}
	b.visit(t, tp+"/rows?prefix=user%23&limit=5&hidden=1", "table.rows")
	hidden := eval[int](t, b, `document.querySelectorAll("tr.hidden").length`)
	text = b.text(t, "main")
	if hidden == 0 || !strings.Contains(text, "hidden: GC: versions") || !strings.Contains(text, "hidden: row deletion policy") {
		t.Errorf("row browser marks %d hidden cells:\n%.1500s", hidden, text)
	}
	screenshot(t, b, "rows")
	collect()
	next := eval[string](t, b, `document.getElementById("next-page").href`)
	b.visit(t, next, "table.rows")
	text = b.text(t, "table.rows")
	if !strings.Contains(text, "user#006") || strings.Contains(text, "user#000") {
		t.Errorf("the next page of rows (%s):\n%.1000s", next, text)
	}

	// Change stream: the tail fills with the writes and the collector's
	// and the row deletion job's records.
	b.visit(t, tp+"/changes", `#tail[data-polled="1"]`)
	records := eval[int](t, b, `document.querySelectorAll("#tail tbody tr").length`)
	text = b.text(t, "#tail")
	if records == 0 || !strings.Contains(text, "GARBAGE_COLLECTION") || !strings.Contains(text, "RowDeletionPolicy") {
		t.Errorf("tail shows %d records:\n%.2000s", records, text)
	}
	// A new write shows up live.
	e.write(t, 6)
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`document.querySelectorAll("#tail tbody tr").length > `+fmt.Sprint(records),
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Errorf("the tail did not show a new write: %v", err)
	}
	b.checkErrors(t, tp+"/changes")
	if os.Getenv("CONSOLE_SCREENSHOTS") != "" {
		b.do(t, chromedp.ScrollIntoView(chromedp.CSS("tr.system")))
		screenshot(t, b, "changes")
	}
	collect()

	// Dry runs.
	b.visit(t, tp+"/dryrun?family=cf&rule="+url.QueryEscape("maxversions=1")+"&policy="+url.QueryEscape("OLDER_THAN(`meta:ts`, INTERVAL 2 DAY)"),
		"#gc-result")
	text = b.text(t, "main")
	if !strings.Contains(text, "versions() > 1") || !strings.Contains(text, "would delete") || !strings.Contains(text, "rows now") {
		t.Errorf("dry run:\n%s", text)
	}
	screenshot(t, b, "dryrun")
	collect()
	b.visit(t, tp+"/dryrun?family=cf&rule="+url.QueryEscape("maxage=banana"), ".error")

	// Every link met on the way resolves.
	for _, h := range hrefs {
		u, err := url.Parse(h)
		if err != nil {
			t.Errorf("link %q: %v", h, err)
			continue
		}
		if u.Host != "" {
			t.Errorf("link %q leaves the console", h)
			continue
		}
		resp, err := http.Get(e.base + resolve(tp, h))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("link %s: %d", h, resp.StatusCode)
		}
	}
	if len(hrefs) < 10 {
		t.Errorf("only %d links checked: %v", len(hrefs), hrefs)
	}

	// A form posted from another site is refused, writes on or not.
	req, _ := http.NewRequest("POST", tp+"/gc-run", nil)
	req.Header.Set("Origin", "http://elsewhere.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site POST: %d, want 403", resp.StatusCode)
	}
}

// resolve turns a page's href into a path (the pages link absolutely or
// with a query of the current page).
func resolve(page, href string) string {
	base, _ := url.Parse(page)
	ref, _ := url.Parse(href)
	return base.ResolveReference(ref).RequestURI()
}

// TestConsoleReadOnly: without --console-writes the actions are refused
// and their buttons absent.
func TestConsoleReadOnly(t *testing.T) {
	fake := clock.NewFake(time.Now())
	srv, err := server.New(server.Options{Addr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DataDir: t.TempDir(), Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := srv.Engine().CreateTable(instName, "t", table.TableSpec{}); err != nil {
		t.Fatal(err)
	}
	base := "http://" + srv.HTTPAddr() + "/t/" + project + "/" + instance + "/t"
	resp, err := http.PostForm(base+"/gc-run", url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("gc-run on a read-only console: %d", resp.StatusCode)
	}
	resp, err = http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(body), "gc-run") || !strings.Contains(string(body), "read-only") {
		t.Fatalf("read-only table page (%d):\n%s", resp.StatusCode, body)
	}
}
