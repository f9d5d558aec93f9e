package console_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc/status"
)

// TestConsoleSQLInBrowser runs queries through the console's SQL page in
// headless chromium, against a real server holding data written with the
// official client: the result table holds the rows and types the query
// answers, a bad query shows the RPC's error with its position, and no
// page raises an error.
func TestConsoleSQLInBrowser(t *testing.T) {
	t.Parallel() // its own server and browser tab
	exe := chromiumPath(t)
	e := startServer(t)
	e.fill(t)
	b := newBrowser(t, exe)

	b.visit(t, e.base+"/", "a.tablelink")
	b.do(t, chromedp.Click(chromedp.CSS(`header a[href="/sql"]`)), chromedp.WaitVisible(chromedp.ID("sql-query")))
	if inst := eval[string](t, b, `document.getElementById("sql-instance").value`); inst != instName {
		t.Fatalf("instance selected: %q, want %q", inst, instName)
	}
	run := func(q, sel string) {
		t.Helper()
		// The page shown is marked, so the wait is for the next one.
		eval[bool](t, b, `document.querySelector("main").dataset.stale = "1"; true`)
		b.do(t, chromedp.SetValue(chromedp.ID("sql-query"), q), chromedp.Click(chromedp.ID("sql-run")),
			chromedp.WaitVisible(chromedp.CSS("main:not([data-stale]) "+sel)))
		b.checkErrors(t, "/sql?q="+q)
		if got := eval[string](t, b, `document.getElementById("sql-query").value`); got != q {
			t.Errorf("the box holds %q after the run, want %q", got, q)
		}
	}

	run("SELECT _key, c['n'] AS n, c['none'] AS none FROM clicks WHERE _key >= 'click#02'", "#sql-result")
	heads := eval[[]string](t, b, `[...document.querySelectorAll("#sql-result thead th")].map(th => th.innerText.replace(/\s+/g, " "))`)
	if want := []string{"_key BYTES", "n BYTES", "none BYTES"}; !reflect.DeepEqual(heads, want) {
		t.Errorf("headers %q, want %q", heads, want)
	}
	cells := eval[[][]string](t, b, `[...document.querySelectorAll("#sql-result tbody tr")].map(r => [...r.cells].map(c => c.textContent))`)
	want := [][]string{{"click#02", "2", "NULL"}, {"click#03", "3", "NULL"}, {"click#04", "4", "NULL"}}
	if !reflect.DeepEqual(cells, want) {
		t.Errorf("cells %q, want %q", cells, want)
	}
	if nulls := eval[int](t, b, `document.querySelectorAll("#sql-result td.null").length`); nulls != 3 {
		t.Errorf("%d cells marked NULL, want 3", nulls)
	}
	if s := b.text(t, "#sql-summary"); !strings.HasPrefix(s, "3 rows") {
		t.Errorf("summary %q", s)
	}

	// A map and a BOOL, for the screenshot. user#003 is past the row
	// deletion policy: hidden, as ReadRows hides it.
	run("SELECT _key, cf['click'] AS click, meta AS meta, _key = 'user#002' AS second\nFROM events\nWHERE _key < 'user#005'", "#sql-result")
	if rows := eval[int](t, b, `document.querySelectorAll("#sql-result tbody tr").length`); rows != 4 {
		t.Errorf("%d rows, want 4", rows)
	}
	if text := b.text(t, "#sql-result"); !strings.Contains(text, "MAP<BYTES, BYTES>") || !strings.Contains(text, "{ts: ") || !strings.Contains(text, "page-2-0") || strings.Contains(text, "user#003") {
		t.Errorf("result:\n%s", text)
	}
	screenshot(t, b, "sql")

	// Ctrl+Enter in the box runs the query too.
	eval[bool](t, b, `document.querySelector("main").dataset.stale = "1"; true`)
	b.do(t, chromedp.WaitVisible(chromedp.CSS(`#sql-query[data-ready="1"]`)),
		chromedp.SetValue(chromedp.ID("sql-query"), "SELECT COUNT(*) AS n FROM clicks"),
		chromedp.Focus(chromedp.ID("sql-query")),
		chromedp.KeyEvent("\r", chromedp.KeyModifiers(chromedp.ModifierCtrl)))
	b.do(t, chromedp.WaitVisible(chromedp.CSS(`main:not([data-stale]) #sql-result`)))
	if n := b.text(t, "#sql-result td"); n != "5" {
		t.Errorf("Ctrl+Enter ran the count: %q, want 5", n)
	}
	b.checkErrors(t, "/sql (Ctrl+Enter)")

	// The table pages' SQL tab opens the page with a first query over
	// the table.
	b.visit(t, e.base+"/t/"+project+"/"+instance+"/clicks", "a.sqltab")
	b.do(t, chromedp.Click(chromedp.CSS("a.sqltab")), chromedp.WaitVisible(chromedp.ID("sql-result")))
	b.checkErrors(t, "the SQL tab")
	if q := eval[string](t, b, `document.getElementById("sql-query").value`); q != "SELECT * FROM `clicks` LIMIT 10" {
		t.Errorf("the SQL tab's query: %q", q)
	}
	if rows := eval[int](t, b, `document.querySelectorAll("#sql-result tbody tr").length`); rows != 5 {
		t.Errorf("the SQL tab's query shows %d rows, want 5", rows)
	}

	// A bad query: the error the RPC gives, with its line:column.
	bad := "SELECT _key\nFROM clicks\nWHERE nope = 1"
	_, rpcErr := e.client.PrepareStatement(context.Background(), bad, nil)
	run(bad, "#sql-error")
	msg := b.text(t, "#sql-error")
	if want := "INVALID_ARGUMENT: " + status.Convert(rpcErr).Message(); msg != want || !strings.Contains(msg, "3:7:") {
		t.Errorf("error shown %q, want %q (with 3:7:)", msg, want)
	}
	if n := eval[int](t, b, `document.querySelectorAll("#sql-result").length`); n != 0 {
		t.Errorf("a result table beside the error")
	}
}
