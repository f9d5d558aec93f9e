package table

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/ebbtable/ebbtable/cell"
)

// TestPointReadOneRow: a read of one row key (pointIntervals' one-row
// interval and its bounds) returns that row and nothing else, as the same
// row read as a closed range does, for keys whose escaped forms are
// neighbours: zero and 0xFF bytes, a key and its successor, prefixes.
func TestPointReadOneRow(t *testing.T) {
	e := openPlain(t)
	keys := []string{"a", "a\x00", "a\x00\x00", "a\x00\x01", "a\x01", "a\xff", "a\xff\x00", "ab", "\x00", "\x00\xff", "\xff", "\xff\xff", "\xff\x00", "b", "bb"}
	for i, k := range keys {
		if err := e.MutateRow(testInst, "t", []byte(k), []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte(fmt.Sprint(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(req ReadRequest) []string {
		t.Helper()
		var got []string
		if err := e.ReadRows(context.Background(), testInst, "t", req, func(r cell.Row) error {
			for _, c := range r.Cells {
				got = append(got, fmt.Sprintf("%q=%s", r.Key, c.Value))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	probes := append(append([]string{}, keys...), "", "a\x00\x00\x00", "a\xfe", "aa", "\x00\x00", "c")
	for i, k := range probes {
		want := read(ReadRequest{Ranges: []RowRange{{Start: []byte(k), End: []byte(k), EndClosed: true}}})
		if i < len(keys) && (len(want) != 1 || want[0] != fmt.Sprintf("%q=%d", k, i)) {
			t.Fatalf("range read of %q: %v", k, want)
		}
		for _, rev := range []bool{false, true} {
			if got := read(ReadRequest{Keys: [][]byte{[]byte(k)}, Reversed: rev}); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("point read of %q (reversed %v): %v, want %v", k, rev, got, want)
			}
		}
	}
}

// TestPointReadRowInValueChunk: a point read carves its row key and
// qualifiers from the value chunk (scanner.point); the rows it returns are
// the ones a range read of the same row returns (keys and qualifiers with
// zero bytes, a qualifier and a value too long for the chunk, several
// versions and columns), and each piece is capped at its length: appending
// to the returned key or a qualifier leaves the other pieces as they were.
func TestPointReadRowInValueChunk(t *testing.T) {
	e := openPlain(t)
	long := bytes.Repeat([]byte{'q', 0}, 1500)
	rows := map[string][]Mutation{}
	for _, k := range []string{"r", "r\x00", "\x00\xff", string(bytes.Repeat([]byte("k"), 200))} {
		var ms []Mutation
		for i, q := range [][]byte{[]byte("a"), {0, 1, 0}, nil, long} {
			for v := range 3 {
				ms = append(ms, Mutation{Kind: SetCell, Family: "cf", Qualifier: q, Timestamp: int64(1000 * (v + 1)),
					Value: bytes.Repeat([]byte{byte('0' + i), byte(v)}, 1+i*600)})
			}
		}
		rows[k] = ms
		if err := e.MutateRow(testInst, "t", []byte(k), ms); err != nil {
			t.Fatal(err)
		}
	}
	read := func(req ReadRequest) []cell.Row {
		t.Helper()
		var got []cell.Row
		if err := e.ReadRows(context.Background(), testInst, "t", req, func(r cell.Row) error {
			got = append(got, r)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for k := range rows {
		want := read(ReadRequest{Ranges: []RowRange{{Start: []byte(k), End: []byte(k), EndClosed: true}}})
		got := read(ReadRequest{Keys: [][]byte{[]byte(k)}})
		if len(got) != 1 || len(want) != 1 || !reflect.DeepEqual(got[0], want[0]) {
			t.Fatalf("point read of %q: %v, want %v", k, got, want)
		}
		if len(got[0].Cells) != 12 {
			t.Fatalf("point read of %q: %d cells, want 12", k, len(got[0].Cells))
		}
		// Append to every piece; the rest must not move.
		r := got[0]
		_ = append(r.Key, "XXXXXXXX"...)
		for _, c := range r.Cells {
			_ = append(c.Qualifier, "XXXXXXXX"...)
		}
		if !reflect.DeepEqual(r, want[0]) {
			t.Fatalf("point read of %q: appending to its key or qualifiers changed the row: %v, want %v", k, r, want[0])
		}
	}
	// Every row in one point read: their keys, qualifiers and values share
	// chunks, and each row is still the one a range read of it returns.
	keys := slices.Sorted(maps.Keys(rows))
	var want []cell.Row
	for _, k := range keys {
		want = append(want, read(ReadRequest{Ranges: []RowRange{{Start: []byte(k), End: []byte(k), EndClosed: true}}})...)
	}
	var req ReadRequest
	for _, k := range keys {
		req.Keys = append(req.Keys, []byte(k))
	}
	got := read(req)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("point read of every row: %v, want %v", got, want)
	}
}
