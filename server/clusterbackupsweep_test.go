package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// listBackupsVia lists the instance's backups through n.
func listBackupsVia(t *testing.T, n *scaleNode) []*adminpb.Backup {
	t.Helper()
	l, err := adminpb.NewBigtableTableAdminClient(n.conn).ListBackups(context.Background(), &adminpb.ListBackupsRequest{Parent: scaleInstance + "/clusters/-"})
	if err != nil {
		t.Fatalf("list backups through %s: %v", n.id, err)
	}
	return l.Backups
}

func backupStates(list []*adminpb.Backup) string {
	var out []string
	for _, b := range list {
		out = append(out, b.GetName()+" "+b.GetState().String())
	}
	return strings.Join(out, "; ")
}

// crashMidBackup waits until two parts of the backup held on n3 are
// written, crashes n2 (the backup's maker), lets n3's part go and waits
// until n3 sees n2 gone.
func crashMidBackup(t *testing.T, sc *scaleCluster, release func()) {
	t.Helper()
	testkit.Eventually(t, "two parts written", 10*time.Second, func() (bool, string) {
		objs := backupObjects(t, sc)
		return len(objs) >= 2, strings.Join(objs, " ")
	})
	sc.nodes["n2"].crash()
	release()
	n3 := sc.nodes["n3"]
	testkit.Eventually(t, "n3 to see n2 gone", 10*time.Second, func() (bool, string) {
		_, live := n3.srv.ClusterMember().Node("n2")
		return !live, "n2 still listed"
	})
}

// An automated backup (it has no operation) whose maker is killed midway
// is given up by another node's sweep: its record and files go, and the
// schedule's next check takes the table's backup anew.
func TestScaleOutAutomatedBackupMakerKilled(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	n1, n2, n3 := sc.nodes["n1"], sc.nodes["n2"], sc.nodes["n3"]
	policy := bigtable.TableAutomatedBackupPolicy{RetentionPeriod: 72 * time.Hour, Frequency: 24 * time.Hour}
	if err := n1.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: []string{"g", "p"},
		ColumnFamilies: map[string]bigtable.Family{"f": {}}, AutomatedBackupConfig: &policy}); err != nil {
		t.Fatal(err)
	}
	tbl := n1.client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	release := holdBackupOn(t, sc, "n3")
	took := make(chan error, 1)
	go func() { took <- n2.srv.takeAutoBackups(ctx) }()
	var dead string
	testkit.Eventually(t, "n2's automated backup recorded", 10*time.Second, func() (bool, string) {
		list := listBackupsVia(t, n1)
		if len(list) == 1 && list[0].GetState() == adminpb.Backup_CREATING {
			dead = list[0].GetName()
		}
		return dead != "", backupStates(list)
	})
	crashMidBackup(t, sc, release)
	select {
	case <-took: // n2's check ended with n2 (its outcome is not written)
	case <-time.After(30 * time.Second):
		t.Fatal("n2's automated backup check did not end with n2")
	}
	testkit.Eventually(t, "the sweep to give the automated backup up", 10*time.Second, func() (bool, string) {
		n3.srv.cluster.sweepBackups(ctx)
		list := listBackupsVia(t, n1)
		return len(list) == 0, backupStates(list)
	})
	if objs := backupObjects(t, sc); len(objs) != 0 {
		t.Errorf("the given-up backup left files: %v", objs)
	}
	// n2 back (it owns a tablet): the next check takes the backup.
	t.Cleanup(sc.start(t, "n2", n2.dir).stop)
	if err := n3.srv.takeAutoBackups(ctx); err != nil {
		t.Fatalf("the next automated check: %v", err)
	}
	list := listBackupsVia(t, n1)
	if len(list) != 1 || list[0].GetState() != adminpb.Backup_READY {
		t.Fatalf("backups after the next check: %s", backupStates(list))
	}
	id := list[0].GetName()[strings.LastIndex(list[0].GetName(), "/")+1:]
	if err := n3.admin.RestoreTable(ctx, "r", strings.Split(list[0].GetName(), "/")[5], id); err != nil {
		t.Fatalf("restore %s: %v (backups now: %s)", list[0].GetName(), err, backupStates(listBackupsVia(t, n1)))
	}
	if keys, _ := readTableVia(t, n1, "r"); keys != strings.Join(letters(), ",") {
		t.Errorf("rows restored from the new automated backup: %s", keys)
	}
}

// A backup whose operation the client deleted while it ran, and whose
// coordinator is then killed: the sweep gives it up from its record alone
// (record and files gone, the name free).
func TestScaleOutBackupOpDeletedCoordinatorKilled(t *testing.T) {
	t.Parallel()
	sc := backupCluster(t)
	ctx := context.Background()
	n1, n3 := sc.nodes["n1"], sc.nodes["n3"]
	release := holdBackupOn(t, sc, "n3")
	op := startBackupOp(t, sc.nodes["n2"], "bk")
	ops := longrunningpb.NewOperationsClient(n1.conn)
	if _, err := ops.DeleteOperation(ctx, &longrunningpb.DeleteOperationRequest{Name: op.Name}); err != nil {
		t.Fatalf("delete the backup's operation through n1: %v", err)
	}
	if _, err := ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: op.Name}); status.Code(err) != codes.NotFound {
		t.Fatalf("the deleted operation through n1: %v", err)
	}
	crashMidBackup(t, sc, release)
	testkit.Eventually(t, "the sweep to give the backup up", 10*time.Second, func() (bool, string) {
		n3.srv.cluster.sweepBackups(ctx)
		_, err := n1.admin.BackupInfo(ctx, "c1", "bk")
		return status.Code(err) == codes.NotFound, backupStates(listBackupsVia(t, n1))
	})
	if objs := backupObjects(t, sc); len(objs) != 0 {
		t.Errorf("the given-up backup left files: %v", objs)
	}
	n2 := sc.nodes["n2"]
	t.Cleanup(sc.start(t, "n2", n2.dir).stop)
	if err := n1.admin.CreateBackup(ctx, "t", "c1", "bk", time.Now().Add(7*24*time.Hour)); err != nil {
		t.Fatalf("backup again: %v", err)
	}
}
