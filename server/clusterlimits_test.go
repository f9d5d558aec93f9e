package server

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
			t.Fatalf("%s: CreateInstance through both nodes at once: %d succeeded, %d AlreadyExists; want exactly one each", what, ok, exists)
		}
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
