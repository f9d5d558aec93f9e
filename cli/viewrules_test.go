package cli

import (
	"context"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestMaterializedViewRules: serve --materialized-view-rules any accepts a
// materialized view Cloud Bigtable refuses (a whole-table aggregate, no
// GROUP BY), and reads its values as writes come; by default the same query is
// INVALID_ARGUMENT; a bad value is a usage error.
func TestMaterializedViewRules(t *testing.T) {
	t.Parallel()
	r := ebbtable(t, "serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", t.TempDir(), "--materialized-view-rules", "lax")
	wantFailure(t, "bad rules", r, 2, `--materialized-view-rules "lax": want bigtable or any`)

	const query = "SELECT COUNT(*) AS n, SUM(CAST(CAST(cf['v'] AS STRING) AS INT64)) AS total FROM t"
	ctx := context.Background()
	for _, rules := range []string{"bigtable", "any"} {
		srv := startServe(t, "serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", t.TempDir(), "--materialized-view-rules", rules)
		client, admin := officialClients(t, srv.addr)
		if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{
			"cf": {GCPolicy: bigtable.NoGcPolicy()}}}); err != nil {
			t.Fatal(err)
		}
		iac := testkit.InstanceAdmin(t, srv.addr, testProject)
		err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "totals", Query: query})
		if rules == "bigtable" {
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("rules bigtable: CreateMaterializedView: %v, want INVALID_ARGUMENT", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("rules any: CreateMaterializedView: %v", err)
		}
		tbl := client.Open("t")
		for i, v := range []string{"3", "4", "5"} {
			m := bigtable.NewMutation()
			m.Set("cf", "v", 1000, []byte(v))
			if err := tbl.Apply(ctx, "r"+v, m); err != nil {
				t.Fatal(err)
			}
			got := ebbtable(t, "sql", "SELECT n, total FROM totals", "--addr", srv.addr, "--project", testProject, "--instance", testInstance).mustSucceed(t, "sql")
			want := []string{"1  3", "2  7", "3  12"}[i]
			if lines := strings.Split(strings.TrimSpace(got.stdout), "\n"); lines[len(lines)-1] != want {
				t.Errorf("after %d writes the view reads %q, want %q", i+1, got.stdout, want)
			}
		}
	}
}
