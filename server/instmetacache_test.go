package server

import (
	"context"
	"testing"

	"cloud.google.com/go/bigtable"
)

// Instance deletion removes every metadata entry of the instance; the
// engine serves instance metadata from memory (table/instancecache.go), so
// the reads after the deletion, and after a new instance of the same name,
// must see the store as it is now.
func TestInstanceMetaReadAfterDelete(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	iac := env.instanceAdmin(t)
	create := func(display string) {
		t.Helper()
		err := iac.CreateInstanceWithClusters(ctx, &bigtable.InstanceWithClustersConfig{
			InstanceID: "made", DisplayName: display, InstanceType: bigtable.DEVELOPMENT,
			Clusters: []bigtable.ClusterConfig{{ClusterID: "c1", Zone: "zone-a", NumNodes: 1}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	create("first")
	if info, err := iac.InstanceInfo(ctx, "made"); err != nil || info.DisplayName != "first" {
		t.Fatalf("instance: %+v %v", info, err)
	}
	if cs, err := iac.Clusters(ctx, "made"); err != nil || len(cs) != 1 {
		t.Fatalf("clusters: %v %v", cs, err)
	}
	if err := iac.DeleteInstance(ctx, "made"); err != nil {
		t.Fatal(err)
	}
	// What is left is the implicit instance every name has.
	if info, err := iac.InstanceInfo(ctx, "made"); err != nil || info.DisplayName == "first" {
		t.Fatalf("instance after its deletion: %+v %v", info, err)
	}
	n := 0
	if err := env.srv.engine.InstanceMeta(kindCluster, "projects/"+testProject+"/instances/made", func(string, string, []byte) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("%d clusters listed after the deletion (%v)", n, err)
	}
	create("second")
	if info, err := iac.InstanceInfo(ctx, "made"); err != nil || info.DisplayName != "second" {
		t.Fatalf("instance made again: %+v %v", info, err)
	}
}
