package table

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
)

func TestUndeleteTable(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	const retention = 7 * 24 * time.Hour
	open := func() *Engine {
		e, err := Open(Options{Dir: dir, Clock: fake, UndeleteRetention: retention})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	defer func() { e.Close() }()
	create := func(value string) *Meta {
		t.Helper()
		m, err := e.CreateTable(testInst, "t", TableSpec{Families: []FamilySpec{{Name: "cf", GC: gcrule.MustParse("never")}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.MutateRow(testInst, "t", []byte("r"), []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte(value)}}); err != nil {
			t.Fatal(err)
		}
		return m
	}
	read := func() string {
		t.Helper()
		var got string
		if err := e.ReadRows(context.Background(), testInst, "t", ReadRequest{}, func(r cell.Row) error {
			for _, c := range r.Cells {
				got += string(c.Value)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	// stored reports whether any cell remains under a table id.
	stored := func(id uint64) bool {
		t.Helper()
		it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: storage.TablePrefix(id), UpperBound: storage.TableEnd(id)})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		return it.First()
	}

	first := create("one")
	if err := e.DeleteTable(testInst, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Table(testInst, "t"); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("deleted table still listed: %v", err)
	}
	// Restorable, across a restart.
	e.Close()
	e = open()
	if _, err := e.UndeleteTable(testInst, "t"); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "one" {
		t.Fatalf("undeleted table reads %q", got)
	}
	if _, err := e.UndeleteTable(testInst, "t"); !errors.Is(err, ErrTableExists) {
		t.Fatalf("undeleting over a live table: %v", err)
	}
	// Only the newest deleted incarnation of a name is kept.
	if err := e.DeleteTable(testInst, "t"); err != nil {
		t.Fatal(err)
	}
	second := create("two")
	if err := e.DeleteTable(testInst, "t"); err != nil {
		t.Fatal(err)
	}
	if stored(first.ID) || !stored(second.ID) {
		t.Fatalf("after a second deletion: first kept %v, second kept %v", stored(first.ID), stored(second.ID))
	}
	// Nothing is purged before the retention ends; after it, the table
	// cannot be restored, and the next purge removes its cells.
	fake.Advance(retention - time.Second)
	if n, err := e.PurgeDeletedTables(); err != nil || n != 0 {
		t.Fatalf("purge before the retention: %d %v", n, err)
	}
	fake.Advance(time.Second)
	if _, err := e.UndeleteTable(testInst, "t"); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("undelete after the retention: %v", err)
	}
	if n, err := e.PurgeDeletedTables(); err != nil || n != 1 {
		t.Fatalf("purge after the retention: %d %v", n, err)
	}
	if stored(second.ID) {
		t.Fatal("cells of a purged table remain")
	}
	// Without a retention, a deletion is immediate.
	e.Close()
	var err error
	if e, err = Open(Options{Dir: dir, Clock: fake}); err != nil {
		t.Fatal(err)
	}
	third := create("three")
	if err := e.DeleteTable(testInst, "t"); err != nil {
		t.Fatal(err)
	}
	if stored(third.ID) {
		t.Fatal("cells kept with no undelete retention")
	}
	if _, err := e.UndeleteTable(testInst, "t"); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("undelete with no retention: %v", err)
	}
}
