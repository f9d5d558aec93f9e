package server

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Issue 22: an instance's display name and labels, updated through one
// node of a cluster, are what every node answers (GetInstance and
// ListInstances), and a later partial update through another node keeps
// the fields it does not name.
func TestClusterInstanceMetaInstance(t *testing.T) {
	t.Parallel()
	c := newIAMCluster(t, false, "n1", "n2", "n3")
	ctx := context.Background()
	ia := map[string]*bigtable.InstanceAdminClient{}
	for _, id := range []string{"n1", "n2", "n3"} {
		ia[id] = c.instanceAdmin(id, "")
	}
	check := func(what, display string, labels map[string]string) {
		t.Helper()
		for _, id := range []string{"n1", "n2", "n3"} {
			info, err := ia[id].InstanceInfo(ctx, testInstance)
			if err != nil {
				t.Fatalf("%s: GetInstance through %s: %v", what, id, err)
			}
			if info.DisplayName != display || fmt.Sprint(info.Labels) != fmt.Sprint(labels) {
				t.Fatalf("%s: GetInstance through %s: %q %v, want %q %v", what, id, info.DisplayName, info.Labels, display, labels)
			}
			all, err := ia[id].Instances(ctx)
			if err != nil {
				t.Fatalf("%s: ListInstances through %s: %v", what, id, err)
			}
			found := false
			for _, in := range all {
				if in.Name == testInstance {
					found = true
					if in.DisplayName != display || fmt.Sprint(in.Labels) != fmt.Sprint(labels) {
						t.Fatalf("%s: ListInstances through %s: %q %v, want %q %v", what, id, in.DisplayName, in.Labels, display, labels)
					}
				}
			}
			if !found {
				t.Fatalf("%s: ListInstances through %s: %s missing", what, id, testInstance)
			}
		}
	}
	if err := ia["n1"].UpdateInstanceWithClusters(ctx, &bigtable.InstanceWithClustersConfig{InstanceID: testInstance,
		DisplayName: "Orders", Labels: map[string]string{"env": "prod"}}); err != nil {
		t.Fatal(err)
	}
	check("after the update through n1", "Orders", map[string]string{"env": "prod"})
	if err := ia["n2"].UpdateInstanceWithClusters(ctx, &bigtable.InstanceWithClustersConfig{InstanceID: testInstance,
		Labels: map[string]string{"env": "test", "team": "b"}}); err != nil {
		t.Fatal(err)
	}
	check("after the labels update through n2", "Orders", map[string]string{"env": "test", "team": "b"})
	// Deleted through n3, the declaration is gone on every node: the
	// instance is an implicit one again. Its table, made through n1, is
	// gone on every node too (deleted through the schema log, not in n3's
	// engine alone).
	c.createTable("n1", "", "m")
	if err := ia["n3"].DeleteInstance(ctx, testInstance); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if info, err := ia[id].InstanceInfo(ctx, testInstance); err != nil || info.DisplayName != testInstance || len(info.Labels) != 0 {
			t.Fatalf("after DeleteInstance through n3, through %s: %+v %v", id, info, err)
		}
		if tables, err := c.admin(id, "").Tables(ctx); err != nil || len(tables) != 0 {
			t.Fatalf("after DeleteInstance through n3, tables through %s: %v %v", id, tables, err)
		}
	}
	// The name is free again, cluster-wide.
	c.createTable("n2", "")
}

// A node that declared an instance before cluster mode kept declarations
// in etcd copies it into etcd when it starts: every node serves it.
func TestClusterInstanceMetaInstanceMoved(t *testing.T) {
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
	if err := iac.UpdateInstanceWithClusters(ctx, &bigtable.InstanceWithClustersConfig{InstanceID: testInstance, DisplayName: "Before"}); err != nil {
		t.Fatal(err)
	}
	alone.Close()
	c.start("n1", dir)
	for _, id := range []string{"n1", "n2"} {
		info, err := c.instanceAdmin(id, "").InstanceInfo(ctx, testInstance)
		if err != nil || info.DisplayName != "Before" {
			t.Fatalf("the moved declaration through %s: %+v %v", id, info, err)
		}
	}
}

// Two nodes creating the same app profile (or cluster) at the same moment:
// exactly one succeeds, the other gets AlreadyExists. Each node's
// createGate holds its create after the existence check until both got
// there.
func TestClusterInstanceMetaCreateRace(t *testing.T) {
	t.Parallel()
	c := newIAMCluster(t, false, "n1", "n2")
	ctx := context.Background()
	ia := map[string]*bigtable.InstanceAdminClient{"n1": c.instanceAdmin("n1", ""), "n2": c.instanceAdmin("n2", "")}
	var arrived sync.WaitGroup
	release := make(chan struct{})
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
	race := func(what string, create func(node string) error) {
		t.Helper()
		release = make(chan struct{})
		arrived.Add(2)
		errs := make(chan error, 2)
		for _, id := range []string{"n1", "n2"} {
			go func() { errs <- create(id) }()
		}
		arrived.Wait()
		close(release)
		oneWinner(t, what+" through both nodes at once", errs)
	}
	race("CreateAppProfile", func(node string) error {
		_, err := ia[node].CreateAppProfile(ctx, bigtable.ProfileConf{InstanceID: testInstance, ProfileID: "p", Description: node,
			RoutingConfig: &bigtable.SingleClusterRoutingConfig{ClusterID: "ebbtable"}})
		return err
	})
	// The one that won is what both nodes answer.
	p1, err1 := ia["n1"].GetAppProfile(ctx, testInstance, "p")
	p2, err2 := ia["n2"].GetAppProfile(ctx, testInstance, "p")
	if err1 != nil || err2 != nil || p1.GetDescription() != p2.GetDescription() {
		t.Fatalf("after the race: %v %v / %v %v", p1, err1, p2, err2)
	}
	// Deleted, the id can be made again — once.
	if err := ia["n1"].DeleteAppProfile(ctx, testInstance, "p"); err != nil {
		t.Fatal(err)
	}
	race("CreateAppProfile after a delete", func(node string) error {
		_, err := ia[node].CreateAppProfile(ctx, bigtable.ProfileConf{InstanceID: testInstance, ProfileID: "p", Description: node,
			RoutingConfig: &bigtable.SingleClusterRoutingConfig{ClusterID: "ebbtable"}})
		return err
	})
	// The official client's CreateCluster waits for the cluster's process
	// to join: the call itself is what races here.
	raw := map[string]adminpb.BigtableInstanceAdminClient{"n1": adminpb.NewBigtableInstanceAdminClient(c.dial("n1", "")), "n2": adminpb.NewBigtableInstanceAdminClient(c.dial("n2", ""))}
	race("CreateCluster", func(node string) error {
		_, err := raw[node].CreateCluster(ctx, &adminpb.CreateClusterRequest{Parent: "projects/" + testProject + "/instances/" + testInstance, ClusterId: "c2",
			Cluster: &adminpb.Cluster{ServeNodes: 1}})
		return err
	})
}

// oneWinner reads the two answers of a create raced through two nodes:
// exactly one must succeed and the other be refused with AlreadyExists.
func oneWinner(t *testing.T, what string, errs <-chan error) {
	t.Helper()
	ok, exists := 0, 0
	for range 2 {
		switch err := <-errs; status.Code(err) {
		case codes.OK:
			ok++
		case codes.AlreadyExists:
			exists++
		default:
			t.Fatalf("%s: %v", what, err)
		}
	}
	if ok != 1 || exists != 1 {
		t.Fatalf("%s: %d succeeded, %d AlreadyExists; want exactly one each", what, ok, exists)
	}
}
