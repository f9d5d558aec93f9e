package server

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/backup"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A backup whose tablet owner is down waits for it: it fails UNAVAILABLE,
// leaving no record and no file, only once --backup-part-wait has passed, and
// succeeds, whole, when the owner comes back in time (after more asks
// than the eight it once gave up after).
func TestScaleOutBackupOwnerDown(t *testing.T) {
	t.Parallel()
	// n1 (--backup-part-wait 1.5s) gives up; n2 keeps the default.
	sc := startScaleClusterTuned(t, 0, func(o *Options) {
		if o.Cluster.NodeID == "n1" {
			o.Cluster.BackupPartWait = 1500 * time.Millisecond
		}
	}, "n1", "n2", "n3")
	sc.createTable(t, "n1", "g", "p")
	ctx := context.Background()
	tbl := sc.nodes["n1"].client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	sc.knobs.backupRetryEvery.set(20 * time.Millisecond)
	n3 := sc.nodes["n3"]
	dir3 := n3.dir
	n3.stop()
	n1 := sc.nodes["n1"]
	testkit.Eventually(t, "n1 to see n3 gone", 10*time.Second, func() (bool, string) {
		_, live := n1.srv.ClusterMember().Node("n3")
		return !live, "n3 still listed"
	})
	err := n1.admin.CreateBackup(ctx, "t", "c1", "down", time.Now().Add(7*24*time.Hour))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "needs every tablet") || !strings.Contains(err.Error(), "within 1.5s") {
		t.Fatalf("backup with an owner down: %v", err)
	}
	if _, err := sc.nodes["n2"].admin.BackupInfo(ctx, "c1", "down"); status.Code(err) != codes.NotFound {
		t.Errorf("a failed backup's record: %v", err)
	}
	if objs := backupObjects(t, sc); len(objs) != 0 {
		t.Errorf("a failed backup left files: %v", objs)
	}

	// Back after more than eight asks: the backup, still waiting, has it.
	var asks atomic.Int32
	back := make(chan struct{})
	sc.knobs.backupRows.set(func(p tablets.Tablet) {
		if p.Owner == "n3" && asks.Add(1) == 12 {
			close(back)
		}
	})
	done := make(chan error, 1)
	go func() {
		done <- sc.nodes["n2"].admin.CreateBackup(ctx, "t", "c1", "back", time.Now().Add(7*24*time.Hour))
	}()
	select {
	case <-back:
	case err := <-done:
		t.Fatalf("backup ended before n3 came back: %v", err)
	}
	n3 = sc.start(t, "n3", dir3)
	t.Cleanup(n3.stop)
	if err := <-done; err != nil {
		t.Fatalf("backup once n3 is back: %v", err)
	}
	if err := sc.nodes["n2"].admin.RestoreTable(ctx, "r", "c1", "back"); err != nil {
		t.Fatal(err)
	}
	if keys, _ := readTableVia(t, sc.nodes["n2"], "r"); keys != strings.Join(letters(), ",") {
		t.Errorf("restored rows: %s", keys)
	}
}

// With failover, a backup taken while a tablet's owner is dead waits for
// the take-over, and the node that took the tablets over writes their
// part: every row is in the backup.
func TestFailoverBackupOwnerDead(t *testing.T) {
	t.Parallel()
	sc := startFailoverCluster(t)
	sc.createTable(t, "n1", "g", "p")
	ctx := context.Background()
	tbl := sc.nodes["n1"].client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	if got := owners(t, sc.nodes["n1"]); got != "[,g)n1 [g,p)n2 [p,)n3" {
		t.Fatalf("tablets: %s", got)
	}
	sc.nodes["n3"].crash()
	n1 := sc.nodes["n1"]
	if err := n1.admin.CreateBackup(ctx, "t", "c1", "b", time.Now().Add(7*24*time.Hour)); err != nil {
		t.Fatalf("backup while n3 is dead: %v", err)
	}
	if got := owners(t, n1); strings.Contains(got, "n3") {
		t.Errorf("n3 still owns tablets after the backup: %s", got)
	}
	mf, _, _, err := n1.srv.cluster.readBackup(ctx, mustBackupName(t, "c1", "b"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range mf.Parts {
		if p.Node == "n3" {
			t.Errorf("part [%q, %q) written by the dead node", p.Start, p.End)
		}
	}
	if err := sc.nodes["n2"].admin.RestoreTable(ctx, "r", "c1", "b"); err != nil {
		t.Fatal(err)
	}
	var keys []string
	err = sc.nodes["n2"].client.Open("r").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		keys = append(keys, r.Key())
		return true
	})
	if err != nil || strings.Join(keys, ",") != strings.Join(letters(), ",") {
		t.Errorf("restored rows: %v %v", keys, err)
	}
}

func mustBackupName(t *testing.T, cluster, id string) backup.Name {
	t.Helper()
	n, err := parseBackup(scaleInstance + "/clusters/" + cluster + "/backups/" + id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
