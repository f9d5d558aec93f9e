package server

import (
	"context"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
)

// A move sent through a node whose directory is stale (it names an owner
// that no longer owns the tablet) is passed on again by that node, after
// reading the directory from etcd: the caller gets the move, not ABORTED.
func TestScaleOutMoveThroughStaleNode(t *testing.T) {
	sc := startScaleCluster(t, "n1", "n2", "n3")
	sc.createTable(t, "n1", "k")
	ctx := context.Background()
	m1 := sc.nodes["n1"].srv.ClusterMember()
	stale, _ := m1.Directory(scaleTable)
	tb := stale.Tablets[1]
	others := map[string]string{"n1": "n2", "n2": "n3", "n3": "n1"}
	mid, last := others[tb.Owner], others[others[tb.Owner]]
	if _, err := sc.nodes[tb.Owner].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tb.ID, To: mid}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "n1 to see the move", 10*time.Second, func() (bool, string) {
		d, _ := m1.Directory(scaleTable)
		t2, _, _ := d.Find(tb.ID)
		return t2.Owner == mid, t2.Owner
	})
	// Make n1's view the one before the move, and move again through n1.
	m1.StaleDirectory(stale)
	resp, err := sc.nodes["n1"].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tb.ID, To: last})
	if err != nil {
		t.Fatalf("move through a stale node: %v", err)
	}
	if resp.From != mid || resp.To != last {
		t.Errorf("moved %s → %s, want %s → %s", resp.From, resp.To, mid, last)
	}
	// The move is made by the tablet's owner; n1's cache follows etcd's
	// watch.
	testkit.Eventually(t, "n1 to see the second move", 10*time.Second, func() (bool, string) {
		d, _ := m1.Directory(scaleTable)
		got, _, _ := d.Find(tb.ID)
		return got.Owner == last, got.Owner
	})
}
