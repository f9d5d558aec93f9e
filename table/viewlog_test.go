package table

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
)

// TestViewLog checks that a logged table's log names the rows of every kind
// of change, without a change stream: writes, several rows at once, a
// system deletion, DropRowRange (a prefix, and everything); that consuming
// entries in a view batch deletes them with the state it writes; that the
// log survives a restart, its sequence going on; and that turning it off
// deletes it and logs nothing more.
func TestViewLog(t *testing.T) {
	dir := t.TempDir()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e, err := Open(Options{Dir: dir, Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close() }()
	m, err := e.CreateTable(testInst, "t", TableSpec{Families: []FamilySpec{{Name: "cf", GC: gcrule.MustParse("never")}}})
	if err != nil {
		t.Fatal(err)
	}
	set := func(row string) {
		t.Helper()
		if err := e.MutateRow(testInst, "t", []byte(row), []Mutation{{Kind: SetCell, Family: "cf", Timestamp: 1000, Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
	}
	log := func() string {
		t.Helper()
		es, _, err := e.ReadViewLog(m.ID, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, en := range es {
			out = append(out, fmt.Sprintf("%d:%s", en.Kind, en.Row))
		}
		return strings.Join(out, " ")
	}
	set("before")
	if got := log(); got != "" {
		t.Fatalf("an unlogged table logged %q", got)
	}
	if err := e.SetViewLogged(m.ID, true); err != nil {
		t.Fatal(err)
	}
	set("a")
	if _, err := e.MutateRows(testInst, "t", []RowMutation{
		{Row: []byte("b"), Mutations: []Mutation{{Kind: SetCell, Family: "cf", Timestamp: 1000, Value: []byte("v")}}},
		{Row: []byte("c"), Mutations: []Mutation{{Kind: DeleteFromRow}}},
	}); err != nil {
		t.Fatal(err)
	}
	db := e.NewDeleteBatch()
	if err := e.CommitSystem(db, m, [][]byte{[]byte("sys")}, nil, false); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := e.DropRowRange(testInst, "t", []byte("pre"), false); err != nil {
		t.Fatal(err)
	}
	if err := e.DropRowRange(testInst, "t", nil, true); err != nil {
		t.Fatal(err)
	}
	want := "1:a 1:b 1:c 1:sys 2:pre 2:"
	if got := log(); got != want {
		t.Fatalf("log %q, want %q", got, want)
	}

	// Consuming two entries with some state deletes just them.
	es, next, err := e.ReadViewLog(m.ID, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	vb := e.NewViewBatch()
	sp := ViewSpace("i/v")
	if err := vb.Set(sp, []byte("k"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := vb.Get(sp, []byte("k")); err != nil || !ok || string(got) != "x" {
		t.Fatalf("a batch reads its own write: %q %v %v", got, ok, err)
	}
	if err := vb.Consumed(es); err != nil {
		t.Fatal(err)
	}
	if err := vb.Commit(); err != nil {
		t.Fatal(err)
	}
	vb.Close()
	if got, want := log(), "1:c 1:sys 2:pre 2:"; got != want {
		t.Fatalf("after consuming two: %q, want %q", got, want)
	}
	// Reading on from where the first read said gives the rest.
	rest, _, err := e.ReadViewLog(m.ID, next, 100)
	if err != nil || len(rest) != 4 || string(rest[0].Row) != "c" {
		t.Fatalf("reading on from %d: %v, %v", next, rest, err)
	}

	// A restart keeps the log, the state and the table's logging.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if e, err = Open(Options{Dir: dir, Clock: fake}); err != nil {
		t.Fatal(err)
	}
	set("after")
	if got, want := log(), "1:c 1:sys 2:pre 2: 1:after"; got != want {
		t.Fatalf("after a restart: %q, want %q", got, want)
	}
	var keys []string
	if err := e.ScanViewState(sp, nil, nil, false, func(k, v []byte) (bool, error) {
		keys = append(keys, string(k)+"="+string(v))
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []string{"k=x"}) {
		t.Fatalf("state after a restart: %q", keys)
	}

	if err := e.SetViewLogged(m.ID, false); err != nil {
		t.Fatal(err)
	}
	set("off")
	if got := log(); got != "" {
		t.Fatalf("log after turning it off: %q", got)
	}
}

// TestViewLogSince checks ViewLogSince against the log: true from a fresh
// engine (the log on disk is unknown) and while entries of the table are
// numbered from the position, false once they are read past; another
// table's entries do not count; a reopened engine with entries on disk
// answers true again.
func TestViewLogSince(t *testing.T) {
	dir := t.TempDir()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e, err := Open(Options{Dir: dir, Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close() }()
	var ids []uint64
	for _, name := range []string{"t", "u"} {
		m, err := e.CreateTable(testInst, name, TableSpec{Families: []FamilySpec{{Name: "cf", GC: gcrule.MustParse("never")}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.SetViewLogged(m.ID, true); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	tid := ids[0]
	set := func(tbl, row string) {
		t.Helper()
		if err := e.MutateRow(testInst, tbl, []byte(row), []Mutation{{Kind: SetCell, Family: "cf", Timestamp: 1000, Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(from uint64) ([]ViewLogEntry, uint64) {
		t.Helper()
		es, next, err := e.ReadViewLog(tid, from, 100)
		if err != nil {
			t.Fatal(err)
		}
		return es, next
	}
	if !e.ViewLogSince(tid, 0) {
		t.Fatal("ViewLogSince(0) of a fresh engine: false, want true")
	}
	_, from := read(0)
	if e.ViewLogSince(tid, from) {
		t.Fatalf("ViewLogSince(%d) with an empty log: true", from)
	}
	set("t", "a")
	if !e.ViewLogSince(tid, from) {
		t.Fatalf("ViewLogSince(%d) after a write: false", from)
	}
	es, next := read(from)
	if len(es) != 1 || next <= from {
		t.Fatalf("read %d entries, next %d from %d; want 1 past it", len(es), next, from)
	}
	if e.ViewLogSince(tid, next) {
		t.Fatalf("ViewLogSince(%d) past the one entry: true", next)
	}
	set("u", "b") // another table's entry
	if e.ViewLogSince(tid, next) {
		t.Fatalf("ViewLogSince(%d) after a write to another table: true", next)
	}
	// Left on disk unconsumed, the entry counts after a reopen.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if e, err = Open(Options{Dir: dir, Clock: fake}); err != nil {
		t.Fatal(err)
	}
	if !e.ViewLogSince(tid, next-1) {
		t.Fatalf("ViewLogSince(%d) of a reopened engine with that entry on disk: false", next-1)
	}
}
