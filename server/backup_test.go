package server

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const testInstanceName = "projects/" + testProject + "/instances/" + testInstance

func readRows(t *testing.T, tbl *bigtable.Table) map[string]bigtable.Row {
	t.Helper()
	out := map[string]bigtable.Row{}
	err := tbl.ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		key := r.Key()
		for _, items := range r {
			for i := range items {
				items[i].Row = "" // compare contents, not which table they came from
			}
		}
		out[key] = r
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func expectCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: %v, want %v", what, err, code)
	}
}

// TestBackupRestoreOfficialClient drives backups end to end through the
// official admin client, which waits on each operation through
// google.longrunning.Operations.
func TestBackupRestoreOfficialClient(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	src := env.createTable(t, "events", map[string]bigtable.GCPolicy{
		"cf":  bigtable.MaxVersionsPolicy(2),
		"raw": bigtable.NoGcPolicy(),
	})
	for i := range 100 {
		m := bigtable.NewMutation()
		m.Set("cf", "c", bigtable.Timestamp(1000), []byte(fmt.Sprint("v", i)))
		m.Set("raw", "x", bigtable.Timestamp(2000), []byte("r"))
		if err := src.Apply(ctx, fmt.Sprintf("row%03d", i), m); err != nil {
			t.Fatal(err)
		}
	}
	want := readRows(t, src)
	if len(want) != 100 {
		t.Fatalf("source has %d rows, want 100", len(want))
	}
	now := env.clock.Now()

	if err := env.admin.CreateBackup(ctx, "events", "c1", "bk1", now.Add(7*24*time.Hour)); err != nil {
		t.Fatalf("CreateBackup: %v", err)
	}
	// Writes after the backup are not in it.
	m := bigtable.NewMutation()
	m.DeleteRow()
	if err := src.Apply(ctx, "row000", m); err != nil {
		t.Fatal(err)
	}

	info, err := env.admin.BackupInfo(ctx, "c1", "bk1")
	if err != nil {
		t.Fatalf("BackupInfo: %v", err)
	}
	if info.SourceTable != "events" || info.State != "READY" || info.SizeBytes == 0 || !info.ExpireTime.Equal(now.Add(7*24*time.Hour)) {
		t.Errorf("BackupInfo = %+v", info)
	}

	// Errors a caller can act on.
	expectCode(t, "backup id taken", env.admin.CreateBackup(ctx, "events", "c1", "bk1", now.Add(7*24*time.Hour)), codes.AlreadyExists)
	expectCode(t, "expiry under 6h", env.admin.CreateBackup(ctx, "events", "c1", "bk2", now.Add(time.Hour)), codes.InvalidArgument)
	expectCode(t, "expiry past 90 days", env.admin.CreateBackup(ctx, "events", "c1", "bk2", now.Add(91*24*time.Hour)), codes.InvalidArgument)
	expectCode(t, "missing table", env.admin.CreateBackup(ctx, "nope", "c1", "bk2", now.Add(7*24*time.Hour)), codes.NotFound)
	_, err = env.admin.BackupInfo(ctx, "c1", "nope")
	expectCode(t, "missing backup", err, codes.NotFound)
	_, err = env.admin.BackupInfo(ctx, "c2", "bk1")
	expectCode(t, "backup in another cluster", err, codes.NotFound)

	if err := env.admin.UpdateBackup(ctx, "c1", "bk1", now.Add(30*24*time.Hour)); err != nil {
		t.Fatalf("UpdateBackup: %v", err)
	}
	expectCode(t, "update past 90 days", env.admin.UpdateBackup(ctx, "c1", "bk1", now.Add(100*24*time.Hour)), codes.InvalidArgument)

	if err := env.admin.RestoreTable(ctx, "restored", "c1", "bk1"); err != nil {
		t.Fatalf("RestoreTable: %v", err)
	}
	if got := readRows(t, env.client.Open("restored")); !reflect.DeepEqual(got, want) {
		t.Errorf("restored rows differ from the source at backup time:\n got %d rows\nwant %d rows", len(got), len(want))
	}
	ti, err := env.admin.TableInfo(ctx, "restored")
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]string{}
	for _, f := range ti.FamilyInfos {
		fams[f.Name] = f.GCPolicy
	}
	if !reflect.DeepEqual(fams, map[string]string{"cf": "versions() > 2", "raw": "<never>"}) {
		t.Errorf("restored families = %v", fams)
	}
	expectCode(t, "restore onto an existing table", env.admin.RestoreTable(ctx, "events", "c1", "bk1"), codes.AlreadyExists)
	expectCode(t, "restore of a missing backup", env.admin.RestoreTable(ctx, "other", "c1", "nope"), codes.NotFound)

	// GetTable reports where the table came from.
	raw := env.rawAdmin(t)
	tbl, err := raw.GetTable(ctx, &adminpb.GetTableRequest{Name: tableName("restored")})
	if err != nil {
		t.Fatal(err)
	}
	bi := tbl.GetRestoreInfo().GetBackupInfo()
	if tbl.GetRestoreInfo().GetSourceType() != adminpb.RestoreSourceType_BACKUP || bi.GetBackup() != testInstanceName+"/clusters/c1/backups/bk1" || bi.GetSourceTable() != tableName("events") {
		t.Errorf("RestoreInfo = %v", tbl.GetRestoreInfo())
	}
	if ri, _ := raw.GetTable(ctx, &adminpb.GetTableRequest{Name: tableName("events")}); ri.GetRestoreInfo() != nil {
		t.Errorf("a table never restored has RestoreInfo %v", ri.GetRestoreInfo())
	}

	// Retention choice through request metadata.
	mctx := metadata.AppendToOutgoingContext(ctx, MetaRestoreRetention, "pause")
	if err := env.admin.RestoreTable(mctx, "paused", "c1", "bk1"); err != nil {
		t.Fatal(err)
	}
	pm, err := env.srv.Engine().Table(testInstanceName, "paused")
	if err != nil || pm.Restored == nil || pm.Restored.Retention != table.RetentionPause {
		t.Errorf("paused restore: %+v, %v", pm, err)
	}
	rm, _ := env.srv.Engine().Table(testInstanceName, "restored")
	if rm.Restored.Retention != table.RetentionDrop {
		t.Errorf("default retention = %q, want drop", rm.Restored.Retention)
	}
	bctx := metadata.AppendToOutgoingContext(ctx, MetaRestoreRetention, "forever")
	expectCode(t, "bad retention", env.admin.RestoreTable(bctx, "bad", "c1", "bk1"), codes.InvalidArgument)

	if err := env.admin.CopyBackup(ctx, "c1", "bk1", testProject, testInstance, "c2", "bk1copy", now.Add(24*time.Hour)); err != nil {
		t.Fatalf("CopyBackup: %v", err)
	}
	var listed []string
	it := env.admin.Backups(ctx, "-")
	for {
		b, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, b.Name+"<"+b.SourceTable+"<"+b.SourceBackup)
	}
	if want := []string{"bk1<events<", "bk1copy<events<" + testInstanceName + "/clusters/c1/backups/bk1"}; !reflect.DeepEqual(listed, want) {
		t.Errorf("Backups(-) = %v, want %v", listed, want)
	}
	if err := env.admin.DeleteBackup(ctx, "c1", "bk1"); err != nil {
		t.Fatal(err)
	}
	expectCode(t, "second delete", env.admin.DeleteBackup(ctx, "c1", "bk1"), codes.NotFound)
	if err := env.admin.RestoreTable(ctx, "fromcopy", "c2", "bk1copy"); err != nil {
		t.Fatal(err)
	}
	if got := readRows(t, env.client.Open("fromcopy")); !reflect.DeepEqual(got, want) {
		t.Errorf("rows restored from the copy differ (%d rows)", len(got))
	}
}

func (env *testEnv) rawAdmin(t *testing.T) adminpb.BigtableTableAdminClient {
	t.Helper()
	conn, err := grpc.NewClient(env.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return adminpb.NewBigtableTableAdminClient(conn)
}

// TestBackupOperationsFinishLater makes backup RPCs return at once, so the
// operations are still running and the client waits through GetOperation.
func TestBackupOperationsFinishLater(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	env.srv.opWait = 0
	ctx := context.Background()
	src := env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": bigtable.NoGcPolicy()})
	bulkSet(t, src, 2000, "r%d", "cf", "c", 1000, "v")
	conn, err := grpc.NewClient(env.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := adminpb.NewBigtableTableAdminClient(conn)
	ops := longrunningpb.NewOperationsClient(conn)
	op, err := raw.CreateBackup(ctx, &adminpb.CreateBackupRequest{
		Parent:   testInstanceName + "/clusters/c",
		BackupId: "b",
		Backup:   &adminpb.Backup{SourceTable: tableName("t"), ExpireTime: timestamppb.New(env.clock.Now().Add(7 * time.Hour))},
	})
	if err != nil {
		t.Fatal(err)
	}
	var md adminpb.CreateBackupMetadata
	if err := op.GetMetadata().UnmarshalTo(&md); err != nil || md.GetSourceTable() != tableName("t") {
		t.Errorf("operation metadata %v, %v", &md, err)
	}
	for !op.GetDone() {
		time.Sleep(5 * time.Millisecond)
		if op, err = ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: op.GetName()}); err != nil {
			t.Fatal(err)
		}
	}
	var b adminpb.Backup
	if err := op.GetResponse().UnmarshalTo(&b); err != nil || b.GetState() != adminpb.Backup_READY || b.GetEndTime() == nil {
		t.Fatalf("finished operation: %v, %v", &b, err)
	}
	// The official client polls the same way.
	if err := env.admin.RestoreTable(ctx, "r", "c", "b"); err != nil {
		t.Fatal(err)
	}
	if n := len(readRows(t, env.client.Open("r"))); n != 2000 {
		t.Errorf("restored %d rows, want 2000", n)
	}
}

// TestBackupExpiryInServer checks the server runs the expiry loop on its
// clock.
func TestBackupExpiryInServer(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": bigtable.NoGcPolicy()})
	if err := env.admin.CreateBackup(ctx, "t", "c", "b", env.clock.Now().Add(6*time.Hour)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		env.clock.Advance(time.Hour)
		if _, err := env.admin.BackupInfo(ctx, "c", "b"); status.Code(err) == codes.NotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("expired backup still there")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := env.clock.Now().Sub(time.Now()); got < 5*time.Hour {
		t.Errorf("backup deleted after %v of fake time, before it expired", got)
	}
}

func TestListBackupsPagesAndOrder(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": bigtable.NoGcPolicy()})
	now := env.clock.Now()
	for i, id := range []string{"a", "b", "c"} {
		if err := env.admin.CreateBackup(ctx, "t", "c"+fmt.Sprint(i%2), id, now.Add(time.Duration(10-i)*24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	raw := env.rawAdmin(t)
	var got []string
	tok := ""
	for {
		resp, err := raw.ListBackups(ctx, &adminpb.ListBackupsRequest{Parent: testInstanceName + "/clusters/-", PageSize: 2, PageToken: tok, OrderBy: "expire_time desc"})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetBackups()) > 2 {
			t.Errorf("page of %d backups, want at most 2", len(resp.GetBackups()))
		}
		for _, b := range resp.GetBackups() {
			got = append(got, b.GetName()[len(testInstanceName+"/clusters/"):])
		}
		if tok = resp.GetNextPageToken(); tok == "" {
			break
		}
	}
	if want := []string{"c0/backups/a", "c1/backups/b", "c0/backups/c"}; !reflect.DeepEqual(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	resp, err := raw.ListBackups(ctx, &adminpb.ListBackupsRequest{Parent: testInstanceName + "/clusters/c1"})
	if err != nil || len(resp.GetBackups()) != 1 {
		t.Errorf("list of cluster c1: %v, %v", resp, err)
	}
	_, err = raw.ListBackups(ctx, &adminpb.ListBackupsRequest{Parent: testInstanceName + "/clusters/-", Filter: "name:a"})
	expectCode(t, "filter", err, codes.Unimplemented)
	_, err = raw.ListBackups(ctx, &adminpb.ListBackupsRequest{Parent: testInstanceName + "/clusters/-", OrderBy: "colour"})
	expectCode(t, "unknown order_by", err, codes.InvalidArgument)
	_, err = raw.GetBackup(ctx, &adminpb.GetBackupRequest{Name: testInstanceName + "/clusters/-/backups/a"})
	expectCode(t, "get in cluster -", err, codes.InvalidArgument)
}
