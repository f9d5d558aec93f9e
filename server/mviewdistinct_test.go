package server

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/sqlquery"
)

// A DISTINCT view (serve --materialized-view-rules any) over a table
// whose tablets are on three nodes is merged from the owners' states, not
// computed on read: values repeated within a tablet and across tablets
// count once, a deletion takes a value out only with its last row
// anywhere, and a move and a split keep it right. Every read, through
// every node, matches the query run from scratch (and is merged, unless an
// owner's lease lapsed: readMergedView).
func TestClusterMaterializedViewDistinct(t *testing.T) {
	t.Parallel()
	sc := startScaleClusterTuned(t, 0, withAnyViewQuery, "n1", "n2", "n3")
	sc.createTable(t, "n1", "g", "p")
	ctx := context.Background()
	n1 := sc.nodes["n1"]
	if got := owners(t, n1); got != "[,g)n1 [g,p)n2 [p,)n3" {
		t.Fatalf("tablets: %s", got)
	}
	views := map[string]string{
		"byg": "SELECT f['g'] AS _key, COUNT(DISTINCT f['c']) AS d, SUM(DISTINCT TO_INT64(f['n'])) AS s, " +
			"MIN(DISTINCT f['c']) AS mn, MAX(DISTINCT f['c']) AS mx, COUNT(*) AS nrows FROM t GROUP BY f['g']",
		"all": "SELECT 'all' AS _key, COUNT(DISTINCT f['c']) AS d, AVG(DISTINCT TO_INT64(f['n'])) AS a FROM t GROUP BY _key",
	}
	iac := testkit.InstanceAdmin(t, n1.srv.Addr(), testProject)
	for name, q := range views {
		if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: name, Query: q}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	inst := "projects/" + testProject + "/instances/" + testInstance
	format := func(rows [][]sqlquery.Value) string {
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = sqlquery.Format(sqlquery.Array(r))
		}
		return strings.Join(out, " ")
	}
	check := func(step string) {
		t.Helper()
		for _, id := range []string{"n1", "n2", "n3"} {
			n := sc.nodes[id]
			for name, q := range views {
				rows := readMergedView(t, n, inst, name, nil)
				if got, want := format(rows), format(scratchQuery(t, n, q)); got != want {
					t.Fatalf("%s: %s through %s:\nread:         %s\nfrom scratch: %s", step, name, id, got, want)
				}
			}
		}
	}
	write := func(via, row, g, c string, n int) {
		t.Helper()
		m := bigtable.NewMutation()
		m.Set("f", "g", 1000, []byte(g))
		m.Set("f", "c", 1000, []byte(c))
		m.Set("f", "n", 1000, []byte{0, 0, 0, 0, 0, 0, 0, byte(n)})
		if err := sc.nodes[via].client.Open("t").Apply(ctx, row, m); err != nil {
			t.Fatalf("write %s: %v", row, err)
		}
	}
	del := func(row string) {
		t.Helper()
		m := bigtable.NewMutation()
		m.DeleteRow()
		if err := sc.nodes["n2"].client.Open("t").Apply(ctx, row, m); err != nil {
			t.Fatalf("delete %s: %v", row, err)
		}
	}
	// "x" in every tablet, twice in n1's; "y" in n2's only.
	write("n1", "a1", "g1", "x", 1)
	write("n2", "b1", "g1", "x", 1)
	write("n3", "h1", "g1", "x", 1)
	write("n1", "q1", "g1", "x", 1)
	write("n2", "i1", "g1", "y", 2)
	write("n3", "c2", "g2", "x", 3)
	check("written")
	del("a1") // "x" still in n1's tablet (b1), and elsewhere
	check("one x deleted in a tablet holding two")
	del("b1")
	check("n1's last x deleted")
	del("h1")
	del("q1")
	check("every x of g1 deleted")
	write("n3", "a2", "g1", "x", 5)
	write("n1", "r1", "g1", "z", 5)
	check("x back in n1's tablet")
	tabs, err := n1.ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n1.ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tabs.Tablets[0].Id, To: "n2"}); err != nil {
		t.Fatal(err)
	}
	check("n1's tablet moved to n2")
	write("n2", "a3", "g1", "w", 7)
	del("a2")
	check("after the move")
	if _, err := n1.ops.SplitTablet(ctx, &clusterpb.SplitTabletRequest{Table: scaleTable, Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	tabs, err = n1.ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tabs.Tablets {
		if string(tb.Start) == "k" {
			if _, err := n1.ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tb.Id, To: "n1"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("split at k, [k,p) moved to n1: " + owners(t, n1))
	for i := 0; i < 6; i++ {
		write([]string{"n1", "n2", "n3"}[i%3], fmt.Sprintf("%c9", "bhlqtz"[i]), "g2", fmt.Sprint("v", i%2), i)
	}
	del("c2")
	check("more writes")
	if got := owners(t, n1); strings.Count(got, "n1") == 0 || strings.Count(got, "n2") == 0 || strings.Count(got, "n3") == 0 {
		t.Errorf("tablets: %s; want some on every node", got)
	}
}
