package server

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/sqlquery"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestMaterializedViewQueryRules runs the corpus testdata/mviewrules.txt
// through the official admin client: each query Cloud Bigtable accepts
// creates a view with the row key columns the corpus gives; each it
// refuses is answered INVALID_ARGUMENT with the corpus's message and
// creates nothing.
func TestMaterializedViewQueryRules(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/mviewrules.txt")
	if err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	ctx := context.Background()
	env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy(), "g": bigtable.NoGcPolicy()})
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	if err := iac.CreateLogicalView(ctx, testInstance, &bigtable.LogicalViewInfo{LogicalViewID: "lv", Query: "SELECT _key, f FROM t"}); err != nil {
		t.Fatal(err)
	}
	accepted, refused := 0, 0
	for _, block := range strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n\n") {
		var lines []string
		for _, l := range strings.Split(block, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
		if len(lines) == 0 {
			continue
		}
		if len(lines) < 2 {
			t.Fatalf("corpus block without a query: %q", block)
		}
		head, q := lines[0], strings.Join(lines[1:], " ")
		id := fmt.Sprintf("mv%d", accepted+refused)
		err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: id, Query: q})
		switch {
		case strings.HasPrefix(head, "accept key="):
			accepted++
			if err != nil {
				t.Errorf("%s: %v, want accepted", q, err)
				continue
			}
			plan, err := sqlquery.Prepare(env.srv.tableCatalog(sqlInstance), q, nil)
			if err != nil {
				t.Fatal(err)
			}
			key, err := plan.MaterializedKey(q)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, i := range key {
				names = append(names, plan.Columns[i].Name)
			}
			if got, want := strings.Join(names, ","), strings.TrimPrefix(head, "accept key="); got != want {
				t.Errorf("%s: row key %s, want %s", q, got, want)
			}
		case strings.HasPrefix(head, "refuse "):
			refused++
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), strings.TrimPrefix(head, "refuse ")) {
				t.Errorf("%s: %v, want INVALID_ARGUMENT with %q", q, err, strings.TrimPrefix(head, "refuse "))
			}
		default:
			t.Fatalf("corpus block head %q: want accept or refuse", head)
		}
	}
	views, err := iac.MaterializedViews(ctx, testInstance)
	if err != nil || len(views) != accepted {
		t.Fatalf("%d views after %d accepted and %d refused creations: %v", len(views), accepted, refused, err)
	}
	if refused < 30 || accepted < 10 {
		t.Fatalf("corpus read %d accepted and %d refused queries; want the whole file", accepted, refused)
	}
}

// A view whose _key is a STRING (Cloud Bigtable's example: `'*' AS _key`,
// grouped by that alias) is maintained, and read with ReadRows and SQL.
func TestMaterializedViewStringKey(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "foo", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	for _, k := range []string{"a", "b", "c"} {
		m := bigtable.NewMutation()
		m.Set("f", "q", 1000, []byte("v"))
		if err := tbl.Apply(ctx, k, m); err != nil {
			t.Fatal(err)
		}
	}
	const query = "SELECT '*' AS _key, COUNT(*) AS count FROM foo GROUP BY _key"
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv", Query: query}); err != nil {
		t.Fatal(err)
	}
	if env.srv.planMaint(sqlInstance, "mv", query) == nil {
		t.Fatal("a view with a STRING _key is not maintained")
	}
	m := bigtable.NewMutation()
	m.DeleteRow()
	if err := tbl.Apply(ctx, "b", m); err != nil {
		t.Fatal(err)
	}
	got, err := sqlRows(t, env.client, "SELECT _key, count FROM mv")
	if err != nil || !slices.Equal(got, []string{"*|2"}) {
		t.Fatalf("SQL: %q, %v; want *|2", got, err)
	}
	var rows []string
	if err := env.client.OpenMaterializedView("mv").ReadRows(ctx, bigtable.RowRange{}, func(r bigtable.Row) bool {
		for _, it := range r["default"] {
			if it.Column == "default:count" {
				rows = append(rows, r.Key()+"="+string(rune('0'+it.Value[7])))
			}
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rows, []string{"*=2"}) {
		t.Fatalf("ReadRows: %q, want *=2", rows)
	}
}
