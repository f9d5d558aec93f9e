package clusteretcd

import (
	"context"
	"errors"
	"testing"

	"github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/internal/etcdtest"
)

// An operation record is written in the entry's transaction, and an entry
// guarded by IfTableID is appended only while the directory holds that
// table id: a stale abort cannot drop a newer table of the name.
func TestOpRecordAndTableIDGuard(t *testing.T) {
	t.Parallel()
	ep := etcdtest.Start(t)
	a := join(t, ep, "a")
	waitFor(t, a, "a", func() bool { return len(a.Nodes()) == 1 })
	ctx := context.Background()
	newDir := func(seq uint64) (cluster.Directory, error) {
		return cluster.NewDirectory("tbl", seq, nil, []string{"a"})
	}
	e, err := a.AppendEntry(ctx, SchemaEntry{Method: "RestoreTableBegin", Table: "tbl"}, DirOp{Create: newDir,
		Op: func(seq uint64) (string, []byte, error) { return "tbl/operations/restore-x", []byte{byte(seq)}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := a.GetOpRecord(ctx, "tbl/operations/restore-x")
	if err != nil || len(rec.Value) != 1 || uint64(rec.Value[0]) != e.TableID {
		t.Fatalf("operation record: %+v %v (table id %d)", rec, err, e.TableID)
	}
	if recs, err := a.ListOpRecords(ctx); err != nil || len(recs) != 1 || recs[0].Name != rec.Name {
		t.Fatalf("list: %+v %v", recs, err)
	}
	if _, err := a.UpdateOpRecord(ctx, rec.Name, []byte("x"), rec.Revision-1); !errors.Is(err, ErrRecordChanged) {
		t.Fatalf("update at an old revision: %v", err)
	}
	// The table is dropped and created again: an abort of the first id
	// is refused, and the new directory stays.
	if _, err := a.AppendEntry(ctx, SchemaEntry{Method: "DeleteTable", Table: "tbl"}, DirOp{Drop: true, IfTableID: e.TableID}); err != nil {
		t.Fatal(err)
	}
	e2, err := a.AppendEntry(ctx, SchemaEntry{Method: "CreateTable", Table: "tbl"}, DirOp{Create: newDir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.AppendEntry(ctx, SchemaEntry{Method: "RestoreTableAbort", Table: "tbl"}, DirOp{Drop: true, IfTableID: e.TableID}); !errors.Is(err, ErrDirectoryGone) {
		t.Fatalf("a stale abort: %v", err)
	}
	waitFor(t, a, "the new directory", func() bool { d, ok := a.Directory("tbl"); return ok && d.TableID == e2.TableID })
	if err := a.DeleteOpRecord(ctx, rec.Name, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetOpRecord(ctx, rec.Name); !errors.Is(err, ErrRecordNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

// A backup's record and its operation's are created together and ended
// together: a change to either since it was read refuses the end, and
// the end that deletes the backup takes its IAM policy too.
func TestBackupWithOp(t *testing.T) {
	t.Parallel()
	ep := etcdtest.Start(t)
	a := join(t, ep, "a")
	ctx := context.Background()
	rev, err := a.CreateBackupWithOp(ctx, "b", []byte("creating"), "b/operations/backup-x", []byte("running"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateBackupWithOp(ctx, "b", []byte("creating"), "b/operations/backup-y", []byte("running")); !errors.Is(err, ErrRecordExists) {
		t.Fatalf("a second backup of the name: %v", err)
	}
	if _, err := a.GetOpRecord(ctx, "b/operations/backup-y"); !errors.Is(err, ErrRecordNotFound) {
		t.Fatalf("the refused create's operation: %v", err)
	}
	op, err := a.GetOpRecord(ctx, "b/operations/backup-x")
	if err != nil || op.Revision != rev {
		t.Fatalf("operation: %+v %v", op, err)
	}
	if err := a.PutIAMPolicy(ctx, "b", []byte("policy"), 0); err != nil {
		t.Fatal(err)
	}
	// The backup's record changed since: refused, nothing written.
	brev, err := a.UpdateBackupRecord(ctx, "b", []byte("creating2"), rev)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.EndBackupOp(ctx, "b", []byte("ready"), rev, op.Name, []byte("done"), op.Revision); !errors.Is(err, ErrRecordChanged) {
		t.Fatalf("end at an old backup revision: %v", err)
	}
	if got, _ := a.GetOpRecord(ctx, op.Name); string(got.Value) != "running" {
		t.Fatalf("operation after a refused end: %s", got.Value)
	}
	// The operation changed since (a sweep ended it): refused.
	orev, err := a.UpdateOpRecord(ctx, op.Name, []byte("failed"), op.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.EndBackupOp(ctx, "b", []byte("ready"), brev, op.Name, []byte("done"), op.Revision); !errors.Is(err, ErrRecordChanged) {
		t.Fatalf("end at an old operation revision: %v", err)
	}
	// Ended with the backup deleted: record and policy go.
	if err := a.EndBackupOp(ctx, "b", nil, brev, op.Name, []byte("failed2"), orev); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetBackupRecord(ctx, "b"); !errors.Is(err, ErrRecordNotFound) {
		t.Fatalf("backup after the end: %v", err)
	}
	if got, _ := a.GetOpRecord(ctx, op.Name); string(got.Value) != "failed2" {
		t.Fatalf("operation: %s", got.Value)
	}
	if p, _, err := a.GetIAMPolicy(ctx, "b"); err != nil || p != nil {
		t.Fatalf("policy after the end: %q %v", p, err)
	}
}
