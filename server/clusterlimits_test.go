package server

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// Issue 22: two CreateInstance calls for the same instance id through two
// nodes of a cluster at once: exactly one succeeds, the other gets
// AlreadyExists, and nothing of the loser's request remains (its display
// name, its cluster). After a DeleteInstance the id can be made again,
// once.
func TestClusterCreateInstanceRace(t *testing.T) {
	t.Parallel()
	c := newIAMCluster(t, false, "n1", "n2")
	ctx := context.Background()
	raw := map[string]adminpb.BigtableInstanceAdminClient{}
	for _, id := range []string{"n1", "n2"} {
		raw[id] = adminpb.NewBigtableInstanceAdminClient(c.dial(id, ""))
	}
	var arrived sync.WaitGroup
	var release chan struct{}
	gate := func() {
		arrived.Done()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
	}
	for _, id := range []string{"n1", "n2"} {
		c.nodes[id].cluster.meta.createGate = gate
	}
	inst := "projects/" + testProject + "/instances/raced"
	race := func(what string) {
		t.Helper()
		release = make(chan struct{})
		arrived.Add(2)
		errs := make(chan error, 2)
		for _, id := range []string{"n1", "n2"} {
			go func() {
				_, err := raw[id].CreateInstance(ctx, &adminpb.CreateInstanceRequest{Parent: "projects/" + testProject, InstanceId: "raced",
					Instance: &adminpb.Instance{DisplayName: "made through " + id},
					Clusters: map[string]*adminpb.Cluster{"c-" + id: {ServeNodes: 1}}})
				errs <- err
			}()
		}
		arrived.Wait()
		close(release)
		oneWinner(t, what+": CreateInstance through both nodes at once", errs)
		// Both nodes answer the winner's instance, with its cluster only.
		var want string
		for _, id := range []string{"n1", "n2"} {
			p, err := raw[id].GetInstance(ctx, &adminpb.GetInstanceRequest{Name: inst})
			if err != nil {
				t.Fatalf("%s: GetInstance through %s: %v", what, id, err)
			}
			winner := strings.TrimPrefix(p.GetDisplayName(), "made through ")
			if want == "" {
				want = winner
			}
			if winner != want {
				t.Fatalf("%s: through %s the instance was made through %s, through the other node %s", what, id, winner, want)
			}
			cl, err := raw[id].ListClusters(ctx, &adminpb.ListClustersRequest{Parent: inst})
			if err != nil {
				t.Fatalf("%s: ListClusters through %s: %v", what, id, err)
			}
			var names []string
			for _, x := range cl.GetClusters() {
				names = append(names, x.GetName()[strings.LastIndex(x.GetName(), "/")+1:])
			}
			sort.Strings(names)
			if strings.Join(names, ",") != "c-"+want {
				t.Fatalf("%s: the clusters through %s: %v, want only the winner's c-%s", what, id, names, want)
			}
		}
	}
	race("first create")
	if _, err := raw["n2"].DeleteInstance(ctx, &adminpb.DeleteInstanceRequest{Name: inst}); err != nil {
		t.Fatal(err)
	}
	race("create after a delete")
}

// Issue 22: IAM policies dropped with their resource on a cluster of
// several nodes (c = n1, n2) reach its peer (b, a process alone) as
// deletions, and a deletion made on b reaches c; the stamps etcd keeps
// beside the policies (iamstamp/NAME) go once b has the deletions, so they
// do not grow with every resource that ever had a policy. Resources: an
// authorized view deleted through n1, a declared instance deleted through
// n2, a table deleted and made again through n1 (its policy dropped with no
// tombstone: the sweep makes one), and an instance declared on b, given a
// policy there and deleted there.
func TestClusterIAMDeletionsTravel(t *testing.T) {
	t.Parallel()
	sc := startScaleClusterTuned(t, 0, func(o *Options) { o.ClusterID = "c" }, "n1", "n2")
	ctx := context.Background()
	sc.createTable(t, "n1")
	b := startCluster(t, "b", sc.nodes["n1"].srv.Addr(), "")
	bconn := testkit.Dial(t, b.srv.Addr())

	instName := func(id string) string { return "projects/" + testProject + "/instances/" + id }
	view := scaleTable + "/authorizedViews/v"
	t2 := instName(testInstance) + "/tables/t2"
	tableAdmin := func(id string) adminpb.BigtableTableAdminClient {
		return adminpb.NewBigtableTableAdminClient(sc.nodes[id].conn)
	}
	instAdmin := func(id string) adminpb.BigtableInstanceAdminClient {
		return adminpb.NewBigtableInstanceAdminClient(sc.nodes[id].conn)
	}
	set := func(c iamClient, res string) {
		t.Helper()
		p := &iampb.Policy{Bindings: []*iampb.Binding{{Role: "roles/bigtable.reader", Members: []string{"user:alice@example.com"}}}}
		if _, err := c.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: res, Policy: p}); err != nil {
			t.Fatalf("set the policy of %s: %v", res, err)
		}
	}
	// onB and inEtcd tell whether b, and c's etcd, hold a policy (with
	// bindings) for each resource.
	onB := func(res string) bool {
		p, err := b.srv.IAMPolicy(res)
		if err != nil {
			t.Fatal(err)
		}
		return len(p.GetBindings()) > 0
	}
	etcd := sc.nodes["n1"].srv.ClusterMember()
	stamps := func() map[string]clusteretcd.StampedIAM {
		all, err := etcd.StampedIAMPolicies(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return all
	}
	holds := func(what string, want bool, where func(string) bool, res ...string) {
		t.Helper()
		eventually(t, what, func() (bool, string) {
			for _, r := range res {
				if where(r) != want {
					return false, r
				}
			}
			return true, ""
		})
	}
	inEtcd := func(res string) bool { return stamps()[res].Value != nil }
	noStamp := func(res string) bool { _, ok := stamps()[res]; return !ok }

	// Made on c, each with a policy that reaches b.
	if _, err := tableAdmin("n1").CreateAuthorizedView(ctx, &adminpb.CreateAuthorizedViewRequest{Parent: scaleTable, AuthorizedViewId: "v",
		AuthorizedView: &adminpb.AuthorizedView{AuthorizedView: &adminpb.AuthorizedView_SubsetView_{SubsetView: &adminpb.AuthorizedView_SubsetView{RowPrefixes: [][]byte{[]byte("a")}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := instAdmin("n1").CreateInstance(ctx, &adminpb.CreateInstanceRequest{Parent: "projects/" + testProject, InstanceId: "gone",
		Clusters: map[string]*adminpb.Cluster{"c": {ServeNodes: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tableAdmin("n1").CreateTable(ctx, &adminpb.CreateTableRequest{Parent: instName(testInstance), TableId: "t2",
		Table: &adminpb.Table{ColumnFamilies: map[string]*adminpb.ColumnFamily{"f": {}}}}); err != nil {
		t.Fatal(err)
	}
	set(tableAdmin("n2"), view)
	set(instAdmin("n2"), instName("gone"))
	set(tableAdmin("n2"), t2)
	holds("c's policies on b", true, onB, view, instName("gone"), t2)

	// Deleted on c: gone on b too, and etcd keeps no stamp of them.
	if _, err := tableAdmin("n1").DeleteAuthorizedView(ctx, &adminpb.DeleteAuthorizedViewRequest{Name: view}); err != nil {
		t.Fatal(err)
	}
	if _, err := instAdmin("n2").DeleteInstance(ctx, &adminpb.DeleteInstanceRequest{Name: instName("gone")}); err != nil {
		t.Fatal(err)
	}
	if _, err := tableAdmin("n1").DeleteTable(ctx, &adminpb.DeleteTableRequest{Name: t2}); err != nil {
		t.Fatal(err)
	}
	if _, err := tableAdmin("n1").CreateTable(ctx, &adminpb.CreateTableRequest{Parent: instName(testInstance), TableId: "t2",
		Table: &adminpb.Table{ColumnFamilies: map[string]*adminpb.ColumnFamily{"f": {}}}}); err != nil {
		t.Fatal(err)
	}
	holds("the deleted resources' policies gone from b", false, onB, view, instName("gone"), t2)
	holds("no stamp left in c's etcd for the deleted resources", true, noStamp, view, instName("gone"), t2)

	// Made, given a policy and deleted on b: the deletion reaches c, and
	// the tombstone adopted into etcd goes too.
	binst := adminpb.NewBigtableInstanceAdminClient(bconn)
	if _, err := binst.CreateInstance(ctx, &adminpb.CreateInstanceRequest{Parent: "projects/" + testProject, InstanceId: "fromb",
		Clusters: map[string]*adminpb.Cluster{"b": {ServeNodes: 1}}}); err != nil {
		t.Fatal(err)
	}
	set(binst, instName("fromb"))
	holds("b's instance policy in c's etcd", true, inEtcd, instName("fromb"))
	if _, err := binst.DeleteInstance(ctx, &adminpb.DeleteInstanceRequest{Name: instName("fromb")}); err != nil {
		t.Fatal(err)
	}
	holds("b's deletion in c's etcd", false, inEtcd, instName("fromb"))
	holds("no stamp left in c's etcd for b's deleted instance", true, noStamp, instName("fromb"))
}

// Issue 22: the operation of an admin call done when it returns
// (UpdateTable through the schema log, CreateInstance through the
// instance server) is answered by GetOperation through another node,
// listed once through each, and deleted through either.
func TestClusterInstantOperationsEveryNode(t *testing.T) {
	t.Parallel()
	sc := startScaleClusterTuned(t, 0, nil, "n1", "n2")
	ctx := context.Background()
	sc.createTable(t, "n1")
	ops := map[string]longrunningpb.OperationsClient{}
	for _, id := range []string{"n1", "n2"} {
		ops[id] = longrunningpb.NewOperationsClient(sc.nodes[id].conn)
	}
	up, err := adminpb.NewBigtableTableAdminClient(sc.nodes["n1"].conn).UpdateTable(ctx, &adminpb.UpdateTableRequest{
		Table:      &adminpb.Table{Name: scaleTable, DeletionProtection: true},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"deletion_protection"}}})
	if err != nil {
		t.Fatal(err)
	}
	ci, err := adminpb.NewBigtableInstanceAdminClient(sc.nodes["n2"].conn).CreateInstance(ctx, &adminpb.CreateInstanceRequest{Parent: "projects/" + testProject,
		InstanceId: "declared", Clusters: map[string]*adminpb.Cluster{"c": {ServeNodes: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		op      *longrunningpb.Operation
		through string
	}{{up, "n2"}, {ci, "n1"}} {
		got, err := ops[c.through].GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: c.op.GetName()})
		if err != nil {
			t.Fatalf("GetOperation %s through %s: %v", c.op.GetName(), c.through, err)
		}
		if !got.GetDone() || !proto.Equal(got.GetResponse(), c.op.GetResponse()) {
			t.Fatalf("GetOperation %s through %s: %v, want %v", c.op.GetName(), c.through, got, c.op)
		}
	}
	for _, id := range []string{"n1", "n2"} {
		l, err := ops[id].ListOperations(ctx, &longrunningpb.ListOperationsRequest{Name: "operations/" + scaleTable})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, op := range l.GetOperations() {
			names = append(names, op.GetName())
		}
		if len(names) != 1 || names[0] != up.GetName() {
			t.Fatalf("ListOperations of the table through %s: %v, want [%s]", id, names, up.GetName())
		}
	}
	if _, err := ops["n2"].DeleteOperation(ctx, &longrunningpb.DeleteOperationRequest{Name: up.GetName()}); err != nil {
		t.Fatal(err)
	}
	if _, err := ops["n1"].GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: up.GetName()}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetOperation through n1 after DeleteOperation through n2: %v, want NotFound", err)
	}
}
