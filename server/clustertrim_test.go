package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/table"
)

// familyIDs is a table's families as a node has them ("name=id ...").
func familyIDs(t *testing.T, n *scaleNode) string {
	t.Helper()
	m, err := n.srv.Engine().Table(testInstanceName, "t")
	if err != nil {
		t.Fatalf("table on %s: %v", n.id, err)
	}
	return fmtFamilies(m)
}

func fmtFamilies(m *table.Meta) string {
	s := fmt.Sprintf("id %d:", m.ID)
	for _, f := range m.Families {
		s += fmt.Sprintf(" %s=%d", f.Name, f.ID)
	}
	return s
}

// trimmed is how far the schema log was trimmed (its entries up to it
// are gone).
func trimmed(t *testing.T, n *scaleNode) uint64 {
	t.Helper()
	s, _, err := n.srv.cluster.m.ReadSnapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	es, err := n.srv.cluster.m.Entries(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) > 0 && es[0].Seq != s.Trimmed+1 {
		t.Fatalf("the log starts at %d, trimmed to %d", es[0].Seq, s.Trimmed)
	}
	return s.Trimmed
}

// TestScaleOutSchemaLogTrim: the log is trimmed to what every node
// applied, a node that was down catches up, a new node starts from the
// snapshot, and a node given up is refused once the log passed it.
func TestScaleOutSchemaLogTrim(t *testing.T) {
	t.Parallel()
	sc := startScaleClusterTuned(t, 0, func(o *Options) { o.Cluster.SchemaTrimEvery = 3 }, "n1", "n2", "n3")
	sc.createTable(t, "n1", "k")
	ctx := context.Background()
	tbl := sc.nodes["n1"].client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	fam := 0
	addFamilies := func(via string, k int) {
		t.Helper()
		for range k {
			fam++
			if err := sc.nodes[via].admin.CreateColumnFamily(ctx, "t", fmt.Sprintf("a%02d", 100-fam)); err != nil {
				t.Fatal(err)
			}
		}
	}
	addFamilies("n2", 4)
	if _, err := sc.nodes["n1"].rawAdmin().CreateAuthorizedView(ctx, &adminpb.CreateAuthorizedViewRequest{Parent: scaleTable, AuthorizedViewId: "v",
		AuthorizedView: &adminpb.AuthorizedView{AuthorizedView: &adminpb.AuthorizedView_SubsetView_{SubsetView: &adminpb.AuthorizedView_SubsetView{RowPrefixes: [][]byte{[]byte("q")}}}}}); err != nil {
		t.Fatal(err)
	}
	n1 := sc.nodes["n1"]
	trimmedPast := func(what string, seq uint64) {
		t.Helper()
		testkit.Eventually(t, what, 15*time.Second, func() (bool, string) {
			if _, err := n1.srv.cluster.trimSchemaLog(ctx); err != nil {
				return false, err.Error()
			}
			got := trimmed(t, n1)
			return got >= seq, fmt.Sprintf("trimmed to %d", got)
		})
	}
	applied := n1.srv.cluster.appliedSeq()
	trimmedPast("a first trim", applied)

	// n3 is down while the schema changes: the log keeps what it needs.
	n3dir := sc.nodes["n3"].dir
	sc.nodes["n3"].stop()
	testkit.Eventually(t, "n3 to leave", 10*time.Second, func() (bool, string) { return len(n1.srv.ClusterMember().Nodes()) == 2, "" })
	addFamilies("n1", 6)
	for range 3 {
		if _, err := n1.srv.cluster.trimSchemaLog(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := trimmed(t, n1); got > applied {
		t.Fatalf("the log lost what down n3 needs: trimmed to %d, n3 applied %d", got, applied)
	}
	n3 := sc.start(t, "n3", n3dir)
	t.Cleanup(n3.stop)
	want := familyIDs(t, n1)
	if got := familyIDs(t, n3); got != want {
		t.Fatalf("n3 after catching up: %s, n1: %s", got, want)
	}
	applied = n1.srv.cluster.appliedSeq()
	trimmedPast("a trim past n3's return", applied)

	// A new node starts from the snapshot: the same tables, ids and view;
	// a tablet moves to it and is read through it.
	n4 := sc.start(t, "n4", filepath.Join(t.TempDir(), "n4"))
	t.Cleanup(n4.stop)
	if got := familyIDs(t, n4); got != want {
		t.Fatalf("n4 from the snapshot: %s, n1: %s", got, want)
	}
	if got := viewEtags(t, sc, "n1", "n4"); got[0] != got[1] || got[0] == "-" {
		t.Fatalf("view v on n1 and n4: %v", got)
	}
	tabs, err := n1.ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n1.ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tabs.Tablets[1].Id, To: "n4"}); err != nil {
		t.Fatal(err)
	}
	if keys, vals := readScale(t, n4); len(keys) != 26 || vals["x"] != "vx" {
		t.Fatalf("read through n4: %d rows", len(keys))
	}
	// n4 applies what follows.
	addFamilies("n3", 1)
	want = familyIDs(t, n1)
	testkit.Eventually(t, "n4 to apply the next change", 10*time.Second, func() (bool, string) {
		got := familyIDs(t, n4)
		return got == want, got
	})
	m := bigtable.NewMutation()
	m.Set(fmt.Sprintf("a%02d", 100-fam), "c", bigtable.Timestamp(1000), []byte("new"))
	if err := n4.client.Open("t").Apply(ctx, "y", m); err != nil {
		t.Fatal(err)
	}

	// n2 goes down and is given up (drain --force): the log no longer
	// waits for it, and it is refused when it returns with its old disk.
	n2dir := sc.nodes["n2"].dir
	sc.nodes["n2"].stop()
	testkit.Eventually(t, "n2 to leave", 10*time.Second, func() (bool, string) { return len(n1.srv.ClusterMember().Nodes()) == 3, "" })
	if _, err := n1.ops.DrainNode(ctx, &clusterpb.DrainNodeRequest{Node: "n2", Force: true}); err != nil {
		t.Fatal(err)
	}
	addFamilies("n1", 2)
	applied = n1.srv.cluster.appliedSeq()
	trimmedPast("a trim past n2", applied)
	srv, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: n2dir, Cluster: &ClusterOptions{
		Etcd: []string{sc.etcd}, Prefix: sc.prefix, NodeID: "n2", LeaseTTL: 2 * time.Second, SharedStorage: "file://" + sc.shared}})
	if err != nil {
		t.Fatal(err)
	}
	err = srv.Start()
	srv.Close()
	if !errors.Is(err, clusteretcd.ErrTrimmed) {
		t.Fatalf("n2 back after it was given up: %v", err)
	}
}
