package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

func (n *scaleNode) rawAdmin() adminpb.BigtableTableAdminClient {
	return adminpb.NewBigtableTableAdminClient(n.conn)
}

const scaleView = scaleTable + "/authorizedViews/v"

// tableOn is the table's metadata as node id serves it.
func tableOn(t *testing.T, n *scaleNode) (*adminpb.Table, error) {
	t.Helper()
	return n.rawAdmin().GetTable(context.Background(), &adminpb.GetTableRequest{Name: scaleTable, View: adminpb.Table_FULL})
}

// viewEtags lists each node's etag of view v ("-" where it is not found).
func viewEtags(t *testing.T, sc *scaleCluster, ids ...string) []string {
	t.Helper()
	var out []string
	for _, id := range ids {
		v, err := sc.nodes[id].rawAdmin().GetAuthorizedView(context.Background(), &adminpb.GetAuthorizedViewRequest{Name: scaleView, View: adminpb.AuthorizedView_FULL})
		switch {
		case status.Code(err) == codes.NotFound:
			out = append(out, "-")
		case err != nil:
			t.Fatalf("view on %s: %v", id, err)
		default:
			out = append(out, v.GetEtag()+":"+string(v.GetSubsetView().GetRowPrefixes()[0]))
		}
	}
	return out
}

func sameOnAll(t *testing.T, what string, got []string) string {
	t.Helper()
	for _, g := range got[1:] {
		if g != got[0] {
			t.Fatalf("%s differs between nodes: %v", what, got)
		}
	}
	return got[0]
}

func updateProtection(t *testing.T, n *scaleNode, on bool) {
	t.Helper()
	_, err := n.rawAdmin().UpdateTable(context.Background(), &adminpb.UpdateTableRequest{
		Table:      &adminpb.Table{Name: scaleTable, DeletionProtection: on},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"deletion_protection"}}})
	if err != nil {
		t.Fatalf("deletion protection %v via %s: %v", on, n.id, err)
	}
}

// TestScaleOutSchemaChangesEverywhere: UpdateTable, authorized views and
// UndeleteTable sent to one node reach every node, also one that was down
// when they were made.
func TestScaleOutSchemaChangesEverywhere(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	sc.createTable(t, "n1", "g", "p")
	ctx := context.Background()
	all := []string{"n1", "n2", "n3"}
	tbl := sc.nodes["n1"].client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	// UpdateTable via n1: deletion protection and a change stream, seen by
	// every node; a delete via n2 is refused and leaves the table served.
	updateProtection(t, sc.nodes["n1"], true)
	_, err := sc.nodes["n1"].rawAdmin().UpdateTable(ctx, &adminpb.UpdateTableRequest{
		Table:      &adminpb.Table{Name: scaleTable, ChangeStreamConfig: &adminpb.ChangeStreamConfig{RetentionPeriod: durationpb.New(48 * time.Hour)}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"change_stream_config.retention_period"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range all {
		m, err := tableOn(t, sc.nodes[id])
		if err != nil || !m.GetDeletionProtection() || m.GetChangeStreamConfig().GetRetentionPeriod().AsDuration() != 48*time.Hour {
			t.Fatalf("table on %s after UpdateTable via n1: %v %v", id, m, err)
		}
	}
	if _, err := sc.nodes["n1"].rawAdmin().UpdateTable(ctx, &adminpb.UpdateTableRequest{Table: &adminpb.Table{Name: scaleTable}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("UpdateTable without a mask: %v", err)
	}
	if err := sc.nodes["n2"].admin.DeleteTable(ctx, "t"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("delete of a protected table via n2: %v", err)
	}
	testkit.Eventually(t, "the directory of the table that was not deleted", 10*time.Second, func() (bool, string) {
		for _, id := range all {
			if _, ok := sc.nodes[id].srv.ClusterMember().Directory(testInstanceName + "/tables/t"); !ok {
				return false, id + " has no directory"
			}
		}
		return true, ""
	})
	if keys, _ := readScale(t, sc.nodes["n3"]); len(keys) != 26 {
		t.Fatalf("%d rows after the refused delete", len(keys))
	}
	updateProtection(t, sc.nodes["n3"], false)

	// Authorized views: created via n1, the same (etag too) on every node,
	// read through on n3, updated via n2, deleted via n3.
	_, err = sc.nodes["n1"].rawAdmin().CreateAuthorizedView(ctx, &adminpb.CreateAuthorizedViewRequest{Parent: scaleTable, AuthorizedViewId: "v",
		AuthorizedView: &adminpb.AuthorizedView{AuthorizedView: &adminpb.AuthorizedView_SubsetView_{SubsetView: &adminpb.AuthorizedView_SubsetView{
			RowPrefixes: [][]byte{[]byte("q")}, FamilySubsets: map[string]*adminpb.AuthorizedView_FamilySubsets{"f": {QualifierPrefixes: [][]byte{nil}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	first := sameOnAll(t, "view v", viewEtags(t, sc, all...))
	if first == "-" || !strings.HasSuffix(first, ":q") {
		t.Fatalf("view v: %s", first)
	}
	var seen []string
	err = sc.nodes["n3"].client.OpenAuthorizedView("t", "v").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		seen = append(seen, r.Key())
		return true
	})
	if err != nil || strings.Join(seen, "") != "q" {
		t.Fatalf("read through view v via n3: %v %v", seen, err)
	}
	if _, err := sc.nodes["n2"].rawAdmin().CreateAuthorizedView(ctx, &adminpb.CreateAuthorizedViewRequest{Parent: scaleTable, AuthorizedViewId: "v",
		AuthorizedView: &adminpb.AuthorizedView{AuthorizedView: &adminpb.AuthorizedView_SubsetView_{SubsetView: &adminpb.AuthorizedView_SubsetView{RowPrefixes: [][]byte{[]byte("a")}}}}}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("creating view v again via n2: %v", err)
	}
	update := func(via, prefix, etag string) error {
		_, err := sc.nodes[via].rawAdmin().UpdateAuthorizedView(ctx, &adminpb.UpdateAuthorizedViewRequest{
			AuthorizedView: &adminpb.AuthorizedView{Name: scaleView, Etag: etag, AuthorizedView: &adminpb.AuthorizedView_SubsetView_{SubsetView: &adminpb.AuthorizedView_SubsetView{
				RowPrefixes: [][]byte{[]byte(prefix)}}}},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"subset_view"}}})
		return err
	}
	etag, _, _ := strings.Cut(first, ":")
	if err := update("n2", "r", etag); err != nil {
		t.Fatal(err)
	}
	second := sameOnAll(t, "view v", viewEtags(t, sc, all...))
	if second == first || !strings.HasSuffix(second, ":r") {
		t.Fatalf("view v after the update: %s (was %s)", second, first)
	}
	// The old etag is stale on every node.
	if err := update("n3", "s", etag); status.Code(err) != codes.Aborted {
		t.Errorf("update with a stale etag via n3: %v", err)
	}
	if _, err := sc.nodes["n3"].rawAdmin().DeleteAuthorizedView(ctx, &adminpb.DeleteAuthorizedViewRequest{Name: scaleView}); err != nil {
		t.Fatal(err)
	}
	if got := sameOnAll(t, "view v", viewEtags(t, sc, all...)); got != "-" {
		t.Fatalf("view v after its delete: %s", got)
	}

	// n2 is down while a view is made and the table updated; it finds both
	// when it comes back with its disk.
	n2dir := sc.nodes["n2"].dir
	sc.nodes["n2"].stop()
	testkit.Eventually(t, "n2 to leave", 10*time.Second, func() (bool, string) {
		return len(sc.nodes["n1"].srv.ClusterMember().Nodes()) == 2, ""
	})
	_, err = sc.nodes["n1"].rawAdmin().CreateAuthorizedView(ctx, &adminpb.CreateAuthorizedViewRequest{Parent: scaleTable, AuthorizedViewId: "v",
		AuthorizedView: &adminpb.AuthorizedView{AuthorizedView: &adminpb.AuthorizedView_SubsetView_{SubsetView: &adminpb.AuthorizedView_SubsetView{RowPrefixes: [][]byte{[]byte("z")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	updateProtection(t, sc.nodes["n3"], true)
	n2 := sc.start(t, "n2", n2dir)
	t.Cleanup(n2.stop)
	third := sameOnAll(t, "view v", viewEtags(t, sc, all...))
	if !strings.HasSuffix(third, ":z") {
		t.Fatalf("view v after n2 came back: %s", third)
	}
	if m, err := tableOn(t, n2); err != nil || !m.GetDeletionProtection() {
		t.Fatalf("table on n2 after it came back: %v %v", m, err)
	}
	updateProtection(t, sc.nodes["n2"], false)

	// Delete via n1, undelete via n3: every node has its part back, and the
	// table is whole through every node.
	if err := sc.nodes["n1"].admin.DeleteTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	for _, id := range all {
		if _, err := tableOn(t, sc.nodes[id]); status.Code(err) != codes.NotFound {
			t.Fatalf("table on %s after its delete: %v", id, err)
		}
	}
	if _, err := sc.nodes["n2"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable}); status.Code(err) != codes.NotFound {
		t.Fatalf("tablets of a deleted table: %v", err)
	}
	if _, err := sc.nodes["n3"].rawAdmin().UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: scaleTable}); err != nil {
		t.Fatal(err)
	}
	for _, id := range all {
		if _, err := tableOn(t, sc.nodes[id]); err != nil {
			t.Fatalf("table on %s after the undelete: %v", id, err)
		}
		keys, vals := readScale(t, sc.nodes[id])
		if len(keys) != 26 || vals["h"] != "vh" || vals["x"] != "vx" {
			t.Fatalf("read through %s after the undelete: %d rows", id, len(keys))
		}
	}
	if got := sameOnAll(t, "view v", viewEtags(t, sc, all...)); !strings.HasSuffix(got, ":z") {
		t.Errorf("view v after the undelete: %s", got)
	}
	tabs, err := sc.nodes["n2"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil || len(tabs.Tablets) != 3 {
		t.Fatalf("tablets after the undelete: %v %v", tabs, err)
	}
	if _, err := sc.nodes["n1"].rawAdmin().UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: scaleTable}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("undelete of a live table: %v", err)
	}
	if _, err := sc.nodes["n1"].rawAdmin().UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: testInstanceName + "/tables/never"}); status.Code(err) != codes.NotFound {
		t.Errorf("undelete of a table never made: %v", err)
	}
	// Writes go on after the undelete.
	if err := writeScale(t, sc.nodes["n2"].client.Open("t"), "k2", "after"); err != nil {
		t.Fatal(err)
	}
}

// TestScaleOutRestore: a restored table exists on every node under one
// id (its families' ids the backup's, not name order), is whole through
// every node, and its tablet can move.
func TestScaleOutRestore(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	sc.createTable(t, "n1")
	ctx := context.Background()
	tabs, err := sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil || len(tabs.Tablets) != 1 {
		t.Fatalf("tablets: %v %v", tabs, err)
	}
	owner := sc.nodes[tabs.Tablets[0].Owner]
	// Family a comes after f: its id is not its name order.
	if err := sc.nodes["n3"].admin.CreateColumnFamily(ctx, "t", "a"); err != nil {
		t.Fatal(err)
	}
	tbl := sc.nodes["n2"].client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	if err := owner.admin.CreateBackup(ctx, "t", "c1", "bk", time.Now().Add(7*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := owner.admin.RestoreTable(ctx, "r", "c1", "bk"); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, id := range []string{"n1", "n2", "n3"} {
		n := sc.nodes[id]
		m, err := n.srv.Engine().Table(testInstanceName, "r")
		if err != nil {
			t.Fatalf("restored table on %s: %v", id, err)
		}
		ids = append(ids, fmtFamilies(m))
		var keys []string
		err = n.client.Open("r").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
			keys = append(keys, r.Key())
			return true
		})
		if err != nil || strings.Join(keys, "") != strings.Join(letters(), "") {
			t.Fatalf("read the restored table through %s: %q %v", id, keys, err)
		}
	}
	if ids[0] != ids[1] || ids[1] != ids[2] || !strings.Contains(ids[0], "f=1 a=2") {
		t.Fatalf("restored table and family ids differ: %v", ids)
	}
	// Its tablet moves away from the node the restore placed it on.
	rt, err := sc.nodes["n2"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: testInstanceName + "/tables/r"})
	if err != nil || len(rt.Tablets) != 1 {
		t.Fatalf("tablets of the restored table: %v %v", rt, err)
	}
	to := "n1"
	if rt.Tablets[0].Owner == "n1" {
		to = "n2"
	}
	if _, err := sc.nodes["n3"].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: testInstanceName + "/tables/r", Tablet: rt.Tablets[0].Id, To: to}); err != nil {
		t.Fatal(err)
	}
	row, err := sc.nodes["n3"].client.Open("r").ReadRow(ctx, "q")
	if err != nil || string(row["f"][0].Value) != "vq" {
		t.Fatalf("row q after the move: %v %v", row, err)
	}
	if err := writeScale(t, sc.nodes["n3"].client.Open("r"), "new", "x"); err != nil {
		t.Fatalf("write after the move: %v", err)
	}
	if err := owner.admin.RestoreTable(ctx, "r", "c1", "bk"); status.Code(err) != codes.AlreadyExists {
		t.Errorf("restore onto an existing table: %v", err)
	}
	if err := owner.admin.RestoreTable(ctx, "r2", "c1", "nope"); status.Code(err) != codes.NotFound {
		t.Errorf("restore of a missing backup: %v", err)
	}
	if _, err := sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: testInstanceName + "/tables/r2"}); status.Code(err) != codes.NotFound {
		t.Errorf("a failed restore left a directory: %v", err)
	}
}
