package server

import (
	"context"
	"slices"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CreateMaterializedView refuses, as Cloud Bigtable does, a query that
// reads a view, a subquery or UNPACK, has LIMIT, or neither groups nor
// orders (or does both); nothing is created.
func TestMaterializedViewQueryRules(t *testing.T) {
	env := newTestEnv(t)
	ctx := context.Background()
	env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	if err := iac.CreateLogicalView(ctx, testInstance, &bigtable.LogicalViewInfo{LogicalViewID: "lv", Query: "SELECT _key, f FROM t"}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"SELECT _key, COUNT(*) AS n FROM lv GROUP BY _key",
		"SELECT _key, COUNT(*) AS n FROM (SELECT _key FROM t) GROUP BY _key",
		"SELECT _key, COUNT(*) AS n FROM UNPACK((SELECT _key, f['q'] AS q FROM t(with_history => TRUE))) GROUP BY _key",
		"SELECT _key, COUNT(*) AS n FROM t GROUP BY _key LIMIT 10",
		"SELECT _key, f['q'] AS q FROM t",
		"SELECT _key, COUNT(*) AS n FROM t GROUP BY _key ORDER BY n",
	} {
		err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv", Query: q})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", q, err)
		}
	}
	if views, err := iac.MaterializedViews(ctx, testInstance); err != nil || len(views) != 0 {
		t.Fatalf("views after refused creations: %v, %v", views, err)
	}
	// The secondary-index form (ORDER BY, not grouped) is accepted.
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "ix",
		Query: "SELECT f['q'] AS _key, _key AS row FROM t ORDER BY f['q']"}); err != nil {
		t.Fatal(err)
	}
}

// A view whose _key is a STRING (Cloud Bigtable's example: `'*' AS _key`,
// grouped by that alias) is maintained, and read with ReadRows and SQL.
func TestMaterializedViewStringKey(t *testing.T) {
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
