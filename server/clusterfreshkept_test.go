package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/storage"
)

// TestFailoverFreshDirKeptTable: with failover, a node whose disk is lost
// starts again under its node id on an empty data directory while a
// deleted table, kept for an undelete, names it the owner of a tablet
// whose only copy is its previous engine's checkpoint. Its first round
// would drop that checkpoint (an undelete then gives it the tablet
// empty), so the start is refused; undeleted meanwhile, the table's
// tablet is taken over from the checkpoint by the others, whole, and the
// node then starts.
func TestFailoverFreshDirKeptTable(t *testing.T) {
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
	fullRound(t, n1)
	if err := sc.nodes["n2"].admin.DeleteTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "n1 to apply the delete", 10*time.Second, func() (bool, string) {
		_, err := n1.srv.Engine().Table(scaleInstance, "t")
		return err != nil, fmt.Sprint(err)
	})
	fullRound(t, n1)
	hasT := func(cat storage.CommitCatalog) bool {
		for _, e := range cat.Entries {
			if strings.HasSuffix(e.Table, "/tables/t") {
				return true
			}
		}
		return false
	}
	if cat, _, err := storage.ReadCatalog(n1.srv.cluster.store, "n1"); err != nil || !hasT(cat) {
		t.Fatalf("n1's catalog after t's delete: %+v %v", cat.Entries, err)
	}
	n1.crash()
	if err := os.RemoveAll(n1.dir); err != nil {
		t.Fatal(err)
	}
	var err error
	testkit.Eventually(t, "n1's start on an empty data directory to be answered", 30*time.Second, func() (bool, string) {
		err = sc.tryStart(t, "n1", n1.dir)
		return !errors.Is(err, clusteretcd.ErrNodeLive), "old lease still live"
	})
	if err == nil {
		cat, _, cerr := storage.ReadCatalog(sc.nodes["n2"].srv.cluster.store, "n1")
		t.Fatalf("n1 started on an empty data directory while the kept directory of deleted t named it owner of [,g): "+
			"its catalog now holds t: %v (%+v, %v), so an undelete would give it that tablet empty", hasT(cat), cat.Entries, cerr)
	}
	if !errors.Is(err, errKeptElsewhere) || !strings.Contains(err.Error(), "/tables/t") {
		t.Fatalf("n1's fresh start: %v, want errKeptElsewhere naming t", err)
	}
	// Undeleted while n1 is down: the others take its tablet over from
	// the checkpoint.
	if _, err := sc.nodes["n2"].rawAdmin().UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: scaleTable}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "n1's tablet of t to be taken over", 30*time.Second, func() (bool, string) {
		got := owners(t, sc.nodes["n2"])
		return !strings.Contains(got, "n1"), got
	})
	n1 = sc.start(t, "n1", n1.dir)
	t.Cleanup(n1.stop)
	for _, via := range []string{"n1", "n2", "n3"} {
		keys, vals := readScale(t, sc.nodes[via])
		if len(keys) != 26 || vals["a"] != "va" || vals["z"] != "vz" {
			t.Errorf("t through %s after the undelete: %d rows %v", via, len(keys), keys)
		}
	}
}
