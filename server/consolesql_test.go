package server

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/console"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// sqlPage fetches the console's SQL page for a query, through the
// console's handler.
func sqlPage(t *testing.T, env *testEnv, q string) string {
	t.Helper()
	u := "/sql?instance=" + url.QueryEscape("projects/"+testProject+"/instances/"+testInstance) + "&q=" + url.QueryEscape(q)
	rec := httptest.NewRecorder()
	env.srv.console.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, u, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", u, rec.Code, body)
	}
	return string(body)
}

// TestConsoleSQLPage: the console's SQL page shows what the SQL RPC
// answers, rows capped at console.SQLRowCap, values escaped (a value
// holding <script> is text), NULLs marked, bytes that are not text
// escaped, and a bad query's error with the RPC's own INVALID_ARGUMENT
// text and position.
func TestConsoleSQLPage(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, func(o *Options) { o.HTTPAddr = "127.0.0.1:0" })
	env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": bigtable.NoGcPolicy()})
	ctx := context.Background()
	tbl := env.client.Open("t")
	n := console.SQLRowCap + 5
	keys := make([]string, n)
	muts := make([]*bigtable.Mutation, n)
	for i := range n {
		keys[i] = fmt.Sprintf("r%05d", i)
		m := bigtable.NewMutation()
		v := fmt.Sprintf("v%d", i)
		switch i {
		case 0:
			v = `<script>alert("x")</script>`
		case 1:
			v = "\x00\xff"
		}
		m.Set("cf", "v", bigtable.ServerTime, []byte(v))
		if i != 2 {
			m.Set("cf", "w", bigtable.ServerTime, []byte("w"))
		}
		muts[i] = m
	}
	errs, err := tbl.ApplyBulk(ctx, keys, muts)
	if err != nil || errs != nil {
		t.Fatalf("ApplyBulk: %v %v", err, errs)
	}

	// Over the cap: the first SQLRowCap rows, and the page says so.
	body := sqlPage(t, env, "SELECT _key, cf['v'] AS v FROM t")
	if got := strings.Count(body, "<tr><td"); got != console.SQLRowCap {
		t.Errorf("%d rows shown, want %d", got, console.SQLRowCap)
	}
	if !strings.Contains(body, "1,000 rows: <b>the first 1,000</b>, the result has more") {
		t.Errorf("the page does not say the cap was reached:\n%.3000s", body)
	}
	if strings.Contains(body, "<script>alert") || !strings.Contains(body, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;") {
		t.Errorf("the <script> value is not escaped:\n%.3000s", body)
	}
	if !strings.Contains(body, `b&#34;\x00\xff&#34;`) {
		t.Errorf("binary bytes not shown escaped:\n%.3000s", body)
	}
	for _, want := range []string{"<th>_key<br><span class=\"coltype mono\">BYTES</span></th>", "<th>v<br><span class=\"coltype mono\">BYTES</span></th>", "r01004"} {
		if want == "r01004" {
			if strings.Contains(body, want) {
				t.Errorf("a row past the cap is shown")
			}
			continue
		}
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}

	// Under the cap: all rows, no note; NULL marked; a map compact.
	body = sqlPage(t, env, "SELECT _key, cf['w'] AS w, cf AS fam FROM t WHERE _key <= 'r00002'")
	if got := strings.Count(body, "<tr><td"); got != 3 || strings.Contains(body, "the first") || !strings.Contains(body, "3 rows") {
		t.Errorf("%d rows shown:\n%s", got, body)
	}
	if !strings.Contains(body, `<td class="val mono null">NULL</td>`) {
		t.Errorf("the NULL is not marked:\n%s", body)
	}
	if !strings.Contains(body, "{v: v2, w: w}") && !strings.Contains(body, "{v: v2}") {
		t.Errorf("the family map is not shown compactly:\n%s", body)
	}
	if !strings.Contains(body, "MAP&lt;BYTES, BYTES&gt;") {
		t.Errorf("the map column's type is missing:\n%s", body)
	}

	// A bad query: the RPC's error, position included.
	bad := "SELECT _key\nFROM t\nWHERE nope"
	_, rpcErr := env.client.PrepareStatement(ctx, bad, nil)
	st := status.Convert(rpcErr)
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "3:7:") {
		t.Fatalf("PrepareStatement(%q): %v", bad, rpcErr)
	}
	body = sqlPage(t, env, bad)
	if want := html.EscapeString("INVALID_ARGUMENT: " + st.Message()); !strings.Contains(body, `<p class="error mono" id="sql-error">`+want+`</p>`) {
		t.Errorf("the page's error is not the RPC's %q:\n%s", want, body)
	}
	// An instance without tables stays selected, and the query says why
	// it finds nothing.
	rec := httptest.NewRecorder()
	env.srv.console.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/sql?instance=projects/proj/instances/other&q=SELECT+_key+FROM+t", nil))
	if other := rec.Body.String(); !strings.Contains(other, `<option value="projects/proj/instances/other" selected>`) ||
		!strings.Contains(other, "INVALID_ARGUMENT: 1:18: table or view not found: t") {
		t.Errorf("another instance:\n%s", other)
	}
	// The query is kept in the box.
	if !strings.Contains(body, ">\nSELECT _key\nFROM t\nWHERE nope</textarea>") {
		t.Errorf("the query is not kept in the box:\n%s", body)
	}
}
