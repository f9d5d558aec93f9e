package server

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/storage"
)

// The release of a dead node races an undelete of a table it owned a
// tablet of (TestFailoverGaps' rare failure, made deterministic): the
// release reads the table's kept directory, then the undelete lands and
// is applied on the releasing node before it checks its own deleted
// copy. The release must not go on (it would delete the checkpoint the
// undeleted table's take-over needs): it waits, the tablet is taken over
// and every row reads.
func TestFailoverReleaseRacesUndelete(t *testing.T) {
	t.Parallel()
	sc := startScaleClusterTuned(t, 0, func(o *Options) {
		o.Cluster.Failover = true
		o.Cluster.LeaseTTL = time.Second
		o.Cluster.CheckpointInterval = time.Hour
		o.Cluster.ReleaseDeadAfter = -1 // released only by the test's call
	}, "n1", "n2", "n3")
	ctx := context.Background()
	n1, n2, n3 := sc.nodes["n1"], sc.nodes["n2"], sc.nodes["n3"]
	if err := n1.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "u", SplitKeys: []string{"g", "p"},
		ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
		t.Fatal(err)
	}
	if got := ownersOf(t, n1, "u"); !strings.Contains(got, "[p,)n3") {
		t.Fatalf("tablets of u: %s", got)
	}
	tu := n1.client.Open("u")
	for _, r := range letters() {
		if err := writeScale(t, tu, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	fullRound(t, n3)
	if err := n1.admin.DeleteTable(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "n3 to apply the delete", 10*time.Second, func() (bool, string) {
		_, err := n3.srv.Engine().Table(scaleInstance, "u")
		return err != nil, "u still there"
	})
	fullRound(t, n3)
	n3.crash()
	testkit.Eventually(t, "n1 to see n3 gone", 10*time.Second, func() (bool, string) {
		_, live := n1.srv.ClusterMember().Node("n3")
		return !live, "n3 still listed"
	})
	var once sync.Once
	sc.knobs.releaseKeptRead.set(func(dead, table string) {
		if !strings.HasSuffix(table, "/tables/u") {
			return
		}
		once.Do(func() {
			if _, err := n2.rawAdmin().UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: scaleInstance + "/tables/u"}); err != nil {
				t.Errorf("undelete: %v", err)
				return
			}
			testkit.Eventually(t, "n1 to apply the undelete", 10*time.Second, func() (bool, string) {
				_, err := n1.srv.Engine().Table(scaleInstance, "u")
				return err == nil, "u not back on n1"
			})
		})
	})
	err := n1.srv.cluster.fail.releaseDead(ctx, "n3", n1.srv.ClusterMember().Directories())
	if !errors.Is(err, errNotYet) {
		t.Fatalf("a release racing an undelete of a table of the dead node went on: %v", err)
	}
	if _, err := storage.GetObject(ctx, n1.srv.cluster.store, storage.ReleasedMarker("n3")); err == nil {
		t.Error("n3 released while its tablet of the undeleted u needs its checkpoint")
	}
	testkit.Eventually(t, "n3's tablet of u to be taken over", 30*time.Second, func() (bool, string) {
		got := ownersOf(t, n1, "u")
		return !strings.Contains(got, "n3"), got
	})
	if keys, _ := readTableVia(t, n2, "u"); keys != strings.Join(letters(), ",") {
		t.Errorf("u after the undelete: %s", keys)
	}
	// With nothing of n3 left to take over, the release goes through.
	sc.knobs.releaseKeptRead.unset()
	if err := n1.srv.cluster.fail.releaseDead(ctx, "n3", n1.srv.ClusterMember().Directories()); err != nil {
		t.Fatalf("release once u was taken over: %v", err)
	}
}
