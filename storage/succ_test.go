package storage

import (
	"bytes"
	"math"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestNextPrefixLeavesTheColumn: Pebble's NextPrefix from a column's newest
// version lands on the next column's first version, in the memtable and in
// an SSTable, whatever the versions' timestamps (with the default
// successor, prefix + 0x00, it stepped to the column's next version).
func TestNextPrefixLeavesTheColumn(t *testing.T) {
	db, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tss := []int64{math.MaxInt64, 1 << 52, 1_700_000_000_000_000, 1000, 1, 0}
	// Columns in key order: qualifier "a", then "a\x00" (whose escaped
	// form extends "a"'s up to its terminator), then "b"; rows "r" and
	// "r\x00".
	type col struct {
		row string
		q   string
	}
	cols := []col{{"r", "a"}, {"r", "a\x00"}, {"r", "b"}, {"r\x00", "a"}}
	for _, c := range cols {
		for _, ts := range tss {
			if err := db.Set(CellKey(7, []byte(c.row), 1, []byte(c.q), ts), []byte("v"), pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(where string) {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: TablePrefix(7), UpperBound: TableEnd(7)})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		i := 0
		for valid := it.First(); valid; valid = it.NextPrefix() {
			if i >= len(cols) {
				t.Fatalf("%s: NextPrefix went past the last column to %x", where, it.Key())
			}
			want := CellKey(7, []byte(cols[i].row), 1, []byte(cols[i].q), tss[0])
			if !bytes.Equal(it.Key(), want) {
				t.Fatalf("%s: column %d: at %x, want its newest version %x", where, i, it.Key(), want)
			}
			i++
		}
		if err := it.Error(); err != nil {
			t.Fatal(err)
		}
		if i != len(cols) {
			t.Fatalf("%s: NextPrefix visited %d columns, want %d", where, i, len(cols))
		}
	}
	check("memtable")
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	check("sstable")
}

func TestColumnSuccessor(t *testing.T) {
	k := CellKey(7, []byte("row"), 3, []byte("q"), 5)
	col := k[:Comparer.Split(k)]
	succ := Comparer.ImmediateSuccessor(nil, col)
	if bytes.Compare(succ, CellKey(7, []byte("row"), 3, []byte("q"), -1)) <= 0 {
		t.Errorf("successor %x sorts before a version of the column", succ)
	}
	if bytes.Compare(succ, CellKey(7, []byte("row"), 3, []byte("q\x00"), math.MaxInt64)) > 0 {
		t.Errorf("successor %x sorts after the next column", succ)
	}
	// Keys that are not columns: their own prefix, followed by 0x00.
	for _, a := range [][]byte{[]byte("meta"), TablePrefix(7), RowPrefix(7, []byte("row"))} {
		if got := Comparer.ImmediateSuccessor(nil, a); !bytes.Equal(got, append(bytes.Clone(a), 0)) {
			t.Errorf("successor of %x = %x, want the key and 0x00", a, got)
		}
	}
}
