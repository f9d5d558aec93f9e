package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A materialized view read through a node of a three-node cluster counts
// every tablet's rows, wherever they live: merged from the owners' states
// while the node holds only some of the table (mviewpartial.go), served
// from its own state while it holds all of it, reconciled when tablets
// move (which the view log does not see).
func TestClusterMaterializedViewEveryTablet(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	sc.createTable(t, "n1", "g", "p")
	ctx := context.Background()
	n1 := sc.nodes["n1"]
	tbl := n1.client.Open("t")
	rows := 0
	write := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			if err := writeScale(t, tbl, k, "v"+k); err != nil {
				t.Fatalf("write %s: %v", k, err)
			}
			rows++
		}
	}
	write(letters()...)
	const query = "SELECT '*' AS _key, COUNT(*) AS n FROM t GROUP BY _key"
	iac := testkit.InstanceAdmin(t, n1.srv.Addr(), testProject)
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv", Query: query}); err != nil {
		t.Fatal(err)
	}
	inst := "projects/" + testProject + "/instances/" + testInstance
	check := func(when string, whole bool) {
		t.Helper()
		want := fmt.Sprintf("*|%d", rows)
		if got, err := sqlRows(t, n1.client, "SELECT _key, n FROM mv"); err != nil || !slices.Equal(got, []string{want}) {
			t.Errorf("%s: SQL through n1: %q, %v; want %s", when, got, err, want)
		}
		var got []string
		err := n1.client.OpenMaterializedView("mv").ReadRows(ctx, bigtable.RowRange{}, func(r bigtable.Row) bool {
			for _, it := range r["default"] {
				if it.Column == "default:n" {
					got = append(got, fmt.Sprintf("%s|%d", r.Key(), binary.BigEndian.Uint64(it.Value)))
				}
			}
			return true
		})
		if err != nil || !slices.Equal(got, []string{want}) {
			t.Errorf("%s: ReadRows through n1: %q, %v; want %s", when, got, err, want)
		}
		if !n1.srv.viewKept(inst, "mv") {
			t.Errorf("%s: not maintained", when)
		}
		if mv, _, _ := n1.srv.keptView(inst, "mv"); (mv != nil) != whole {
			t.Errorf("%s: the whole view's state on n1: %v, want %v", when, mv != nil, whole)
		}
	}
	check("spread over three nodes", false)
	// The view's definition is on every node (the schema log): each
	// answers it over every tablet.
	for _, id := range []string{"n2", "n3"} {
		want := fmt.Sprintf("*|%d", rows)
		if got, err := sqlRows(t, sc.nodes[id].client, "SELECT _key, n FROM mv"); err != nil || !slices.Equal(got, []string{want}) {
			t.Errorf("SQL through %s: %q, %v; want %s", id, got, err, want)
		}
	}

	tabs, err := n1.ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil || len(tabs.Tablets) != 3 {
		t.Fatalf("tablets: %+v %v", tabs, err)
	}
	move := func(i int, to string) {
		t.Helper()
		if _, err := n1.ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tabs.Tablets[i].Id, To: to}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "n1 to see the move", 10*time.Second, func() (bool, string) {
			d, _ := n1.srv.cluster.m.Directory(scaleTable)
			for _, tb := range d.Tablets {
				if tb.ID == tabs.Tablets[i].Id {
					return tb.Owner == to, tb.Owner
				}
			}
			return false, "no tablet"
		})
	}
	move(1, "n1")
	move(2, "n1")
	check("every tablet on n1", true)
	write("aa", "hh", "zz")
	check("written with every tablet on n1", true)

	move(2, "n3")
	write("qq", "rr")
	check("a tablet moved away", false)
	move(2, "n1")
	write("yy")
	check("the tablet back on n1", true)

	// A logical view created through n3, then both views deleted through
	// n2: every node follows.
	iac3 := testkit.InstanceAdmin(t, sc.nodes["n3"].srv.Addr(), testProject)
	if err := iac3.CreateLogicalView(ctx, testInstance, &bigtable.LogicalViewInfo{LogicalViewID: "lv", Query: "SELECT _key FROM t WHERE _key < 'c'"}); err != nil {
		t.Fatal(err)
	}
	if err := iac3.CreateLogicalView(ctx, testInstance, &bigtable.LogicalViewInfo{LogicalViewID: "lv", Query: "SELECT _key FROM t"}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("creating lv again through n3: %v, want ALREADY_EXISTS", err)
	}
	if got, err := sqlRows(t, n1.client, "SELECT _key FROM lv"); err != nil || !slices.Equal(got, []string{"a", "aa", "b"}) {
		t.Errorf("logical view through n1: %q, %v", got, err)
	}
	iac2 := testkit.InstanceAdmin(t, sc.nodes["n2"].srv.Addr(), testProject)
	if err := iac2.DeleteLogicalView(ctx, testInstance, "lv"); err != nil {
		t.Fatal(err)
	}
	if err := iac2.DeleteMaterializedView(ctx, testInstance, "mv"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		iac := testkit.InstanceAdmin(t, sc.nodes[id].srv.Addr(), testProject)
		mvs, err := iac.MaterializedViews(ctx, testInstance)
		lvs, err2 := iac.LogicalViews(ctx, testInstance)
		if len(mvs) != 0 || len(lvs) != 0 || err != nil || err2 != nil {
			t.Errorf("views on %s after the deletions: %v %v, %v %v", id, mvs, err, lvs, err2)
		}
	}
}

// A node that joins after the schema log was trimmed past the views'
// creation gets them from the schema snapshot.
func TestClusterViewsInSchemaSnapshot(t *testing.T) {
	t.Parallel()
	sc := startScaleClusterTuned(t, 0, func(o *Options) { o.Cluster.SchemaTrimEvery = 3 }, "n1", "n2")
	sc.createTable(t, "n1", "m")
	ctx := context.Background()
	n1 := sc.nodes["n1"]
	for _, r := range letters() {
		if err := writeScale(t, n1.client.Open("t"), r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	iac := testkit.InstanceAdmin(t, n1.srv.Addr(), testProject)
	if err := iac.CreateLogicalView(ctx, testInstance, &bigtable.LogicalViewInfo{LogicalViewID: "lv", Query: "SELECT _key FROM t WHERE _key < 'c'"}); err != nil {
		t.Fatal(err)
	}
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv", Query: "SELECT '*' AS _key, COUNT(*) AS n FROM t GROUP BY _key"}); err != nil {
		t.Fatal(err)
	}
	applied := n1.srv.cluster.appliedSeq()
	testkit.Eventually(t, "a trim past the views", 15*time.Second, func() (bool, string) {
		if _, err := n1.srv.cluster.trimSchemaLog(ctx); err != nil {
			return false, err.Error()
		}
		got := trimmed(t, n1)
		return got >= applied, fmt.Sprintf("trimmed to %d", got)
	})
	n3 := sc.start(t, "n3", t.TempDir())
	t.Cleanup(n3.stop)
	if got, err := sqlRows(t, n3.client, "SELECT _key FROM lv"); err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("logical view through n3: %q, %v", got, err)
	}
	if got, err := sqlRows(t, n3.client, "SELECT _key, n FROM mv"); err != nil || !slices.Equal(got, []string{"*|26"}) {
		t.Errorf("materialized view through n3: %q, %v", got, err)
	}
}
