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
