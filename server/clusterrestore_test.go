package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// restoreCluster is three nodes with table t split in three tablets, one
// per node (a, g, p, the rows of letters()), and its backup c1/bk.
func restoreCluster(t *testing.T) *scaleCluster {
	t.Helper()
	return restoreClusterTuned(t, nil)
}

// restoreClusterTuned is restoreCluster with each node's options adjusted
// by tune.
func restoreClusterTuned(t *testing.T, tune func(*Options)) *scaleCluster {
	t.Helper()
	sc := startScaleClusterTuned(t, 0, tune, "n1", "n2", "n3")
	sc.createTable(t, "n1", "g", "p")
	ctx := context.Background()
	tabs, err := sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil || len(tabs.Tablets) != 3 {
		t.Fatalf("tablets: %v %v", tabs, err)
	}
	tbl := sc.nodes["n2"].client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	if err := sc.nodes["n1"].admin.CreateBackup(ctx, "t", "c1", "bk", time.Now().Add(7*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	return sc
}

// startRestore sends RestoreTable through n and returns the operation.
func startRestore(t *testing.T, n *scaleNode, tableID string) *longrunningpb.Operation {
	t.Helper()
	op, err := adminpb.NewBigtableTableAdminClient(n.conn).RestoreTable(context.Background(), &adminpb.RestoreTableRequest{
		Parent: scaleInstance, TableId: tableID, Source: &adminpb.RestoreTableRequest_Backup{Backup: scaleInstance + "/clusters/c1/backups/bk"}})
	if err != nil {
		t.Fatalf("restore %s through %s: %v", tableID, n.id, err)
	}
	return op
}

func getOp(t *testing.T, n *scaleNode, name string) (*longrunningpb.Operation, *adminpb.RestoreTableMetadata) {
	t.Helper()
	op, err := longrunningpb.NewOperationsClient(n.conn).GetOperation(context.Background(), &longrunningpb.GetOperationRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	var meta adminpb.RestoreTableMetadata
	if err := op.GetMetadata().UnmarshalTo(&meta); err != nil {
		t.Fatal(err)
	}
	return op, &meta
}

// checkNoTable checks no node shows table id (not in the engine, not
// listed, no directory).
func checkNoTable(t *testing.T, sc *scaleCluster, id string) {
	t.Helper()
	for _, nid := range []string{"n1", "n2", "n3"} {
		n := sc.nodes[nid]
		if n == nil || n.srv == nil {
			continue
		}
		if _, err := n.srv.Engine().Table(testInstanceName, id); err == nil {
			t.Errorf("table %s visible on %s", id, nid)
		}
		names, err := n.admin.Tables(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, nm := range names {
			if nm == id {
				t.Errorf("table %s listed through %s", id, nid)
			}
		}
	}
}

// A restore is a long-running operation outside the schema log: while an
// owner's part is held up, later schema changes go through, the table is
// visible nowhere and the operation's progress shows the tablets done;
// once the part goes through the table is whole on every node.
func TestScaleOutRestoreLongRunning(t *testing.T) {
	t.Parallel()
	sc := restoreCluster(t)
	ctx := context.Background()
	release := holdRestoreOn(t, sc, "n3")
	op := startRestore(t, sc.nodes["n2"], "r")
	if op.Done {
		t.Fatalf("restore done while a part is held: %v", op)
	}
	// Another schema change goes through meanwhile, on every node.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sc.nodes["n1"].admin.CreateTableFromConf(cctx, &bigtable.TableConf{TableID: "other", ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
		t.Fatalf("a create during the restore: %v", err)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if _, err := sc.nodes[id].srv.Engine().Table(testInstanceName, "other"); err != nil {
			t.Errorf("other on %s: %v", id, err)
		}
	}
	// Two of three tablets done: the metadata says so; r is nowhere.
	testkit.Eventually(t, "progress of two tablets of three", 10*time.Second, func() (bool, string) {
		o, meta := getOp(t, sc.nodes["n2"], op.Name)
		p := meta.GetProgress().GetProgressPercent()
		return !o.Done && p == 66, o.String()
	})
	checkNoTable(t, sc, "r")
	if _, err := sc.nodes["n1"].client.Open("r").ReadRow(ctx, "a"); status.Code(err) != codes.NotFound {
		t.Errorf("read of r during the restore: %v", err)
	}
	release()
	testkit.Eventually(t, "the restore to finish", 20*time.Second, func() (bool, string) {
		o, _ := getOp(t, sc.nodes["n2"], op.Name)
		return o.Done, "running"
	})
	o, meta := getOp(t, sc.nodes["n2"], op.Name)
	if o.GetError() != nil || meta.GetProgress().GetProgressPercent() != 100 {
		t.Fatalf("restore: %v", o)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		keys, vals := readTableVia(t, sc.nodes[id], "r")
		if keys != strings.Join(letters(), ",") || vals["q"] != "vq" {
			t.Errorf("r through %s: %s", id, keys)
		}
		if _, err := sc.nodes[id].srv.Engine().Table(testInstanceName, "r"); err != nil {
			t.Errorf("r on %s: %v", id, err)
		}
	}
	// The backup is no longer held.
	if err := sc.nodes["n3"].admin.DeleteBackup(ctx, "c1", "bk"); err != nil {
		t.Errorf("delete the backup after the restore: %v", err)
	}
}

// An owner whose part keeps failing fails the operation cleanly: no node
// shows the table or keeps its name, the directory is gone, the backup is
// free; an owner that fails a few times (UNAVAILABLE) is asked again.
func TestScaleOutRestoreFails(t *testing.T) {
	t.Parallel()
	sc := restoreCluster(t)
	ctx := context.Background()
	var mu sync.Mutex
	unavailable := 2
	sc.knobs.restoreRows.set(func(node string, start, end []byte) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case node != "n3":
			return nil
		case unavailable > 0:
			unavailable--
			return status.Error(codes.Unavailable, "injected: n3 busy")
		}
		return status.Error(codes.Internal, "injected: n3's disk is full")
	})
	t.Cleanup(sc.knobs.restoreRows.unset)
	err := sc.nodes["n1"].admin.RestoreTable(ctx, "r", "c1", "bk")
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "disk is full") {
		t.Fatalf("restore with a failing owner: %v", err)
	}
	if unavailable != 0 {
		t.Errorf("UNAVAILABLE parts not asked again (%d left)", unavailable)
	}
	checkNoTable(t, sc, "r")
	if _, err := sc.nodes["n2"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: testInstanceName + "/tables/r"}); status.Code(err) != codes.NotFound {
		t.Errorf("a failed restore left a directory: %v", err)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		c := sc.nodes[id].srv.cluster
		c.restoreMu.Lock()
		left := len(c.restores)
		c.restoreMu.Unlock()
		if left != 0 {
			t.Errorf("%s keeps %d restore reservations", id, left)
		}
	}
	// The name is free everywhere, the rows of the abandoned reservations
	// gone, and the backup deletable.
	mu.Lock()
	sc.knobs.restoreRows.unset()
	mu.Unlock()
	if err := sc.nodes["n3"].admin.RestoreTable(ctx, "r", "c1", "bk"); err != nil {
		t.Fatalf("restore again: %v", err)
	}
	if keys, _ := readTableVia(t, sc.nodes["n2"], "r"); keys != strings.Join(letters(), ",") {
		t.Errorf("r after the second restore: %s", keys)
	}
	if err := sc.nodes["n2"].admin.DeleteBackup(ctx, "c1", "bk"); err != nil {
		t.Errorf("delete the backup: %v", err)
	}
}

// A node that restarts after ingesting its part (its reservation and
// cells are gone at open) ingests it again at the commit: the table is
// whole on it.
func TestScaleOutRestoreNodeRestarts(t *testing.T) {
	t.Parallel()
	sc := restoreCluster(t)
	ctx := context.Background()
	n3done := make(chan struct{})
	release := make(chan struct{})
	var once3, once sync.Once
	sc.knobs.restoreRows.set(func(node string, start, end []byte) error {
		switch node {
		case "n3":
			once3.Do(func() { close(n3done) })
		case "n1":
			<-release
		}
		return nil
	})
	t.Cleanup(func() {
		once.Do(func() { close(release) })
		sc.knobs.restoreRows.unset()
	})
	op := startRestore(t, sc.nodes["n2"], "r")
	<-n3done
	testkit.Eventually(t, "n3's part to be ingested", 10*time.Second, func() (bool, string) {
		_, meta := getOp(t, sc.nodes["n2"], op.Name)
		return meta.GetProgress().GetProgressPercent() >= 33, meta.String()
	})
	n3 := sc.nodes["n3"]
	n3.stop()
	n3 = sc.start(t, "n3", n3.dir)
	t.Cleanup(n3.stop)
	once.Do(func() { close(release) })
	testkit.Eventually(t, "the restore to finish", 20*time.Second, func() (bool, string) {
		o, _ := getOp(t, sc.nodes["n2"], op.Name)
		return o.Done, "running"
	})
	if o, _ := getOp(t, sc.nodes["n2"], op.Name); o.GetError() != nil {
		t.Fatalf("restore: %v", o.GetError())
	}
	testkit.Eventually(t, "r on n3", 10*time.Second, func() (bool, string) {
		_, err := n3.srv.Engine().Table(testInstanceName, "r")
		return err == nil, "not yet"
	})
	for _, id := range []string{"n1", "n2", "n3"} {
		keys, vals := readTableVia(t, sc.nodes[id], "r")
		if keys != strings.Join(letters(), ",") || vals["x"] != "vx" {
			t.Errorf("r through %s: %s", id, keys)
		}
	}
	_ = ctx
}

// A coordinator that dies midway leaves reservations on the other nodes;
// their sweep (the backup expiry loop) sees its maker gone and takes the
// restore over. The dead node owns a tablet and stays down: once
// --restore-part-wait passes, the restore is given up cluster-wide (no
// directory, no reservation, the name free) and its operation fails.
func TestScaleOutRestoreCoordinatorDies(t *testing.T) {
	t.Parallel()
	sc := restoreClusterTuned(t, func(o *Options) { o.Cluster.RestorePartWait = 1500 * time.Millisecond })
	ctx := context.Background()
	release := holdRestoreOn(t, sc, "n3")
	op := startRestore(t, sc.nodes["n2"], "r")
	testkit.Eventually(t, "two parts ingested", 10*time.Second, func() (bool, string) {
		_, meta := getOp(t, sc.nodes["n2"], op.Name)
		return meta.GetProgress().GetProgressPercent() == 66, meta.String()
	})
	sc.nodes["n2"].crash()
	n1 := sc.nodes["n1"]
	testkit.Eventually(t, "n1 to see n2 gone", 10*time.Second, func() (bool, string) {
		_, live := n1.srv.ClusterMember().Node("n2")
		return !live, "n2 still listed"
	})
	release()
	reservations := func(id string) int {
		c := sc.nodes[id].srv.cluster
		c.restoreMu.Lock()
		defer c.restoreMu.Unlock()
		return len(c.restores)
	}
	testkit.Eventually(t, "the resumed restore to give up", 10*time.Second, func() (bool, string) {
		n1.srv.cluster.sweepRestores(ctx)
		sc.nodes["n3"].srv.cluster.sweepRestores(ctx)
		_, dir := n1.srv.ClusterMember().Directory(testInstanceName + "/tables/r")
		r1, r3 := reservations("n1"), reservations("n3")
		return !dir && r1 == 0 && r3 == 0, fmt.Sprintf("directory %v, reservations n1 %d n3 %d", dir, r1, r3)
	})
	if o, _ := getOp(t, n1, op.Name); !o.Done || status.Code(status.ErrorProto(o.GetError())) != codes.Unavailable || !strings.Contains(o.GetError().GetMessage(), "within 1.5s") {
		t.Errorf("operation through n1: %v", o)
	}
	checkNoTable(t, sc, "r")
	if err := n1.admin.RestoreTable(ctx, "r", "c1", "bk"); err != nil {
		t.Fatalf("restore again: %v", err)
	}
	if keys, _ := readTableVia(t, sc.nodes["n3"], "r"); keys != strings.Join(letters(), ",") {
		t.Errorf("r after the second restore: %s", keys)
	}
}

// With failover, an owner that dies before its part is ingested is taken
// over, and the node that took its tablets ingests them: the restore
// completes whole.
func TestFailoverRestoreOwnerDies(t *testing.T) {
	t.Parallel()
	sc := startFailoverCluster(t)
	sc.createTable(t, "n1", "g", "p")
	ctx := context.Background()
	for _, r := range letters() {
		if err := writeScale(t, sc.nodes["n1"].client.Open("t"), r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	if err := sc.nodes["n1"].admin.CreateBackup(ctx, "t", "c1", "bk", time.Now().Add(7*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{})
	var once sync.Once
	sc.knobs.restoreRows.set(func(node string, start, end []byte) error {
		if node == "n3" {
			once.Do(func() { close(asked) })
			return status.Error(codes.Unavailable, "injected: n3 is failing")
		}
		return nil
	})
	t.Cleanup(sc.knobs.restoreRows.unset)
	op := startRestore(t, sc.nodes["n1"], "r")
	<-asked
	sc.nodes["n3"].crash()
	testkit.Eventually(t, "the restore to finish", 30*time.Second, func() (bool, string) {
		o, meta := getOp(t, sc.nodes["n1"], op.Name)
		return o.Done, meta.String()
	})
	if o, _ := getOp(t, sc.nodes["n1"], op.Name); o.GetError() != nil {
		t.Fatalf("restore: %v", o.GetError())
	}
	tabs := scaleTablets(t, sc.nodes["n2"], "r")
	if strings.Contains(tabs, "n3") {
		t.Errorf("tablets of r: %s", tabs)
	}
	for _, id := range []string{"n1", "n2"} {
		if keys, _ := readTableVia(t, sc.nodes[id], "r"); keys != strings.Join(letters(), ",") {
			t.Errorf("r through %s: %s", id, keys)
		}
	}
}

// holdRestoreOn holds node's part of every restore until release is
// called (at cleanup at the latest).
func holdRestoreOn(t *testing.T, sc *scaleCluster, node string) (release func()) {
	held := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	sc.knobs.restoreRows.set(func(n string, start, end []byte) error {
		if n == node {
			<-held
		}
		return nil
	})
	t.Cleanup(func() {
		release()
		sc.knobs.restoreRows.unset()
	})
	return release
}
