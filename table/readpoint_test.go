package table

import (
	"context"
	"fmt"
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
