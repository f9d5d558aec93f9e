package server

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning"
	lroauto "cloud.google.com/go/longrunning/autogen"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// backupCluster is three nodes with table t split in three tablets, one
// per node, holding the rows of letters().
func backupCluster(t *testing.T) *scaleCluster {
	t.Helper()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	sc.createTable(t, "n1", "g", "p")
	tbl := sc.nodes["n2"].client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	return sc
}

// holdBackupOn holds the backup parts node writes until release (or the
// part's call ends).
func holdBackupOn(t *testing.T, sc *scaleCluster, node string) (release func()) {
	held := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	sc.knobs.backupOwner.set(func(ctx context.Context, n string) error {
		if n != node {
			return nil
		}
		select {
		case <-held:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	t.Cleanup(func() {
		release()
		sc.knobs.backupOwner.unset()
	})
	return release
}

// startBackupOp sends CreateBackup of t through n and returns the
// operation.
func startBackupOp(t *testing.T, n *scaleNode, id string) *longrunningpb.Operation {
	t.Helper()
	op, err := adminpb.NewBigtableTableAdminClient(n.conn).CreateBackup(context.Background(), &adminpb.CreateBackupRequest{
		Parent: scaleInstance + "/clusters/c1", BackupId: id,
		Backup: &adminpb.Backup{SourceTable: scaleTable, ExpireTime: timestamppb.New(time.Now().Add(7 * 24 * time.Hour))}})
	if err != nil {
		t.Fatalf("backup %s through %s: %v", id, n.id, err)
	}
	return op
}

// waitBackupVia waits for a backup's operation as the official client
// does (longrunning's Wait, polling GetOperation), through node n.
func waitBackupVia(t *testing.T, n *scaleNode, name string, d time.Duration) (*adminpb.Backup, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	lro, err := lroauto.NewOperationsClient(ctx, option.WithGRPCConn(n.conn), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	var b adminpb.Backup
	err = longrunning.InternalNewOperation(lro, &longrunningpb.Operation{Name: name}).Wait(ctx, &b)
	return &b, err
}

// A backup's and a copy's operations are kept in etcd: GetOperation and
// ListOperations answer them through every node while they run, and the
// official client's wait through a node other than the coordinator gets
// the backup.
func TestScaleOutBackupOpThroughAnyNode(t *testing.T) {
	t.Parallel()
	sc := backupCluster(t)
	ctx := context.Background()
	release := holdBackupOn(t, sc, "n3")
	op := startBackupOp(t, sc.nodes["n2"], "bk")
	if op.Done || !strings.Contains(op.Name, backupOpMark) {
		t.Fatalf("operation %v", op)
	}
	bkName := scaleInstance + "/clusters/c1/backups/bk"
	for _, id := range []string{"n1", "n3"} {
		ops := longrunningpb.NewOperationsClient(sc.nodes[id].conn)
		o, err := ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: op.Name})
		if err != nil || o.Done {
			t.Fatalf("operation through %s: %v %v", id, o, err)
		}
		var meta adminpb.CreateBackupMetadata
		if err := o.GetMetadata().UnmarshalTo(&meta); err != nil || meta.GetName() != bkName {
			t.Fatalf("metadata through %s: %v %v", id, &meta, err)
		}
		l, err := ops.ListOperations(ctx, &longrunningpb.ListOperationsRequest{Name: "operations/" + bkName})
		if err != nil || len(l.Operations) != 1 || l.Operations[0].Name != op.Name {
			t.Fatalf("list through %s: %v %v", id, l, err)
		}
	}
	release()
	b, err := waitBackupVia(t, sc.nodes["n1"], op.Name, 30*time.Second)
	if err != nil {
		t.Fatalf("wait through n1: %v", err)
	}
	if b.GetName() != bkName || b.GetState() != adminpb.Backup_READY {
		t.Errorf("backup %v", b)
	}
	// A copy, waited for through n3.
	cop, err := adminpb.NewBigtableTableAdminClient(sc.nodes["n2"].conn).CopyBackup(ctx, &adminpb.CopyBackupRequest{
		Parent: scaleInstance + "/clusters/c2", BackupId: "cp", SourceBackup: bkName, ExpireTime: timestamppb.New(time.Now().Add(24 * time.Hour))})
	if err != nil || !strings.Contains(cop.Name, backupOpMark) {
		t.Fatalf("copy: %v %v", cop, err)
	}
	cb, err := waitBackupVia(t, sc.nodes["n3"], cop.Name, 30*time.Second)
	if err != nil || cb.GetName() != scaleInstance+"/clusters/c2/backups/cp" {
		t.Fatalf("wait for the copy through n3: %v %v", cb, err)
	}
	o, err := longrunningpb.NewOperationsClient(sc.nodes["n3"].conn).GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: cop.Name})
	var cmeta adminpb.CopyBackupMetadata
	if err != nil || !o.Done || o.GetMetadata().UnmarshalTo(&cmeta) != nil || cmeta.GetProgress().GetProgressPercent() != 100 {
		t.Errorf("copy's operation through n3: %v %v", o, err)
	}
	l, err := longrunningpb.NewOperationsClient(sc.nodes["n1"].conn).ListOperations(ctx, &longrunningpb.ListOperationsRequest{Name: "operations/" + scaleInstance, PageSize: 1})
	if err != nil || len(l.Operations) != 1 || l.Operations[0].Name != op.Name || l.NextPageToken == "" {
		t.Fatalf("first page of the instance's operations through n1: %v %v", l, err)
	}
	if err := sc.nodes["n3"].admin.RestoreTable(ctx, "r", "c2", "cp"); err != nil {
		t.Fatal(err)
	}
	if keys, _ := readTableVia(t, sc.nodes["n1"], "r"); keys != strings.Join(letters(), ",") {
		t.Errorf("rows restored from the copy: %s", keys)
	}
}

// The coordinator of a backup is killed midway: a sweep of another node
// fails the operation (a client waiting through any node gets ABORTED,
// naming the coordinator), removes the CREATING record and the files
// written, and the name is free for a new backup.
func TestScaleOutBackupOpCoordinatorKilled(t *testing.T) {
	t.Parallel()
	sc := backupCluster(t)
	ctx := context.Background()
	release := holdBackupOn(t, sc, "n3")
	op := startBackupOp(t, sc.nodes["n2"], "bk")
	n1, n3 := sc.nodes["n1"], sc.nodes["n3"]
	testkit.Eventually(t, "two parts written", 10*time.Second, func() (bool, string) {
		objs := backupObjects(t, sc)
		return len(objs) >= 2, strings.Join(objs, " ")
	})
	sc.nodes["n2"].crash()
	release()
	waited := make(chan error, 1)
	go func() {
		_, err := waitBackupVia(t, n1, op.Name, 30*time.Second)
		waited <- err
	}()
	testkit.Eventually(t, "n3 to see n2 gone", 10*time.Second, func() (bool, string) {
		_, live := n3.srv.ClusterMember().Node("n2")
		return !live, "n2 still listed"
	})
	testkit.Eventually(t, "the sweep to give the backup up", 10*time.Second, func() (bool, string) {
		n3.srv.cluster.sweepBackups(ctx)
		_, err := n1.admin.BackupInfo(ctx, "c1", "bk")
		return status.Code(err) == codes.NotFound, "backup: " + restoreOpState(t, n1, op.Name)
	})
	err := <-waited
	if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "coordinator n2/") {
		t.Fatalf("wait through n1: %v", err)
	}
	if objs := backupObjects(t, sc); len(objs) != 0 {
		t.Errorf("the given-up backup left files: %v", objs)
	}
	// n2 back (it owns a tablet): the name is free for a new backup.
	n2 := sc.nodes["n2"]
	t.Cleanup(sc.start(t, "n2", n2.dir).stop)
	if err := n1.admin.CreateBackup(ctx, "t", "c1", "bk", time.Now().Add(7*24*time.Hour)); err != nil {
		t.Fatalf("backup again: %v", err)
	}
	if err := n3.admin.RestoreTable(ctx, "r", "c1", "bk"); err != nil {
		t.Fatal(err)
	}
	if keys, _ := readTableVia(t, n1, "r"); keys != strings.Join(letters(), ",") {
		t.Errorf("rows restored: %s", keys)
	}
}
