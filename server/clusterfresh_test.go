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
	"github.com/ebbtable/ebbtable/storage"
)

// tryStart starts node id on dir as sc.start does, but returns the
// server's error instead of failing the test.
func (sc *scaleCluster) tryStart(t *testing.T, id, dir string) error {
	t.Helper()
	opts := Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: dir, Cluster: &ClusterOptions{
		Etcd: []string{sc.etcd}, Prefix: sc.prefix, NodeID: id, LeaseTTL: 2 * time.Second, SharedStorage: "file://" + sc.shared,
		SplitBytes: sc.splitBytes, SplitInterval: 50 * time.Millisecond}, knobs: sc.knobs}
	if sc.tune != nil {
		sc.tune(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		srv.Close()
		return err
	}
	srv.Close()
	return nil
}

// TestFailoverFreshDirOldNodeID: with failover, a node whose disk is lost
// starts again under its node id on an empty data directory before the
// others took its tablets over. It must not serve them empty (nor replace
// the catalog and truncate the log a take-over rebuilds them from): it is
// refused until they are taken over; then it starts owning nothing, does
// not seed its catalog from its previous engine's, and that engine's
// shared-object references are released; every acknowledged row reads.
func TestFailoverFreshDirOldNodeID(t *testing.T) {
	t.Parallel()
	sc := startFailoverCluster(t)
	sc.createTable(t, "n1", "g", "p") // n1 [,g), n2 [g,p), n3 [p,)
	ctx := context.Background()
	tbl := sc.nodes["n2"].client.Open("t")
	want := map[string]string{}
	for _, r := range letters() {
		if err := writeScale(t, tbl, r+"-1", "v"+r); err != nil {
			t.Fatal(err)
		}
		want[r+"-1"] = "v" + r
	}
	n1 := sc.nodes["n1"]
	// Some of n1's rows in shared SSTables (its creator's objects), the
	// rest in its memtable and commit log only.
	if err := n1.srv.Engine().Compact(ctx, []byte{0}, []byte{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"a", "b", "c"} {
		if err := writeScale(t, tbl, r+"-2", "w"+r); err != nil {
			t.Fatal(err)
		}
		want[r+"-2"] = "w" + r
	}
	oldCreator := n1.srv.cluster.creator
	for _, id := range []string{"n2", "n3"} {
		sc.nodes[id].srv.cluster.fail.takeOversPaused.Store(true)
	}
	n1.crash()
	if err := os.RemoveAll(n1.dir); err != nil {
		t.Fatal(err)
	}
	// n1 on an empty directory while the directory still names it.
	var err error
	testkit.Eventually(t, "n1's start on an empty data directory to be answered", 30*time.Second, func() (bool, string) {
		err = sc.tryStart(t, "n1", n1.dir)
		return !errors.Is(err, clusteretcd.ErrNodeLive), "old lease still live"
	})
	if err == nil {
		// (Reading [,g) now would wait for a take-over that has nothing
		// left to rebuild from.)
		cat, _, cerr := storage.ReadCatalog(sc.nodes["n2"].srv.cluster.store, "n1")
		t.Fatalf("n1 started on an empty data directory while the directory named it owner of [,g) (%s): it served that tablet empty, "+
			"and its first round replaced the catalog a take-over needs (now round %d, %+v, %v; log truncated below %d)",
			owners(t, sc.nodes["n2"]), cat.Round, cat.Entries, cerr, cat.Truncated)
	}
	if !errors.Is(err, errOwnedElsewhere) {
		t.Fatalf("n1's fresh start: %v, want errOwnedElsewhere", err)
	}
	// The others take its tablets over (from the untouched catalog and
	// log); then it starts, owning nothing.
	for _, id := range []string{"n2", "n3"} {
		sc.nodes[id].srv.cluster.fail.takeOversPaused.Store(false)
	}
	testkit.Eventually(t, "n1's tablet to be taken over", 30*time.Second, func() (bool, string) {
		got := owners(t, sc.nodes["n2"])
		return !strings.Contains(got, "n1"), got
	})
	n1 = sc.start(t, "n1", n1.dir)
	t.Cleanup(n1.stop)
	if n1.srv.cluster.creator == oldCreator {
		t.Fatalf("n1 kept creator %d on an empty data directory", oldCreator)
	}
	if _, err := os.Stat(n1.dir + "/" + clusterFreshFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the fresh marker stays after the start: %v", err)
	}
	cat, ok, err := storage.ReadCatalog(n1.srv.cluster.store, "n1")
	if err != nil || !ok || len(cat.Entries) != 0 {
		t.Errorf("n1's catalog after its fresh start: %+v %v %v, want one with no entry", cat, ok, err)
	}
	objs, err := os.ReadDir(sc.shared)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if strings.Contains(o.Name(), ".ref."+strconv.FormatUint(oldCreator, 10)+".") {
			t.Errorf("n1's previous engine's reference marker %s stays", o.Name())
		}
	}
	for _, via := range []string{"n1", "n2", "n3"} {
		_, got := readScale(t, sc.nodes[via])
		for r, v := range want {
			if got[r] != v {
				t.Errorf("via %s: row %s = %q, want %q", via, r, got[r], v)
			}
		}
	}
}
