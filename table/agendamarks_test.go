package table_test

import (
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/table"
)

// TestAgendaEntryReused: the writes of a row of a max-versions family
// within half a second of its agenda entry add no other entry; a write
// later than that, or after a settle or a collector's commit over the row
// (which may have deleted the entry), puts a new one. Settling keeps the
// entries a later write may have relied on.
func TestAgendaEntryReused(t *testing.T) {
	eng, clk := openSkipTable(t, map[string]string{"one": "maxversions=1"})
	m, err := eng.Table(skipInst, "t")
	if err != nil {
		t.Fatal(err)
	}
	entries := func() int {
		t.Helper()
		due, later, err := eng.AgendaCounts(m, 1<<62, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return due + later
	}
	write := func(row string) {
		t.Helper()
		clk.Advance(time.Millisecond)
		ts := clock.MillisTruncated(clk.Now())
		if err := eng.MutateRow(skipInst, "t", []byte(row), []table.Mutation{set("one", "q", ts, "v")}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(want int) {
		t.Helper()
		if n := entries(); n != want {
			t.Fatalf("%d agenda entries, want %d", n, want)
		}
	}
	for range 10 {
		write("r")
	}
	check(1)
	write("s")
	check(2)
	// MutateRows relies on the entries too.
	clk.Advance(time.Millisecond)
	ts := clock.MillisTruncated(clk.Now())
	if _, err := eng.MutateRows(skipInst, "t", []table.RowMutation{
		{Row: []byte("r"), Mutations: []table.Mutation{set("one", "q", ts, "w")}},
		{Row: []byte("s"), Mutations: []table.Mutation{set("one", "q", ts, "w")}},
	}); err != nil {
		t.Fatal(err)
	}
	check(2)
	// Past the reuse window: a new entry, relied on again.
	clk.Advance(500 * time.Millisecond)
	write("r")
	write("r")
	check(3)

	// A collector's commit over the row (a visit, which deletes its
	// entries) forgets what the row's writes relied on.
	unlock := eng.LockRows(m.ID, [][]byte{[]byte("r")})
	if err := eng.CommitSystem(eng.NewDeleteBatch(), m, [][]byte{[]byte("r")}, nil, false); err != nil {
		t.Fatal(err)
	}
	unlock()
	write("r")
	check(4)
	write("s") // s's entry is older than the window
	check(5)
	write("s")
	check(5)

	// Settling before now deletes the entries due half a second before it,
	// and keeps the rest: a write may have relied on them.
	clk.Advance(time.Millisecond)
	if err := eng.SettleAgenda(m, clock.Micros(clk.Now())); err != nil {
		t.Fatal(err)
	}
	check(3) // r's two and s's last, written within the last 5 ms
	// The settle forgot every entry relied on.
	write("r")
	write("s")
	check(5)
	clk.Advance(time.Second)
	if err := eng.SettleAgenda(m, clock.Micros(clk.Now())); err != nil {
		t.Fatal(err)
	}
	check(0)
	write("r")
	check(1)
}
