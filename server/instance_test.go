package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

func (env *testEnv) instanceAdmin(t *testing.T) *bigtable.InstanceAdminClient {
	t.Helper()
	conn, err := grpc.NewClient(env.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	iac, err := bigtable.NewInstanceAdminClient(context.Background(), testProject, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { iac.Close(); conn.Close() })
	return iac
}

func TestInstanceClusters(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	iac := env.instanceAdmin(t)

	info, err := iac.InstanceInfo(ctx, testInstance)
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != testInstance {
		t.Fatalf("instance name %q", info.Name)
	}
	cs, err := iac.Clusters(ctx, testInstance)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Name != "ebbtable" || cs[0].State != "READY" {
		t.Fatalf("clusters before create: %+v", cs)
	}
	// CreateCluster finishes once a process serving cluster b has joined.
	created := make(chan error, 1)
	go func() {
		created <- iac.CreateCluster(ctx, &bigtable.ClusterConfig{InstanceID: testInstance, ClusterID: "b", Zone: "z1", NumNodes: 1, StorageType: bigtable.SSD})
	}()
	eventually(t, "cluster b CREATING", func() (bool, string) {
		c, err := iac.GetCluster(ctx, testInstance, "b")
		return err == nil && c.State == "CREATING", fmt.Sprint(c, err)
	})
	select {
	case err := <-created:
		t.Fatalf("CreateCluster returned before b joined: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	b := startCluster(t, "b", env.srv.Addr(), "")
	select {
	case err := <-created:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("CreateCluster did not finish after b joined")
	}
	if c, err := iac.GetCluster(ctx, testInstance, "b"); err != nil || c.State != "READY" {
		t.Fatalf("cluster b after joining: %+v %v", c, err)
	}
	err = iac.CreateCluster(ctx, &bigtable.ClusterConfig{InstanceID: testInstance, ClusterID: "b", Zone: "z1", NumNodes: 1, StorageType: bigtable.SSD})
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second create: %v", err)
	}
	if err := iac.UpdateCluster(ctx, testInstance, "b", 3); err != nil {
		t.Fatal(err)
	}
	c, err := iac.GetCluster(ctx, testInstance, "b")
	if err != nil {
		t.Fatal(err)
	}
	if c.Zone != "z1" || c.ServeNodes != 3 {
		t.Fatalf("cluster b: %+v", c)
	}
	insts, err := iac.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || insts[0].Name != testInstance {
		t.Fatalf("instances: %+v", insts)
	}

	// Durable: a restart still lists cluster b.
	env.srv.Close()
	env.start(t, Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: env.dir, Clock: env.clock})
	iac = env.instanceAdmin(t)
	cs, err = iac.Clusters(ctx, testInstance)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 {
		t.Fatalf("clusters after restart: %+v", cs)
	}
	if _, err := iac.CreateAppProfile(ctx, bigtable.ProfileConf{InstanceID: testInstance, ProfileID: "to-b",
		RoutingConfig: &bigtable.SingleClusterRoutingConfig{ClusterID: "b"}}); err != nil {
		t.Fatal(err)
	}
	if err := iac.DeleteCluster(ctx, testInstance, "b"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("delete a routed-to cluster: %v", err)
	}
	if err := iac.DeleteAppProfile(ctx, testInstance, "to-b"); err != nil {
		t.Fatal(err)
	}
	b.stop()
	if err := iac.DeleteCluster(ctx, testInstance, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := iac.GetCluster(ctx, testInstance, "b"); status.Code(err) != codes.NotFound {
		t.Fatalf("get after delete: %v", err)
	}
	if err := iac.DeleteCluster(ctx, testInstance, "ebbtable"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("delete own cluster: %v", err)
	}
}

func TestAppProfiles(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	iac := env.instanceAdmin(t)
	if err := env.admin.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := env.admin.CreateColumnFamily(ctx, "t", "f"); err != nil {
		t.Fatal(err)
	}
	mk := func(id string, rc bigtable.RoutingPolicyConfig) {
		t.Helper()
		if _, err := iac.CreateAppProfile(ctx, bigtable.ProfileConf{InstanceID: testInstance, ProfileID: id, RoutingConfig: rc}); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
	}
	mk("single-tx", &bigtable.SingleClusterRoutingConfig{ClusterID: "ebbtable", AllowTransactionalWrites: true})
	mk("single", &bigtable.SingleClusterRoutingConfig{ClusterID: "ebbtable"})
	mk("multi", &bigtable.MultiClusterRoutingUseAnyConfig{})
	if _, err := iac.CreateAppProfile(ctx, bigtable.ProfileConf{InstanceID: testInstance, ProfileID: "bad",
		RoutingConfig: &bigtable.SingleClusterRoutingConfig{ClusterID: "nope"}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unknown cluster: %v", err)
	}
	var ids []string
	it := iac.ListAppProfiles(ctx, testInstance)
	for {
		p, err := it.Next()
		if err != nil {
			break
		}
		ids = append(ids, p.GetName())
	}
	if len(ids) != 4 { // default + 3
		t.Fatalf("profiles: %v", ids)
	}

	client := func(profile string) *bigtable.Table {
		return testkit.Client(t, env.srv.Addr(), testProject, testInstance, profile).Open("t")
	}
	set := bigtable.NewMutation()
	set.Set("f", "c", 1000, []byte("v"))
	rmw := bigtable.NewReadModifyWrite()
	rmw.AppendValue("f", "c", []byte("x"))
	cond := bigtable.NewCondMutation(bigtable.LatestNFilter(1), set, nil)

	for _, tc := range []struct {
		profile string
		write   codes.Code // MutateRow
		tx      codes.Code // CheckAndMutateRow and ReadModifyWriteRow
	}{
		{"", codes.OK, codes.OK},
		{"default", codes.OK, codes.OK},
		{"single-tx", codes.OK, codes.OK},
		{"single", codes.OK, codes.FailedPrecondition},
		{"multi", codes.OK, codes.FailedPrecondition},
		{"missing", codes.NotFound, codes.NotFound},
	} {
		tbl := client(tc.profile)
		if err := tbl.Apply(ctx, "r", set); status.Code(err) != tc.write {
			t.Errorf("%q Apply: %v, want %v", tc.profile, err, tc.write)
		}
		if err := tbl.Apply(ctx, "r", cond); status.Code(err) != tc.tx {
			t.Errorf("%q CheckAndMutate: %v, want %v", tc.profile, err, tc.tx)
		}
		if _, err := tbl.ApplyReadModifyWrite(ctx, "r", rmw); status.Code(err) != tc.tx {
			t.Errorf("%q ReadModifyWrite: %v, want %v", tc.profile, err, tc.tx)
		}
	}

	// Update: allow transactional writes on "single"; then delete it.
	if err := iac.UpdateAppProfile(ctx, testInstance, "single", bigtable.ProfileAttrsToUpdate{
		RoutingConfig: &bigtable.SingleClusterRoutingConfig{ClusterID: "ebbtable", AllowTransactionalWrites: true}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client("single").ApplyReadModifyWrite(ctx, "r", rmw); err != nil {
		t.Fatalf("after update: %v", err)
	}
	if err := iac.DeleteAppProfile(ctx, testInstance, "single"); err != nil {
		t.Fatal(err)
	}
	if _, err := iac.GetAppProfile(ctx, testInstance, "single"); status.Code(err) != codes.NotFound {
		t.Fatalf("get after delete: %v", err)
	}
}
