package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/backup"
	"github.com/ebbtable/ebbtable/clock"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const scaleInstance = "projects/" + testProject + "/instances/" + testInstance

// readTableVia reads a table through a node: row → value of f:c.
func readTableVia(t *testing.T, n *scaleNode, tableID string) (string, map[string]string) {
	t.Helper()
	var keys []string
	vals := map[string]string{}
	err := n.client.Open(tableID).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		keys = append(keys, r.Key())
		vals[r.Key()] = string(r["f"][0].Value)
		return true
	})
	if err != nil {
		t.Fatalf("read %s through %s: %v", tableID, n.id, err)
	}
	return strings.Join(keys, ","), vals
}

// backupObjects lists the backup files in the shared store.
func backupObjects(t *testing.T, sc *scaleCluster) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(sc.shared, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), "backup.") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func scaleTablets(t *testing.T, n *scaleNode, tableID string) string {
	t.Helper()
	tabs, err := n.ops.ListTablets(context.Background(), &clusterpb.ListTabletsRequest{Table: scaleInstance + "/tables/" + tableID})
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, tb := range tabs.Tablets {
		s = append(s, "["+string(tb.Start)+","+string(tb.End)+")"+tb.Owner)
	}
	return strings.Join(s, " ")
}

// A table split over three nodes is backed up through n1, which then
// leaves; the backup is seen from the others, restored through n2 and
// read whole through n3 (and n2).
func TestScaleOutBackupRestore(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	sc.createTable(t, "n1", "g", "p")
	ctx := context.Background()
	// A tablet split and moved, so n3 owns two tablets and the backup has
	// a part per tablet.
	split, err := sc.nodes["n2"].ops.SplitTablet(ctx, &clusterpb.SplitTabletRequest{Table: scaleTable, Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	var moving uint64
	for _, tb := range split.Tablets {
		if string(tb.Start) == "k" {
			moving = tb.Id
		}
	}
	testkit.Eventually(t, "n1 to see the split", 10*time.Second, func() (bool, string) {
		d, _ := sc.nodes["n1"].srv.ClusterMember().Directory(scaleTable)
		_, _, ok := d.Find(moving)
		return ok, "not yet"
	})
	if _, err := sc.nodes["n1"].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: moving, To: "n3"}); err != nil {
		t.Fatal(err)
	}
	tbl := sc.nodes["n2"].client.Open("t")
	var want []string
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatalf("write %s: %v", r, err)
		}
		want = append(want, r)
	}
	expire := time.Now().Add(7 * 24 * time.Hour)
	if err := sc.nodes["n1"].admin.CreateBackup(ctx, "t", "c1", "b1", expire); err != nil {
		t.Fatalf("backup through n1: %v", err)
	}
	// Every node sees it, READY, with every cell.
	for _, id := range []string{"n1", "n2", "n3"} {
		info, err := sc.nodes[id].admin.BackupInfo(ctx, "c1", "b1")
		if err != nil {
			t.Fatalf("backup info through %s: %v", id, err)
		}
		if info.State != "READY" || info.SourceTable != "t" || info.SizeBytes == 0 {
			t.Errorf("through %s: %+v", id, info)
		}
		it := sc.nodes[id].admin.Backups(ctx, "-")
		var names []string
		for {
			b, err := it.Next()
			if err != nil {
				break
			}
			names = append(names, b.Name)
		}
		if strings.Join(names, ",") != "b1" {
			t.Errorf("backups listed through %s: %v", id, names)
		}
	}
	if len(backupObjects(t, sc)) < 3 {
		t.Fatalf("backup files in the shared store: %v", backupObjects(t, sc))
	}
	// Writes after the backup are not in it.
	if err := writeScale(t, tbl, "zz", "late"); err != nil {
		t.Fatal(err)
	}

	sc.nodes["n1"].stop()
	n2, n3 := sc.nodes["n2"], sc.nodes["n3"]
	testkit.Eventually(t, "n2 to see n1 gone", 10*time.Second, func() (bool, string) {
		_, live := n2.srv.ClusterMember().Node("n1")
		return !live, "n1 still listed"
	})
	if _, err := n3.admin.BackupInfo(ctx, "c1", "b1"); err != nil {
		t.Fatalf("backup after n1 left: %v", err)
	}
	if err := n2.admin.RestoreTable(ctx, "t2", "c1", "b1"); err != nil {
		t.Fatalf("restore through n2: %v", err)
	}
	// The restored table has one tablet per part, on the live nodes.
	tabs := scaleTablets(t, n3, "t2")
	if strings.Count(tabs, "[") != 4 || strings.Contains(tabs, "n1") || !strings.Contains(tabs, "n2") || !strings.Contains(tabs, "n3") {
		t.Errorf("tablets of t2: %s", tabs)
	}
	for _, n := range []*scaleNode{n3, n2} {
		keys, vals := readTableVia(t, n, "t2")
		if keys != strings.Join(want, ",") {
			t.Errorf("t2 through %s: rows %s", n.id, keys)
		}
		for _, r := range want {
			if vals[r] != "v"+r {
				t.Errorf("t2 through %s: %s = %q", n.id, r, vals[r])
			}
		}
	}
	// The same table id and schema on both live nodes.
	m2, err2 := n2.srv.Engine().Table(scaleInstance, "t2")
	m3, err3 := n3.srv.Engine().Table(scaleInstance, "t2")
	if err2 != nil || err3 != nil || m2.ID != m3.ID || m2.Restored == nil || len(m2.Families) != 1 {
		t.Fatalf("t2 on n2 %+v %v, on n3 %+v %v", m2, err2, m3, err3)
	}
	// The restored table takes writes through any node, like any other.
	if err := writeScale(t, n3.client.Open("t2"), "b", "new"); err != nil {
		t.Fatal(err)
	}
	if _, vals := readTableVia(t, n2, "t2"); vals["b"] != "new" {
		t.Errorf("t2 b after a write: %q", vals["b"])
	}

	// A copy through n3 to another cluster id outlives the original.
	objs := len(backupObjects(t, sc))
	if _, err := adminpb.NewBigtableTableAdminClient(n3.conn).CopyBackup(ctx, &adminpb.CopyBackupRequest{Parent: scaleInstance + "/clusters/c2",
		BackupId: "b1copy", SourceBackup: scaleInstance + "/clusters/c1/backups/b1", ExpireTime: timestamppb.New(time.Now().Add(48 * time.Hour))}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the copy to be READY", 10*time.Second, func() (bool, string) {
		info, err := n2.admin.BackupInfo(ctx, "c2", "b1copy")
		if err != nil {
			return false, err.Error()
		}
		return info.State == "READY", info.State
	})
	if got := len(backupObjects(t, sc)); got != 2*objs {
		t.Errorf("%d files after the copy, want %d", got, 2*objs)
	}

	// Deleted through n3: gone for n2, files removed.
	if err := n3.admin.DeleteBackup(ctx, "c1", "b1"); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.admin.BackupInfo(ctx, "c1", "b1"); status.Code(err) != codes.NotFound {
		t.Errorf("backup info after delete: %v", err)
	}
	if got := len(backupObjects(t, sc)); got != objs {
		t.Errorf("%d files after deleting the original, want the copy's %d", got, objs)
	}
	if err := n3.admin.RestoreTable(ctx, "t3", "c2", "b1copy"); err != nil {
		t.Fatalf("restore of the copy: %v", err)
	}
	if keys, _ := readTableVia(t, n2, "t3"); keys != strings.Join(want, ",") {
		t.Errorf("t3 through n2: rows %s", keys)
	}
	if err := n2.admin.DeleteBackup(ctx, "c2", "b1copy"); err != nil {
		t.Fatal(err)
	}
	if objs := backupObjects(t, sc); len(objs) != 0 {
		t.Errorf("files left after delete: %v", objs)
	}
}

// Bad requests get their code and change nothing: no backup record, no
// file, no schema log entry, no table.
func TestScaleOutBackupBadInput(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	sc.createTable(t, "n1", "g", "p")
	ctx := context.Background()
	n1, n2 := sc.nodes["n1"], sc.nodes["n2"]
	ta := adminpb.NewBigtableTableAdminClient(n2.conn)
	expire := timestamppb.New(time.Now().Add(48 * time.Hour))
	create := func(table, id string, exp *timestamppb.Timestamp) error {
		_, err := ta.CreateBackup(ctx, &adminpb.CreateBackupRequest{Parent: scaleInstance + "/clusters/c1", BackupId: id,
			Backup: &adminpb.Backup{SourceTable: scaleInstance + "/tables/" + table, ExpireTime: exp}})
		return err
	}
	if err := create("nope", "b1", expire); status.Code(err) != codes.NotFound {
		t.Errorf("backup of an unknown table: %v", err)
	}
	if err := create("t", "b1", timestamppb.New(time.Now().Add(time.Hour))); status.Code(err) != codes.InvalidArgument {
		t.Errorf("backup expiring in an hour: %v", err)
	}
	if err := create("t", "bad/id", expire); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad backup id: %v", err)
	}
	if objs := backupObjects(t, sc); len(objs) != 0 {
		t.Errorf("files after refused backups: %v", objs)
	}
	list, err := adminpb.NewBigtableTableAdminClient(n1.conn).ListBackups(ctx, &adminpb.ListBackupsRequest{Parent: scaleInstance + "/clusters/-"})
	if err != nil || len(list.Backups) != 0 {
		t.Fatalf("backups after refused requests: %v %v", list, err)
	}
	if err := n1.admin.CreateBackup(ctx, "t", "c1", "b1", expire.AsTime()); err != nil {
		t.Fatal(err)
	}
	if err := create("t", "b1", expire); status.Code(err) != codes.AlreadyExists {
		t.Errorf("a second b1: %v", err)
	}

	seq := n2.srv.ClusterMember().SchemaSeq()
	restore := func(table, bk string) error {
		_, err := ta.RestoreTable(ctx, &adminpb.RestoreTableRequest{Parent: scaleInstance, TableId: table,
			Source: &adminpb.RestoreTableRequest_Backup{Backup: scaleInstance + "/clusters/c1/backups/" + bk}})
		return err
	}
	if err := restore("t", "b1"); status.Code(err) != codes.AlreadyExists {
		t.Errorf("restore onto an existing table: %v", err)
	}
	if err := restore("t2", "nope"); status.Code(err) != codes.NotFound {
		t.Errorf("restore of an unknown backup: %v", err)
	}
	if err := restore("bad/name", "b1"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("restore to a bad table id: %v", err)
	}
	if got := n2.srv.ClusterMember().SchemaSeq(); got != seq {
		t.Errorf("schema log grew from %d to %d", seq, got)
	}
	for _, n := range sc.nodes {
		if _, err := n.srv.Engine().Table(scaleInstance, "t2"); err == nil {
			t.Errorf("t2 exists on %s", n.id)
		}
	}
	// The backup and table t are untouched.
	info, err := n2.admin.BackupInfo(ctx, "c1", "b1")
	if err != nil || info.State != "READY" {
		t.Errorf("b1 after refused restores: %+v %v", info, err)
	}
	// Updates: the expiry through one node is seen through another.
	next := time.Now().Add(72 * time.Hour).Truncate(time.Second)
	if err := n1.admin.UpdateBackup(ctx, "c1", "b1", next); err != nil {
		t.Fatal(err)
	}
	if info, err := sc.nodes["n3"].admin.BackupInfo(ctx, "c1", "b1"); err != nil || !info.ExpireTime.Equal(next) {
		t.Errorf("expire time through n3: %v %v, want %v", info.ExpireTime, err, next)
	}
	if err := n1.admin.UpdateBackup(ctx, "c1", "b1", time.Now().Add(time.Hour)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("expiry in an hour: %v", err)
	}
}

func TestPiecesOf(t *testing.T) {
	d, err := tablets.NewDirectory("i/t", 1, [][]byte{[]byte("g"), []byte("p")}, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	show := func(ps []tablets.Tablet) string {
		var s []string
		for _, p := range ps {
			s = append(s, "["+string(p.Start)+","+string(p.End)+")"+p.Owner)
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct{ start, end, want string }{
		{"", "", "[,g)a [g,p)b [p,)c"},
		{"h", "", "[h,p)b [p,)c"},
		{"a", "h", "[a,g)a [g,h)b"},
		{"g", "p", "[g,p)b"},
		{"q", "r", "[q,r)c"},
	} {
		var end []byte
		if c.end != "" {
			end = []byte(c.end)
		}
		if got := show(piecesOf(d, rowSpan{[]byte(c.start), end})); got != c.want {
			t.Errorf("[%s,%s): %s, want %s", c.start, c.end, got, c.want)
		}
	}
}

// Expired backups are deleted by any node's sweep; a backup left CREATING
// by a maker that died can be deleted, one whose maker lives cannot.
func TestScaleOutBackupExpiryAndStale(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2")
	sc.createTable(t, "n1", "g")
	ctx := context.Background()
	n1, n2 := sc.nodes["n1"], sc.nodes["n2"]
	tbl := n1.client.Open("t")
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
	}
	if err := n1.admin.CreateBackup(ctx, "t", "c1", "old", time.Now().Add(7*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// While a restore reads it (marked in its record), it is not deleted.
	bname := backup.Name{Instance: scaleInstance, Cluster: "c1", ID: "old"}
	runningBackups.Store("n2/test-restore", true)
	if _, err := n2.srv.cluster.markRestoring(ctx, bname, "n2/test-restore", true); err != nil {
		t.Fatal(err)
	}
	if err := n1.admin.DeleteBackup(ctx, "c1", "old"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("delete of a backup being restored: %v", err)
	}
	// A restore whose maker is gone does not hold it.
	runningBackups.Delete("n2/test-restore")
	if _, err := n2.srv.cluster.markRestoring(ctx, bname, "n9/gone", true); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.srv.cluster.markRestoring(ctx, bname, "n9/gone", false); err != nil {
		t.Fatal(err)
	}

	// Make its record expired, as the clock passing its expire time would.
	m := n2.srv.ClusterMember()
	name := scaleInstance + "/clusters/c1/backups/old"
	rec, err := m.GetBackupRecord(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	mf, maker, err := backup.DecodeRecord(rec.Value)
	if err != nil {
		t.Fatal(err)
	}
	mf.ExpireTime = time.Now().Add(-time.Minute)
	enc, _ := backup.EncodeRecord(mf, maker)
	if _, err := m.UpdateBackupRecord(ctx, name, enc, rec.Revision); err != nil {
		t.Fatal(err)
	}
	if err := n1.admin.RestoreTable(ctx, "t2", "c1", "old"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("restore of an expired backup: %v", err)
	}
	n2.srv.cluster.sweepBackups(ctx)
	if _, err := n1.admin.BackupInfo(ctx, "c1", "old"); status.Code(err) != codes.NotFound {
		t.Errorf("expired backup after a sweep: %v", err)
	}
	if objs := backupObjects(t, sc); len(objs) != 0 {
		t.Errorf("files of the expired backup: %v", objs)
	}

	// Records in state CREATING: one by a node that is not in the cluster,
	// one by a live node's running job.
	creating := func(id, maker string) {
		t.Helper()
		mf, err := backup.NewClusterManifest(backup.Name{Instance: scaleInstance, Cluster: "c1", ID: id}, "t", mf.Schema, "backup.x."+id+".", time.Now(), time.Now().Add(7*time.Hour), backup.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		enc, err := backup.EncodeRecord(mf, maker)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.CreateBackupRecord(ctx, mf.Name, enc); err != nil {
			t.Fatal(err)
		}
	}
	creating("dead", "n9/abc")
	creating("busy", "n1/abc")
	// (The official client's BackupInfo refuses a backup without an end time.)
	b, err := adminpb.NewBigtableTableAdminClient(n2.conn).GetBackup(ctx, &adminpb.GetBackupRequest{Name: scaleInstance + "/clusters/c1/backups/busy"})
	if err != nil || b.State != adminpb.Backup_CREATING {
		t.Errorf("busy: %v %v", b, err)
	}
	if err := n2.admin.RestoreTable(ctx, "t3", "c1", "busy"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("restore of a backup being created: %v", err)
	}
	if err := n2.admin.DeleteBackup(ctx, "c1", "busy"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("delete of a backup a live node is making: %v", err)
	}
	if err := n2.admin.DeleteBackup(ctx, "c1", "dead"); err != nil {
		t.Errorf("delete of a backup whose maker is gone: %v", err)
	}
	// n1 itself knows it runs no job with that token.
	if err := n1.admin.DeleteBackup(ctx, "c1", "busy"); err != nil {
		t.Errorf("delete through the maker of a backup it is not making: %v", err)
	}
}

// Backups taken while a tablet moves back and forth hold every row: a part
// whose owner changed is cut again and asked of the new owner.
func TestScaleOutBackupDuringMoves(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	sc.createTable(t, "n1", "g", "p")
	ctx := context.Background()
	tbl := sc.nodes["n1"].client.Open("t")
	var want []string
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
	}
	// The owner refuses rows it does not own (UNAVAILABLE, so the
	// coordinator asks again).
	m := sc.nodes["n1"].srv.ClusterMember()
	if _, err := sc.nodes["n1"].srv.cluster.backupRows(ctx, &clusterpb.BackupRowsRequest{Table: scaleTable, Start: []byte("p"),
		Revision: m.Revision(), Objects: "backup.test.", FilePrefix: "x-"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("rows of another node's tablet: %v", err)
	}
	d, _ := m.Directory(scaleTable)
	mid := d.Tablets[1].ID
	// A move sent while n1's directory is stale is forwarded to the old
	// owner, which answers ABORTED ("retry"): retried, as a client would.
	move := func(to string) error {
		var err error
		testkit.Poll(20*time.Second, func() bool {
			_, err = sc.nodes["n1"].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: mid, To: to})
			return status.Code(err) != codes.Aborted
		})
		return err
	}
	// Backup b0: the middle tablet moves after the coordinator cut the
	// table and before it asks the owner, which then no longer owns it.
	var once sync.Once
	var asked atomic.Int32
	sc.knobs.backupRows.set(func(p tablets.Tablet) {
		if p.ID == mid {
			asked.Add(1)
			once.Do(func() {
				if err := move("n3"); err != nil {
					t.Errorf("move during the backup: %v", err)
				}
			})
		}
	})
	if err := sc.nodes["n1"].admin.CreateBackup(ctx, "t", "c1", "b0", time.Now().Add(7*time.Hour)); err != nil {
		t.Fatalf("backup with a move before its part: %v", err)
	}
	sc.knobs.backupRows.unset()
	if n := asked.Load(); n < 2 {
		t.Errorf("the moved piece was asked for %d times, want a second time of its new owner", n)
	}
	// Backups b1..: moves run alongside (a few, so they do not starve the
	// backup: a tablet moving without pause cannot be read).
	done := make(chan error)
	go func() {
		var err error
		for _, to := range []string{"n2", "n3", "n2"} {
			err = errors.Join(err, move(to))
		}
		done <- err
	}()
	const backups = 4
	for i := 1; i < backups; i++ {
		if err := sc.nodes["n1"].admin.CreateBackup(ctx, "t", "c1", fmt.Sprintf("b%d", i), time.Now().Add(7*time.Hour)); err != nil {
			<-done
			t.Fatalf("backup %d during moves: %v", i, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := 0; i < backups; i++ {
		id := fmt.Sprintf("r%d", i)
		if err := sc.nodes["n2"].admin.RestoreTable(ctx, id, "c1", fmt.Sprintf("b%d", i)); err != nil {
			t.Fatal(err)
		}
		keys, vals := readTableVia(t, sc.nodes["n3"], id)
		if keys != strings.Join(want, ",") || vals["h"] != "vh" {
			t.Errorf("restored %s: rows %s", id, keys)
		}
	}
}

// A table's automated backup policy reaches every node with CreateTable;
// whichever nodes check, the cluster gets one backup of every tablet.
func TestScaleOutAutomatedBackup(t *testing.T) {
	t.Parallel()
	// The nodes' clock starts at a whole minute, so the checks below all
	// fall in one minute (backups are named after it).
	clk := clock.NewShifted(time.Now().Truncate(time.Minute).Add(time.Minute))
	sc := startScaleClusterTuned(t, 0, func(o *Options) { o.Clock = clk }, "n1", "n2", "n3")
	ctx := context.Background()
	policy := bigtable.TableAutomatedBackupPolicy{RetentionPeriod: 72 * time.Hour, Frequency: 24 * time.Hour}
	if err := sc.nodes["n1"].admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: []string{"g", "p"},
		ColumnFamilies: map[string]bigtable.Family{"f": {}}, AutomatedBackupConfig: &policy}); err != nil {
		t.Fatal(err)
	}
	tbl := sc.nodes["n1"].client.Open("t")
	var want []string
	for _, r := range letters() {
		if err := writeScale(t, tbl, r, "v"+r); err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
	}
	// The nodes' own loops check once a minute; the test checks now, on
	// every node at once.
	errs := make(chan error, 3)
	for _, n := range sc.nodes {
		go func(n *scaleNode) { errs <- n.srv.takeAutoBackups(ctx) }(n)
	}
	for range sc.nodes {
		if err := <-errs; err != nil {
			t.Errorf("automated backup: %v", err)
		}
	}
	list, err := adminpb.NewBigtableTableAdminClient(sc.nodes["n3"].conn).ListBackups(ctx, &adminpb.ListBackupsRequest{Parent: scaleInstance + "/clusters/-"})
	if err != nil || len(list.Backups) != 1 {
		t.Fatalf("backups after automated checks on every node: %v %v", list, err)
	}
	b := list.Backups[0]
	id := b.Name[strings.LastIndex(b.Name, "/")+1:]
	cluster := strings.Split(b.Name, "/")[5]
	if err := sc.nodes["n2"].admin.RestoreTable(ctx, "t2", cluster, id); err != nil {
		t.Fatal(err)
	}
	if keys, _ := readTableVia(t, sc.nodes["n3"], "t2"); keys != strings.Join(want, ",") {
		t.Errorf("restored automated backup: rows %s", keys)
	}
}
