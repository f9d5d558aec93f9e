package clusteretcd

import (
	"context"
	"errors"
	"testing"

	"github.com/ebbtable/ebbtable/internal/etcdtest"
)

// Backup records: one creator wins, changes compare the revision, and
// every member reads the same records.
func TestBackupRecords(t *testing.T) {
	t.Parallel()
	ep := etcdtest.Start(t)
	a, b := join(t, ep, "a"), join(t, ep, "b")
	ctx := context.Background()
	const name = "projects/p/instances/i/clusters/c/backups/x"
	rev, err := a.CreateBackupRecord(ctx, name, []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateBackupRecord(ctx, name, []byte("other")); !errors.Is(err, ErrRecordExists) {
		t.Fatalf("second create: %v", err)
	}
	got, err := b.GetBackupRecord(ctx, name)
	if err != nil || string(got.Value) != "v1" || got.Revision != rev {
		t.Fatalf("read through b: %+v %v (rev %d)", got, err, rev)
	}
	rev2, err := b.UpdateBackupRecord(ctx, name, []byte("v2"), rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.UpdateBackupRecord(ctx, name, []byte("stale"), rev); !errors.Is(err, ErrRecordChanged) {
		t.Fatalf("update from a stale revision: %v", err)
	}
	// The backup's IAM policy goes with its record, not before.
	if err := b.PutIAMPolicy(ctx, name, []byte("policy"), 0); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteBackupRecord(ctx, name, rev); !errors.Is(err, ErrRecordChanged) {
		t.Fatalf("delete from a stale revision: %v", err)
	}
	if v, _, err := a.GetIAMPolicy(ctx, name); err != nil || string(v) != "policy" {
		t.Fatalf("policy after a delete refused: %q %v", v, err)
	}
	if _, err := a.CreateBackupRecord(ctx, "projects/p/instances/j/clusters/c/backups/y", []byte("other instance")); err != nil {
		t.Fatal(err)
	}
	list, err := a.ListBackupRecords(ctx, "projects/p/instances/i/clusters/")
	if err != nil || len(list) != 1 || list[0].Name != name || string(list[0].Value) != "v2" {
		t.Fatalf("list of instance i: %+v %v", list, err)
	}
	if err := a.DeleteBackupRecord(ctx, name, rev2); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetBackupRecord(ctx, name); !errors.Is(err, ErrRecordNotFound) {
		t.Fatalf("read after delete: %v", err)
	}
	if v, _, err := b.GetIAMPolicy(ctx, name); err != nil || v != nil {
		t.Fatalf("policy after the delete: %q %v", v, err)
	}
}
