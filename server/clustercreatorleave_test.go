package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/storage"
)

// Without --failover, a node that leaves cleanly (drained, then stopped)
// is released: the reference markers of its creator id go, the objects
// the nodes its tablets moved to read stay (every row reads after a full
// compaction), its old data directory is refused; not while it is live.
func TestScaleOutCreatorReleasedOnCleanLeave(t *testing.T) {
	sc := startScaleClusterTuned(t, 0, func(o *Options) {
		o.Cluster.ReleaseDeadAfter = time.Nanosecond
	}, "n1", "n2", "n3")
	sc.createTable(t, "n1", "g", "p") // n1 [,g), n2 [g,p), n3 [p,)
	ctx := context.Background()
	tbl := sc.nodes["n2"].client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	n1, n3 := sc.nodes["n1"], sc.nodes["n3"]
	if err := n3.srv.Engine().Compact(ctx, []byte{0}, []byte{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	creator := n3.srv.cluster.creator
	if refMarkersOf(t, sc, creator) == 0 {
		t.Fatal("n3 holds no shared object")
	}
	if _, err := n1.ops.DrainNode(ctx, &clusterpb.DrainNodeRequest{Node: "n3"}); err != nil {
		t.Fatalf("drain n3: %v", err)
	}
	if got := owners(t, n1); strings.Contains(got, "n3") {
		t.Fatalf("after the drain: %s", got)
	}
	// Drained but live: kept.
	n1.srv.cluster.releaseLeft(ctx)
	n1.srv.cluster.releaseLeft(ctx)
	if refMarkersOf(t, sc, creator) == 0 {
		t.Fatal("a live drained node was released")
	}
	n3.stop()
	testkit.Eventually(t, "n1 to see n3 gone", 10*time.Second, func() (bool, string) {
		_, live := n1.srv.ClusterMember().Node("n3")
		return !live, "n3 still listed"
	})
	testkit.Eventually(t, "n3's references to be released", 10*time.Second, func() (bool, string) {
		n1.srv.cluster.releaseLeft(ctx)
		n := refMarkersOf(t, sc, creator)
		return n == 0, fmt.Sprintf("%d reference markers of creator %d", n, creator)
	})
	if _, err := storage.GetObject(ctx, n1.srv.cluster.store, storage.ReleasedMarker("n3")); err != nil {
		t.Errorf("n3's released marker: %v", err)
	}
	for _, n := range []*scaleNode{n1, sc.nodes["n2"]} {
		if err := n.srv.Engine().Compact(ctx, []byte{0}, []byte{0xff, 0xff}); err != nil {
			t.Fatalf("compact %s after n3's release: %v", n.id, err)
		}
		keys, vals := readScale(t, n)
		if len(keys) != 26 || vals["q"] != "vq" || vals["z"] != "vz" {
			t.Errorf("via %s: %d rows, q=%q z=%q", n.id, len(keys), vals["q"], vals["z"])
		}
	}
	srv, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: n3.dir, Cluster: &ClusterOptions{
		Etcd: []string{sc.etcd}, Prefix: sc.prefix, NodeID: "n3", LeaseTTL: 2 * time.Second, SharedStorage: "file://" + sc.shared}})
	if err == nil {
		err = srv.Start()
		srv.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "must not be used again") {
		t.Errorf("n3 on its old data directory after its release: %v", err)
	}
}
