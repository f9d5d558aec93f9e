package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning"
	lroauto "cloud.google.com/go/longrunning/autogen"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// waitOpVia waits for a restore's operation the way the official client's
// RestoreTable does (longrunning's Wait, polling GetOperation), through
// node n: the table, or the operation's error.
func waitOpVia(t *testing.T, n *scaleNode, op *longrunningpb.Operation, d time.Duration) (*adminpb.Table, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	lro, err := lroauto.NewOperationsClient(ctx, option.WithGRPCConn(n.conn), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	// lro.Close would close n's conn: it is closed with n.
	var tbl adminpb.Table
	err = longrunning.InternalNewOperation(lro, &longrunningpb.Operation{Name: op.Name}).Wait(ctx, &tbl)
	return &tbl, err
}

// restoreOpState reads a restore's operation record from etcd through n.
func restoreOpState(t *testing.T, n *scaleNode, name string) string {
	t.Helper()
	rec, err := n.srv.ClusterMember().GetOpRecord(context.Background(), name)
	if err != nil {
		return err.Error()
	}
	return string(rec.Value[:min(len(rec.Value), 40)])
}

// A restore's operation is kept in etcd: GetOperation answers it through
// every node (its progress while it runs), and the official client's wait
// through a node other than the coordinator gets the table.
func TestScaleOutRestoreOpThroughAnyNode(t *testing.T) {
	t.Parallel()
	sc := restoreCluster(t)
	release := holdRestoreOn(t, sc, "n3")
	op := startRestore(t, sc.nodes["n2"], "r")
	if !strings.Contains(op.Name, restoreOpMark) {
		t.Fatalf("operation name %s", op.Name)
	}
	for _, id := range []string{"n1", "n3"} {
		testkit.Eventually(t, "progress through "+id, 10*time.Second, func() (bool, string) {
			o, err := longrunningpb.NewOperationsClient(sc.nodes[id].conn).GetOperation(context.Background(), &longrunningpb.GetOperationRequest{Name: op.Name})
			if err != nil {
				return false, err.Error()
			}
			var meta adminpb.RestoreTableMetadata
			if err := o.GetMetadata().UnmarshalTo(&meta); err != nil {
				return false, err.Error()
			}
			return !o.Done && meta.GetProgress().GetProgressPercent() == 66, o.String()
		})
	}
	release()
	tbl, err := waitOpVia(t, sc.nodes["n1"], op, 30*time.Second)
	if err != nil {
		t.Fatalf("wait through n1: %v", err)
	}
	if tbl.GetName() != testInstanceName+"/tables/r" {
		t.Errorf("restored table %q", tbl.GetName())
	}
	o, meta := getOp(t, sc.nodes["n3"], op.Name)
	if !o.Done || meta.GetProgress().GetProgressPercent() != 100 || meta.GetProgress().GetEndTime() == nil {
		t.Errorf("operation through n3: %v", o)
	}
	if keys, _ := readTableVia(t, sc.nodes["n1"], "r"); keys != strings.Join(letters(), ",") {
		t.Errorf("r: %s", keys)
	}
	// DeleteOperation through a node other than the coordinator.
	if _, err := longrunningpb.NewOperationsClient(sc.nodes["n3"].conn).DeleteOperation(context.Background(), &longrunningpb.DeleteOperationRequest{Name: op.Name}); err != nil {
		t.Fatalf("delete the operation through n3: %v", err)
	}
	if _, err := longrunningpb.NewOperationsClient(sc.nodes["n1"].conn).GetOperation(context.Background(), &longrunningpb.GetOperationRequest{Name: op.Name}); status.Code(err) != codes.NotFound {
		t.Errorf("operation after its delete: %v", err)
	}
}

// The coordinator is killed midway: a sweep of another node takes the
// restore over and completes it once the dead node (owner of a tablet)
// is back, and a client waiting through a third node gets the table.
func TestScaleOutRestoreOpCoordinatorKilled(t *testing.T) {
	t.Parallel()
	sc := restoreCluster(t)
	ctx := context.Background()
	release := holdRestoreOn(t, sc, "n3")
	op := startRestore(t, sc.nodes["n2"], "r")
	n1, n3 := sc.nodes["n1"], sc.nodes["n3"]
	testkit.Eventually(t, "two parts ingested", 10*time.Second, func() (bool, string) {
		_, meta := getOp(t, n1, op.Name)
		return meta.GetProgress().GetProgressPercent() == 66, meta.String()
	})
	sc.nodes["n2"].crash()
	release()
	waited := make(chan error, 1)
	go func() {
		_, err := waitOpVia(t, n1, op, 30*time.Second)
		waited <- err
	}()
	testkit.Eventually(t, "n1 to see n2 gone", 10*time.Second, func() (bool, string) {
		_, live := n1.srv.ClusterMember().Node("n2")
		return !live, "n2 still listed"
	})
	testkit.Eventually(t, "the sweep to take the restore over", 10*time.Second, func() (bool, string) {
		n3.srv.cluster.sweepRestores(ctx)
		s := restoreOpState(t, n1, op.Name)
		return strings.Contains(s, `"maker":"n3/`), s
	})
	// n2 back (it owns a tablet of r): the restore goes through.
	t.Cleanup(sc.start(t, "n2", sc.nodes["n2"].dir).stop)
	if err := <-waited; err != nil {
		t.Fatalf("wait through n1: %v", err)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if keys, _ := readTableVia(t, sc.nodes[id], "r"); keys != strings.Join(letters(), ",") {
			t.Errorf("r through %s: %s", id, keys)
		}
	}
	if o, meta := getOp(t, n3, op.Name); !o.Done || o.GetError() != nil || meta.GetProgress().GetProgressPercent() != 100 {
		t.Errorf("operation through n3: %v", o)
	}
}

// The coordinator dies and every other node restarts (their reservations
// are gone at open): a sweep of a restarted node still takes the restore
// over from its operation record and, the dead node back, completes it
// (the restarted owners ingest their parts again).
func TestScaleOutRestoreCoordinatorDeadOthersRestarted(t *testing.T) {
	t.Parallel()
	sc := restoreCluster(t)
	ctx := context.Background()
	release := holdRestoreOn(t, sc, "n3")
	op := startRestore(t, sc.nodes["n2"], "r")
	testkit.Eventually(t, "two parts ingested", 10*time.Second, func() (bool, string) {
		_, meta := getOp(t, sc.nodes["n1"], op.Name)
		return meta.GetProgress().GetProgressPercent() == 66, meta.String()
	})
	sc.nodes["n2"].crash()
	release()
	for _, id := range []string{"n1", "n3"} {
		n := sc.nodes[id]
		n.stop()
		t.Cleanup(sc.start(t, id, n.dir).stop)
	}
	n1 := sc.nodes["n1"]
	for _, id := range []string{"n1", "n3"} {
		c := sc.nodes[id].srv.cluster
		c.restoreMu.Lock()
		held := len(c.restores)
		c.restoreMu.Unlock()
		if held != 0 {
			t.Fatalf("%s holds %d reservations after its restart", id, held)
		}
	}
	testkit.Eventually(t, "n1 to see n2 gone", 10*time.Second, func() (bool, string) {
		_, live := n1.srv.ClusterMember().Node("n2")
		return !live, "n2 still listed"
	})
	testkit.Eventually(t, "a restarted node's sweep to take the restore over", 10*time.Second, func() (bool, string) {
		n1.srv.cluster.sweepRestores(ctx)
		s := restoreOpState(t, n1, op.Name)
		return strings.Contains(s, `"maker":"n1/`), s
	})
	t.Cleanup(sc.start(t, "n2", sc.nodes["n2"].dir).stop)
	if _, err := waitOpVia(t, sc.nodes["n3"], op, 30*time.Second); err != nil {
		t.Fatalf("wait through n3: %v", err)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if keys, _ := readTableVia(t, sc.nodes[id], "r"); keys != strings.Join(letters(), ",") {
			t.Errorf("r through %s: %s", id, keys)
		}
	}
}

// The coordinator dies once every part is ingested, before its commit: a
// sweep of another node commits the restore, the operation ends with the
// table, and the dead node, back, ingests its tablet's rows at commit.
func TestScaleOutRestoreCommitResumed(t *testing.T) {
	t.Parallel()
	sc := restoreCluster(t)
	ctx := context.Background()
	reached, proceed := make(chan struct{}), make(chan struct{})
	sc.knobs.restoreCommitting.set(func(node string) {
		close(reached)
		<-proceed
	})
	t.Cleanup(sc.knobs.restoreCommitting.unset)
	n2 := sc.nodes["n2"]
	op := startRestore(t, n2, "r")
	<-reached
	// n2 dies holding the decision: its etcd client is gone, so its
	// commit cannot be appended.
	n2.srv.cluster.m.Abandon()
	close(proceed)
	n2.stop()
	n1 := sc.nodes["n1"]
	testkit.Eventually(t, "n1 to see n2 gone", 10*time.Second, func() (bool, string) {
		_, live := n1.srv.ClusterMember().Node("n2")
		return !live, "n2 still listed"
	})
	if s := restoreOpState(t, n1, op.Name); !strings.Contains(s, `"committing"`) {
		t.Fatalf("operation record: %s", s)
	}
	n1.srv.cluster.sweepRestores(ctx)
	tbl, err := waitOpVia(t, sc.nodes["n3"], op, 30*time.Second)
	if err != nil {
		t.Fatalf("wait through n3: %v", err)
	}
	if tbl.GetName() != testInstanceName+"/tables/r" {
		t.Errorf("restored table %q", tbl.GetName())
	}
	for _, id := range []string{"n1", "n3"} {
		if _, err := sc.nodes[id].srv.Engine().Table(testInstanceName, "r"); err != nil {
			t.Errorf("r on %s: %v", id, err)
		}
	}
	t.Cleanup(sc.start(t, "n2", n2.dir).stop)
	testkit.Eventually(t, "r whole once n2 is back", 20*time.Second, func() (bool, string) {
		keys, err := readKeysVia(sc.nodes["n1"], "r")
		if err != nil {
			return false, err.Error()
		}
		return strings.Join(keys, ",") == strings.Join(letters(), ","), strings.Join(keys, ",")
	})
}

// readKeysVia reads a table's row keys through n.
func readKeysVia(n *scaleNode, tableID string) ([]string, error) {
	var keys []string
	err := n.client.Open(tableID).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		keys = append(keys, r.Key())
		return true
	})
	return keys, err
}
