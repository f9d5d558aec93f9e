package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/storage"
)

// TestScaleOutFreshDirNewCreator: a node that starts again under its node
// id on an empty data directory (its disk lost, its tablets drained away
// by reference) gets a creator id no database had (Pebble would otherwise
// name its new shared objects like the old ones the other nodes still
// read: storage's TestSharedCreatorReuseOverwrites), recorded in the
// directory and in etcd; a restart on the same directory keeps it; every
// row moved away by reference stays readable while the new engine writes
// and compacts shared SSTables.
func TestScaleOutFreshDirNewCreator(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2")
	sc.createTable(t, "n1", "n") // n1 owns [,n), n2 [n,)
	ctx := context.Background()
	tbl := sc.nodes["n2"].client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	n1 := sc.nodes["n1"]
	old := n1.srv.cluster.creator
	// n1's rows go to the shared store (L6), then to n2 by reference.
	if err := n1.srv.Engine().Compact(ctx, nil, []byte{0xff}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.nodes["n2"].ops.DrainNode(ctx, &clusterpb.DrainNodeRequest{Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	objs, _ := os.ReadDir(sc.shared)
	mine := "-" + strconv.FormatUint(old, 10) + "-"
	shared := 0
	for _, o := range objs {
		if strings.Contains(o.Name(), mine) {
			shared++
		}
	}
	if shared == 0 {
		t.Fatalf("no shared object of n1's creator %d in %v", old, objs)
	}
	// n1's disk is lost; it starts again under its id on an empty one.
	n1.stop()
	if err := os.RemoveAll(n1.dir); err != nil {
		t.Fatal(err)
	}
	n1 = sc.start(t, "n1", n1.dir)
	t.Cleanup(n1.stop)
	fresh := n1.srv.cluster.creator
	if fresh == 0 || fresh == old {
		t.Fatalf("n1 on an empty data directory has creator id %d, before %d: its new shared objects may replace the old ones", fresh, old)
	}
	if b, err := os.ReadFile(filepath.Join(n1.dir, clusterCreatorFile)); err != nil || strings.TrimSpace(string(b)) != strconv.FormatUint(fresh, 10) {
		t.Errorf("the data directory records creator %q (%v), want %d", b, err, fresh)
	}
	if id, _, err := sc.nodes["n2"].srv.ClusterMember().CreatorID(ctx, "n1"); err != nil || id != fresh {
		t.Errorf("etcd records n1's creator as %d (%v), want %d", id, err, fresh)
	}
	if sc.nodes["n2"].srv.cluster.creator == fresh {
		t.Errorf("n1 and n2 share creator id %d", fresh)
	}
	// n1 takes its tablet back and writes and compacts shared SSTables
	// of its own; n2's rows (on the old objects) and n1's read right.
	dirs, err := sc.nodes["n2"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.nodes["n2"].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: dirs.Tablets[0].Id, To: "n1"}); err != nil {
		t.Fatal(err)
	}
	for round := range 4 {
		for _, r := range letters()[:13] {
			if err := writeScale(t, tbl, r, "w"+r+strconv.Itoa(round)); err != nil {
				t.Fatal(err)
			}
		}
		if err := n1.srv.Engine().Compact(ctx, nil, []byte{0xff}); err != nil {
			t.Fatal(err)
		}
	}
	keys, vals := readScale(t, sc.nodes["n2"])
	if len(keys) != 26 || vals["a"] != "wa3" || vals["z"] != "vz" {
		t.Fatalf("%d rows, a=%q z=%q", len(keys), vals["a"], vals["z"])
	}
	// A restart on the same directory keeps its creator id.
	n1.stop()
	n1 = sc.start(t, "n1", n1.dir)
	t.Cleanup(n1.stop)
	if got := n1.srv.cluster.creator; got != fresh {
		t.Errorf("after a restart on its directory n1 has creator %d, want %d", got, fresh)
	}
	// A data directory whose engine predates the counter keeps the id
	// its Pebble recorded, the one derived from the node id.
	store, err := storage.SharedDir(sc.shared)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	dir := filepath.Join(t.TempDir(), "n3")
	db, err := storage.Open(storage.Options{Dir: dir, Logger: slog.New(slog.DiscardHandler), Shared: &storage.SharedOptions{Store: store, CreatorID: creatorID("n3")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	n3 := sc.start(t, "n3", dir)
	t.Cleanup(n3.stop)
	if got := n3.srv.cluster.creator; got != creatorID("n3") {
		t.Errorf("n3 on an engine from before has creator %d, want %d", got, creatorID("n3"))
	}
}
