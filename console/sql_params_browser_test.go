package console_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestConsoleSQLParamsInBrowser gives a query typed @parameters on the
// SQL page in headless chromium: rows added with "+ parameter", each a
// name, a type and a value; the result uses them, the form keeps them
// (and one empty row) after the run, and a value that is not of its type
// is refused with the parameter's name.
func TestConsoleSQLParamsInBrowser(t *testing.T) {
	t.Parallel() // its own server and browser tab
	exe := chromiumPath(t)
	e := startServer(t)
	e.fill(t)
	b := newBrowser(t, exe)
	b.visit(t, e.base+"/sql", "#sql-query[data-ready='1']")
	if n := eval[int](t, b, `document.querySelectorAll("#sql-params .sqlparam").length`); n != 1 {
		t.Fatalf("%d parameter rows on a fresh page, want 1", n)
	}
	b.do(t, chromedp.Click(chromedp.ID("sql-addparam")), chromedp.Click(chromedp.ID("sql-addparam")))
	if n := eval[int](t, b, `document.querySelectorAll("#sql-params .sqlparam").length`); n != 3 {
		t.Fatalf("%d parameter rows after two adds, want 3", n)
	}
	// Fill row i with name, type, value.
	set := func(i int, name, typ, value string) {
		t.Helper()
		eval[bool](t, b, `(function () {
			var r = document.querySelectorAll("#sql-params .sqlparam")[`+itoa(i)+`];
			r.querySelector(".sql-pname").value = `+jsq(name)+`;
			r.querySelector(".sql-ptype").value = `+jsq(typ)+`;
			r.querySelector(".sql-pvalue").value = `+jsq(value)+`;
			return true; })()`)
	}
	run := func(q, sel string) {
		t.Helper()
		eval[bool](t, b, `document.querySelector("main").dataset.stale = "1"; true`)
		b.do(t, chromedp.SetValue(chromedp.ID("sql-query"), q), chromedp.Click(chromedp.ID("sql-run")),
			chromedp.WaitVisible(chromedp.CSS("main:not([data-stale]) "+sel)))
		b.checkErrors(t, "/sql with parameters: "+q)
	}
	set(0, "from", "STRING", "click#03")
	set(1, "@n", "INT64", "41")
	set(2, "on", "BOOL", "true")
	const q = "SELECT _key, @n + 1 AS m, @on AS flag FROM clicks WHERE _key >= @from"
	run(q, "#sql-result")
	heads := eval[[]string](t, b, `[...document.querySelectorAll("#sql-result thead th")].map(th => th.innerText.replace(/\s+/g, " "))`)
	if want := []string{"_key BYTES", "m INT64", "flag BOOL"}; !reflect.DeepEqual(heads, want) {
		t.Errorf("headers %q, want %q", heads, want)
	}
	cells := eval[[][]string](t, b, `[...document.querySelectorAll("#sql-result tbody tr")].map(r => [...r.cells].map(c => c.textContent))`)
	if want := [][]string{{"click#03", "42", "true"}, {"click#04", "42", "true"}}; !reflect.DeepEqual(cells, want) {
		t.Errorf("cells %q, want %q", cells, want)
	}
	// The form keeps the parameters, and one empty row.
	kept := eval[[]string](t, b, `[...document.querySelectorAll("#sql-params .sqlparam")].map(r =>
		r.querySelector(".sql-pname").value + "|" + r.querySelector(".sql-ptype").value + "|" + r.querySelector(".sql-pvalue").value)`)
	if want := []string{"from|STRING|click#03", "n|INT64|41", "on|BOOL|true", "|STRING|"}; !reflect.DeepEqual(kept, want) {
		t.Errorf("parameter rows after the run %q, want %q", kept, want)
	}
	screenshot(t, b, "sql-params")

	// A value that is not of its type.
	set(1, "n", "INT64", "forty-one")
	run(q, "#sql-error")
	if msg := b.text(t, "#sql-error"); !strings.HasPrefix(msg, "INVALID_ARGUMENT: parameter @n: not an INT64") {
		t.Errorf("error shown %q", msg)
	}
	// A parameter the query uses but the form does not give.
	set(1, "", "INT64", "")
	run(q, "#sql-error")
	if msg := b.text(t, "#sql-error"); !strings.Contains(msg, "INVALID_ARGUMENT") || !strings.Contains(msg, "@n") {
		t.Errorf("error shown for a missing parameter %q", msg)
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

// jsq quotes s as a JavaScript string literal.
func jsq(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
}
