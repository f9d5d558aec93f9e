package server

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// listProfiles lists the ids of the instance's app profiles through iac.
func listProfiles(t *testing.T, iac *bigtable.InstanceAdminClient) map[string]string {
	t.Helper()
	out := map[string]string{}
	it := iac.ListAppProfiles(context.Background(), testInstance)
	for {
		p, err := it.Next()
		if err == iterator.Done {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[p.GetName()[len("projects/"+testProject+"/instances/"+testInstance+"/appProfiles/"):]] = p.GetDescription()
	}
}

// Issue 22: every node serves the whole InstanceAdmin API alike; an app
// profile or a cluster setting written through one node is what every
// other node answers, at once for the admin API and within the watch's
// delay for the data path's profile check.
func TestClusterInstanceMetaEveryNode(t *testing.T) {
	t.Parallel()
	c := newIAMCluster(t, false, "n1", "n2", "n3")
	ctx := context.Background()
	ia := map[string]*bigtable.InstanceAdminClient{}
	for _, id := range []string{"n1", "n2", "n3"} {
		ia[id] = c.instanceAdmin(id, "")
	}
	route := &bigtable.SingleClusterRoutingConfig{ClusterID: "ebbtable", AllowTransactionalWrites: true}
	if _, err := ia["n1"].CreateAppProfile(ctx, bigtable.ProfileConf{InstanceID: testInstance, ProfileID: "p", Description: "one", RoutingConfig: route}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n2", "n3"} {
		p, err := ia[id].GetAppProfile(ctx, testInstance, "p")
		if err != nil {
			t.Fatalf("get through %s: %v", id, err)
		}
		if p.GetDescription() != "one" {
			t.Fatalf("through %s: description %q", id, p.GetDescription())
		}
		if got := listProfiles(t, ia[id]); got["p"] != "one" {
			t.Fatalf("list through %s: %v", id, got)
		}
	}
	if _, err := ia["n2"].CreateAppProfile(ctx, bigtable.ProfileConf{InstanceID: testInstance, ProfileID: "p", RoutingConfig: route}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("create again through n2: %v", err)
	}
	if err := ia["n2"].UpdateAppProfile(ctx, testInstance, "p", bigtable.ProfileAttrsToUpdate{Description: "two"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n1", "n3"} {
		if p, err := ia[id].GetAppProfile(ctx, testInstance, "p"); err != nil || p.GetDescription() != "two" {
			t.Fatalf("through %s after the update through n2: %v %v", id, p, err)
		}
	}
	// The data path's profile check on n2 resolves the profile (and
	// caches it).
	inst := "projects/" + testProject + "/instances/" + testInstance
	if _, err := c.nodes["n2"].inst.checkProfile(inst, "p", true); err != nil {
		t.Fatalf("n2's profile check: %v", err)
	}
	if err := ia["n3"].DeleteAppProfile(ctx, testInstance, "p"); err != nil {
		t.Fatal(err)
	}
	// Before any admin read through n2: its background mirror.
	testkit.Eventually(t, "n2's profile check to refuse the deleted profile", 10*time.Second, func() (bool, string) {
		_, err := c.nodes["n2"].inst.checkProfile(inst, "p", true)
		return status.Code(err) == codes.NotFound, "check: " + status.Code(err).String()
	})
	for _, id := range []string{"n1", "n2"} {
		if _, err := ia[id].GetAppProfile(ctx, testInstance, "p"); status.Code(err) != codes.NotFound {
			t.Fatalf("get through %s after the delete through n3: %v", id, err)
		}
		if got := listProfiles(t, ia[id]); len(got) != 1 {
			t.Fatalf("list through %s after the delete: %v", id, got)
		}
	}
	// A cluster's settings too.
	if err := ia["n1"].UpdateCluster(ctx, testInstance, "ebbtable", 7); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n2", "n3"} {
		ci, err := ia[id].GetCluster(ctx, testInstance, "ebbtable")
		if err != nil || ci.ServeNodes != 7 {
			t.Fatalf("cluster through %s: %+v %v", id, ci, err)
		}
	}
}

// A node that kept app profiles in its own metadata (before cluster mode
// kept them in etcd, or serving alone) copies them into etcd when it
// starts: every node serves them.
func TestClusterInstanceMetaMoved(t *testing.T) {
	t.Parallel()
	c := newIAMCluster(t, false, "n2")
	dir := filepath.Join(t.TempDir(), "n1")
	alone, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := alone.Start(); err != nil {
		alone.Close()
		t.Fatal(err)
	}
	ctx := context.Background()
	iac := testkit.InstanceAdmin(t, alone.Addr(), testProject)
	route := &bigtable.SingleClusterRoutingConfig{ClusterID: "ebbtable"}
	for _, id := range []string{"kept", "gone"} {
		if _, err := iac.CreateAppProfile(ctx, bigtable.ProfileConf{InstanceID: testInstance, ProfileID: id, Description: "before", RoutingConfig: route}); err != nil {
			t.Fatal(err)
		}
	}
	if err := iac.DeleteAppProfile(ctx, testInstance, "gone"); err != nil {
		t.Fatal(err)
	}
	alone.Close()
	c.start("n1", dir)
	for _, id := range []string{"n1", "n2"} {
		a := c.instanceAdmin(id, "")
		if p, err := a.GetAppProfile(ctx, testInstance, "kept"); err != nil || p.GetDescription() != "before" {
			t.Fatalf("the moved profile through %s: %v %v", id, p, err)
		}
		if _, err := a.GetAppProfile(ctx, testInstance, "gone"); status.Code(err) != codes.NotFound {
			t.Fatalf("the deleted profile through %s: %v", id, err)
		}
	}
}

// A request through a node that forwards it to the tablet's owner is
// checked against its app profile as one served where it arrives: an
// unknown profile is NotFound, one just made through the forwarding node
// is served.
func TestClusterInstanceMetaForwarded(t *testing.T) {
	t.Parallel()
	c := newIAMCluster(t, false, "n1", "n2")
	c.createTable("n1", "")
	ctx := context.Background()
	for _, id := range []string{"n1", "n2"} {
		tbl := testkit.Client(t, c.nodes[id].Addr(), testProject, testInstance, "nope").Open("t")
		if _, err := tbl.ReadRow(ctx, "r"); status.Code(err) != codes.NotFound {
			t.Fatalf("ReadRow through %s with an unknown profile: %v", id, err)
		}
		if err := writeScale(t, tbl, "r", "v"); status.Code(err) != codes.NotFound {
			t.Fatalf("write through %s with an unknown profile: %v", id, err)
		}
		pid := "made-on-" + id
		if _, err := c.instanceAdmin(id, "").CreateAppProfile(ctx, bigtable.ProfileConf{InstanceID: testInstance, ProfileID: pid,
			RoutingConfig: &bigtable.SingleClusterRoutingConfig{ClusterID: "ebbtable"}}); err != nil {
			t.Fatal(err)
		}
		tbl = testkit.Client(t, c.nodes[id].Addr(), testProject, testInstance, pid).Open("t")
		if err := writeScale(t, tbl, "r", "v"); err != nil {
			t.Fatalf("write through %s with profile %s: %v", id, pid, err)
		}
		if _, err := tbl.ReadRow(ctx, "r"); err != nil {
			t.Fatalf("ReadRow through %s with profile %s: %v", id, pid, err)
		}
	}
}
