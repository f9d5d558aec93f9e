package server

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
)

// TestClusterJoinsCluster: two clusters of two nodes each peer with each
// other. Cluster a (n1, n2; failover) holds rows; cluster b (m1, m2, its
// own etcd) joins it with m2 started with --join (m1 runs already): the
// copy lands on both of b's nodes, and b then pulls through m1 (its
// smallest id) from the checkpoints m2 wrote. Writes through every node
// of both clusters reach every node of the other; an app profile made on
// a reaches both of b's nodes (the puller shares the peer's metadata
// through etcd); the non-pulling m2 reports the delay; b knows a's nodes.
// Then n1 — a's puller and the node b pulls from — is killed while n2's
// pulls from b are held: n2 takes n1's tablets over, b turns to n2 by
// itself (a's writes after the kill reach b), and once n2 pulls for a the
// writes made on both sides converge, read through every live node. IAM
// policies travel both ways (clusterIAMBothWays).
func TestClusterJoinsCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := startScaleClusterTuned(t, 0, func(o *Options) {
		o.ClusterID = "a"
		o.Cluster.Failover = true
		o.Cluster.LeaseTTL = time.Second
		o.Cluster.CheckpointInterval = time.Hour
	}, "n1", "n2")
	a.createTable(t, "n1", "g", "n")

	var mu sync.Mutex
	want := map[string]string{}
	write := func(n *scaleNode, row, val string) {
		t.Helper()
		if err := writeScale(t, n.client.Open("t"), row, val); err != nil {
			t.Fatalf("write %s through %s: %v", row, n.id, err)
		}
		mu.Lock()
		want[row] = val
		mu.Unlock()
	}
	for i, l := range letters() {
		write(a.nodes[[]string{"n1", "n2"}[i%2]], l+"-0", "before "+l)
	}

	b := newScaleCluster(t, &scaleCluster{})
	for _, id := range []string{"m1", "m2"} {
		b.tune = func(o *Options) {
			o.ClusterID = "b"
			if id == "m2" {
				o.Join = a.nodes["n1"].srv.Addr()
			}
		}
		n := b.start(t, id, filepath.Join(t.TempDir(), id))
		t.Cleanup(n.stop)
	}

	// same: every given node reads the table alike, exactly the
	// acknowledged writes.
	same := func(via ...*scaleNode) func() (bool, string) {
		return func() (bool, string) {
			mu.Lock()
			var lines []string
			for row, v := range want {
				lines = append(lines, fmt.Sprintf("%s f f:c 1000 %s", row, v))
			}
			mu.Unlock()
			sort.Strings(lines)
			w := strings.Join(lines, "\n")
			for _, n := range via {
				got, _, err := dumpVia(n.client, "t")
				if err != nil {
					return false, n.id + ": " + err.Error()
				}
				if got != w {
					return false, fmt.Sprintf("through %s: %s", n.id, firstDiff(w, got))
				}
			}
			return true, ""
		}
	}
	all := []*scaleNode{a.nodes["n1"], a.nodes["n2"], b.nodes["m1"], b.nodes["m2"]}
	eventually(t, "the copy through every node of b", same(all...))
	owners := map[string]bool{}
	d, _ := b.nodes["m1"].srv.ClusterMember().Directory(scaleTable)
	for _, tb := range d.Tablets {
		owners[tb.Owner] = true
	}
	if len(owners) != 2 {
		t.Fatalf("b's tablets are not on both nodes: %+v", d.Tablets)
	}

	// Writes through every node of both clusters.
	for i, l := range letters() {
		write(all[i%4], l+"-1", fmt.Sprintf("from %s %s", all[i%4].id, l))
	}
	eventually(t, "writes on both sides everywhere", same(all...))
	if !b.nodes["m1"].srv.cluster.pullsHere() || b.nodes["m2"].srv.cluster.pullsHere() {
		t.Fatal("m1 should pull for b")
	}

	// a's metadata on both of b's nodes; the delay on the one that does
	// not pull; a's nodes known to b.
	iac := testkit.InstanceAdmin(t, a.nodes["n1"].srv.Addr(), testProject)
	if _, err := iac.CreateAppProfile(ctx, bigtable.ProfileConf{InstanceID: testInstance, ProfileID: "from-a",
		RoutingPolicy: bigtable.MultiClusterRouting}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"m1", "m2"} {
		biac := testkit.InstanceAdmin(t, b.nodes[id].srv.Addr(), testProject)
		eventually(t, "a's app profile on "+id, func() (bool, string) {
			_, err := biac.GetAppProfile(ctx, testInstance, "from-a")
			return err == nil, fmt.Sprint(err)
		})
	}
	clusterIAMBothWays(t, all)

	eventually(t, "the delay of a on m2", func() (bool, string) {
		st, err := ebbadminpb.NewEbbAdminClient(b.nodes["m2"].conn).ReplicationStatus(ctx, &ebbadminpb.ReplicationStatusRequest{Project: testProject, Instance: testInstance})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range st.GetPeers() {
			if p.GetId() == "a" && p.MaxDelaySeconds != nil && p.GetMaxDelaySeconds() < 10 {
				return true, ""
			}
		}
		return false, fmt.Sprint(st.GetPeers())
	})
	eventually(t, "b to know a's nodes", func() (bool, string) {
		p, _ := b.nodes["m1"].srv.peers.get("a")
		ok := slices.Contains(p.Nodes, a.nodes["n1"].srv.Addr()) && slices.Contains(p.Nodes, a.nodes["n2"].srv.Addr())
		return ok, fmt.Sprint(p)
	})

	// n1 dies: b turns to n2 by itself (a's pulls, which would tell b
	// the new puller's address, are held on n2), then a pulls through n2.
	link := func(paused bool) {
		t.Helper()
		if _, err := ebbadminpb.NewEbbAdminClient(a.nodes["n2"].conn).ReplicationLink(ctx, &ebbadminpb.ReplicationLinkRequest{
			Project: testProject, Instance: testInstance, Peer: "b", Paused: paused}); err != nil {
			t.Fatal(err)
		}
	}
	link(true)
	a.nodes["n1"].crash()
	live := []*scaleNode{a.nodes["n2"], b.nodes["m1"], b.nodes["m2"]}
	for i, l := range letters() {
		n := live[i%3]
		// n2 takes n1's tablets over within a few seconds; until then a
		// write to them fails UNAVAILABLE (written again: the same cell).
		eventually(t, "a write through "+n.id, func() (bool, string) {
			err := writeScale(t, n.client.Open("t"), l+"-2", "after "+n.id)
			return err == nil, fmt.Sprint(err)
		})
		mu.Lock()
		want[l+"-2"] = "after " + n.id
		mu.Unlock()
	}
	eventually(t, "writes after n1 died on b", same(b.nodes["m1"], b.nodes["m2"]))
	link(false)
	eventually(t, "writes after n1 died everywhere", same(live...))
}

// TestClusterJoinStartsOver: a copy that stopped (its node is gone) is
// thrown away by the node that joins next: the tables it made are
// deleted, the seed's data copied again, and replication runs on. Here
// the seed is a process alone, and the stopped copy left a table t
// holding a row the seed never had.
func TestClusterJoinStartsOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := startCluster(t, "a", "", "")
	if err := a.admin.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := a.admin.CreateColumnFamily(ctx, "t", "f"); err != nil {
		t.Fatal(err)
	}
	for _, l := range letters() {
		if err := writeScale(t, a.client.Open("t"), l, "a "+l); err != nil {
			t.Fatal(err)
		}
	}
	b := newScaleCluster(t, &scaleCluster{tune: func(o *Options) { o.ClusterID = "b" }})
	m1 := b.start(t, "m1", filepath.Join(t.TempDir(), "m1"))
	t.Cleanup(m1.stop)
	b.createTable(t, "m1")
	if err := writeScale(t, m1.client.Open("t"), "stale", "left by the stopped copy"); err != nil {
		t.Fatal(err)
	}
	if _, err := m1.srv.ClusterMember().PutReplJoin(ctx, []byte(`{"seed":"`+a.srv.Addr()+`","node":"gone"}`), 0); err != nil {
		t.Fatal(err)
	}
	b.tune = func(o *Options) { o.ClusterID, o.Join = "b", a.srv.Addr() }
	m2 := b.start(t, "m2", filepath.Join(t.TempDir(), "m2"))
	t.Cleanup(m2.stop)
	if err := writeScale(t, a.client.Open("t"), "z-later", "after the join"); err != nil {
		t.Fatal(err)
	}
	want, _, err := dumpVia(a.client, "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*scaleNode{m1, m2} {
		eventually(t, "a's rows, and only those, through "+n.id, func() (bool, string) {
			got, _, err := dumpVia(n.client, "t")
			if err != nil {
				return false, err.Error()
			}
			return got == want, firstDiff(want, got)
		})
	}
	processIAMBothWays(t, a, m1, m2) // clusteriamrepl_test.go
}
