package server

import (
	"context"
	"testing"

	"cloud.google.com/go/bigtable"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

// PrepareQuery and ExecuteQuery follow app-profile routing as reads do:
// through a single-cluster profile naming b, a query sent to a reads b's
// rows.
func TestRoutingSQL(t *testing.T) {
	t.Parallel()
	nodes, _ := startClusters(t, "a", "b")
	a, b := nodes["a"], nodes["b"]
	ctx := context.Background()
	if err := b.tbl.Apply(ctx, "only-on-b", setCell("c", "v")); err != nil {
		t.Fatal(err)
	}
	a.profile(t, "p", &bigtable.SingleClusterRoutingConfig{ClusterID: "b"})
	count := func(profile string) int {
		c := testkit.Client(t, a.srv.Addr(), testProject, testInstance, profile)
		ps, err := c.PrepareStatement(ctx, "SELECT _key FROM t", nil)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := ps.Bind(nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		if err := bs.Execute(ctx, func(bigtable.ResultRow) bool { n++; return true }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count("p"); n != 1 {
		t.Errorf("through profile p (to b): %d rows, want 1", n)
	}
	if n := count(""); n != 0 {
		t.Errorf("on a itself: %d rows, want 0 (replication is off in this test)", n)
	}
}
