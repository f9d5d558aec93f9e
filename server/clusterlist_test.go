package server

import (
	"context"
	"testing"

	"github.com/ebbtable/ebbtable/server/clusterpb"
)

// TestScaleOutListTabletsCurrent: a listing through a node whose cache
// lags (its watch held back) shows a move another node just made:
// ListTablets reads etcd, not the cache (TestScaleOutDrainStopsAndGoesOn
// once failed on the stale one: the drain's moves ran on the owner and
// the test listed through a third node).
func TestScaleOutListTabletsCurrent(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	sc.createTable(t, "n1", "n") // n1 owns [,n), n2 [n,)
	ctx := context.Background()
	list := func() *clusterpb.ListTabletsResponse {
		t.Helper()
		r, err := sc.nodes["n3"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := list()
	if len(r.Tablets) != 2 || r.Tablets[1].Owner != "n2" {
		t.Fatalf("tablets: %v", r.Tablets)
	}
	release := sc.nodes["n3"].srv.cluster.m.HoldWatch()
	defer release()
	if _, err := sc.nodes["n2"].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: r.Tablets[1].Id, To: "n1"}); err != nil {
		t.Fatal(err)
	}
	if got := list().Tablets[1].Owner; got != "n1" {
		t.Fatalf("n3 lists the tablet on %s right after its move to n1", got)
	}
	release()
}
