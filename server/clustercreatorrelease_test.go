package server

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
)

// refMarkersOf counts the reference markers of creator id in the shared
// store.
func refMarkersOf(t *testing.T, sc *scaleCluster, creator uint64) int {
	t.Helper()
	objs, err := os.ReadDir(sc.shared)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range objs {
		if strings.Contains(o.Name(), ".ref."+strconv.FormatUint(creator, 10)+".") {
			n++
		}
	}
	return n
}

// A node id that ran on two data directories (the first one's
// references never released: a fresh start of a version without the
// release) is given up: the references of both its creator ids are
// released, not only the latest's, and every row still reads.
func TestFailoverReleaseEveryCreator(t *testing.T) {
	t.Parallel()
	sc := startFailoverCluster(t)
	sc.createTable(t, "n1", "g", "p") // n1 [,g), n2 [g,p), n3 [p,)
	ctx := context.Background()
	tbl := sc.nodes["n2"].client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	n1 := sc.nodes["n1"]
	if err := n1.srv.Engine().Compact(ctx, []byte{0}, []byte{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	first := n1.srv.cluster.creator
	if refMarkersOf(t, sc, first) == 0 {
		t.Fatal("n1 holds no shared object")
	}
	takenOver := func(what string) {
		testkit.Eventually(t, what, 30*time.Second, func() (bool, string) {
			got := owners(t, sc.nodes["n2"])
			return !strings.Contains(got, "n1"), got
		})
	}
	// n1 dies, its disk is lost; it starts again on an empty directory
	// without releasing the first engine's references.
	n1.crash()
	takenOver("n1's tablet to be taken over")
	if err := os.RemoveAll(n1.dir); err != nil {
		t.Fatal(err)
	}
	sc.knobs.skipReleasePrevious.set(true)
	testkit.Eventually(t, "n1 to start on an empty directory", 30*time.Second, func() (bool, string) {
		err := sc.tryStart(t, "n1", n1.dir)
		return !errors.Is(err, clusteretcd.ErrNodeLive), "old lease still live"
	})
	n1 = sc.start(t, "n1", n1.dir)
	t.Cleanup(n1.stop)
	sc.knobs.skipReleasePrevious.unset()
	second := n1.srv.cluster.creator
	if second == first || refMarkersOf(t, sc, first) == 0 {
		t.Fatalf("creators %d then %d; the first's markers: %d", first, second, refMarkersOf(t, sc, first))
	}
	// The second engine writes shared objects of its own.
	dirs, err := sc.nodes["n2"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.nodes["n2"].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: dirs.Tablets[0].Id, To: "n1"}); err != nil {
		t.Fatal(err)
	}
	for _, r := range letters()[:6] {
		if err := writeScale(t, tbl, r, "w"+r); err != nil {
			t.Fatal(err)
		}
	}
	if err := n1.srv.Engine().Compact(ctx, []byte{0}, []byte{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	if refMarkersOf(t, sc, second) == 0 {
		t.Fatal("n1's second engine holds no shared object")
	}
	// n1 dies again and is given up.
	n1.crash()
	takenOver("n1's tablet to be taken over again")
	n2 := sc.nodes["n2"]
	if err := n2.srv.cluster.fail.releaseDead(ctx, "n1", n2.srv.ClusterMember().Directories()); err != nil {
		t.Fatalf("release n1: %v", err)
	}
	if a, b := refMarkersOf(t, sc, first), refMarkersOf(t, sc, second); a != 0 || b != 0 {
		t.Errorf("after n1's release: %d reference markers of its first creator id %d, %d of its second %d", a, first, b, second)
	}
	if ids, err := n2.srv.ClusterMember().CreatorIDs(ctx, "n1"); err != nil || len(ids) != 1 {
		t.Errorf("n1's creator ids after its release: %v %v (want only the latest record)", ids, err)
	}
	for _, via := range []string{"n2", "n3"} {
		keys, vals := readScale(t, sc.nodes[via])
		if len(keys) != 26 || vals["a"] != "wa" || vals["f"] != "wf" || vals["g"] != "vg" || vals["z"] != "vz" {
			t.Errorf("via %s: %d rows, a=%q f=%q g=%q z=%q", via, len(keys), vals["a"], vals["f"], vals["g"], vals["z"])
		}
	}
}
