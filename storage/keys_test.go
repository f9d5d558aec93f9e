package storage

import (
	"bytes"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestCellKeyRoundTrip(t *testing.T) {
	cases := []struct {
		row, qual []byte
		fam       uint32
		ts        int64
	}{
		{[]byte("r1"), []byte("q"), 1, 1000},
		{[]byte{}, []byte{}, 0, 0},
		{[]byte{0, 0, 1, 0xff}, []byte{0, 1}, 7, 253402300799999000},
		{[]byte("row\x00with\x00nul"), []byte("\x00"), 1 << 31, 42000},
	}
	for _, c := range cases {
		k := CellKey(9, c.row, c.fam, c.qual, c.ts)
		d, err := DecodeCellKey(k)
		if err != nil {
			t.Fatalf("decode %x: %v", k, err)
		}
		if d.TableID != 9 || !bytes.Equal(d.Row, c.row) || d.FamilyID != c.fam || !bytes.Equal(d.Qualifier, c.qual) || d.Timestamp != c.ts {
			t.Fatalf("round trip of %+v gave %+v", c, d)
		}
		if got := Comparer.Split(k); got != len(k)-SuffixLen {
			t.Fatalf("split %d, want %d", got, len(k)-SuffixLen)
		}
		if RowKeyLen(k) != len(RowPrefix(9, c.row)) {
			t.Fatalf("RowKeyLen %d, want %d", RowKeyLen(k), len(RowPrefix(9, c.row)))
		}
	}
}

type tuple struct {
	row, qual []byte
	fam       uint32
	ts        int64
}

func less(a, b tuple) bool {
	if c := bytes.Compare(a.row, b.row); c != 0 {
		return c < 0
	}
	if a.fam != b.fam {
		return a.fam < b.fam
	}
	if c := bytes.Compare(a.qual, b.qual); c != 0 {
		return c < 0
	}
	return a.ts > b.ts // newest first
}

func randBytes(r *rand.Rand) []byte {
	b := make([]byte, r.IntN(4))
	for i := range b {
		b[i] = []byte{0, 1, 0xff, 'a'}[r.IntN(4)]
	}
	return b
}

// TestKeyOrder checks that encoded keys sort exactly like the tuples they
// encode: row, family, qualifier ascending, timestamp descending.
func TestKeyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var ts []tuple
	for i := 0; i < 3000; i++ {
		ts = append(ts, tuple{randBytes(r), randBytes(r), uint32(r.IntN(3)), int64(r.IntN(4)) * 1000})
	}
	sort.SliceStable(ts, func(i, j int) bool { return less(ts[i], ts[j]) })
	for i := 1; i < len(ts); i++ {
		a := CellKey(1, ts[i-1].row, ts[i-1].fam, ts[i-1].qual, ts[i-1].ts)
		b := CellKey(1, ts[i].row, ts[i].fam, ts[i].qual, ts[i].ts)
		c := bytes.Compare(a, b)
		if c > 0 || (c == 0 && less(ts[i-1], ts[i])) {
			t.Fatalf("order broken between %+v and %+v", ts[i-1], ts[i])
		}
	}
}

func TestRowBounds(t *testing.T) {
	rows := [][]byte{[]byte("a"), []byte("a\x00"), []byte("ab"), []byte("b"), []byte("b\xff")}
	for _, row := range rows {
		k := CellKey(3, row, 1, []byte("q"), 5000)
		if bytes.Compare(k, RowBound(3, row)) < 0 {
			t.Fatalf("row %q below its own bound", row)
		}
		if bytes.Compare(k, RowAfter(3, row)) >= 0 {
			t.Fatalf("row %q not below RowAfter", row)
		}
		if bytes.Compare(k, TablePrefix(3)) < 0 || bytes.Compare(k, TableEnd(3)) >= 0 {
			t.Fatalf("row %q outside its table", row)
		}
	}
	// Prefix "a" covers a, a\x00, ab but not b.
	lo, hi := RowPrefixScanStart(3, []byte("a")), RowPrefixScanEnd(3, []byte("a"))
	for _, row := range rows {
		k := CellKey(3, row, 1, nil, 0)
		in := bytes.Compare(k, lo) >= 0 && bytes.Compare(k, hi) < 0
		if want := bytes.HasPrefix(row, []byte("a")); in != want {
			t.Fatalf("prefix scan of %q: in=%v want %v", row, in, want)
		}
	}
}

func TestValueRoundTrip(t *testing.T) {
	for _, exp := range []int64{0, 1, 253402300799999000} {
		v := EncodeValue([]byte("hello"), exp)
		data, got, err := DecodeValue(v)
		if err != nil || string(data) != "hello" || got != exp || ValueExpiry(v) != exp {
			t.Fatalf("exp %d: data %q got %d err %v", exp, data, got, err)
		}
	}
	if _, _, err := DecodeValue([]byte{0x80}); err == nil {
		t.Fatal("unknown flag accepted")
	}
}

func FuzzDecodeCellKey(f *testing.F) {
	f.Add(CellKey(1, []byte("r"), 2, []byte("q"), 3000))
	f.Add([]byte{tagCell, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, k []byte) {
		d, err := DecodeCellKey(k)
		if err != nil {
			return
		}
		again := CellKey(d.TableID, d.Row, d.FamilyID, d.Qualifier, d.Timestamp)
		if !bytes.Equal(again, k) {
			t.Fatalf("decode/encode mismatch: %x vs %x", k, again)
		}
	})
}

// TestSplitOnlySplitsCellKeys: bounds built from row, family and column
// prefixes are never mistaken for cell keys, however long they are.
func TestSplitOnlySplitsCellKeys(t *testing.T) {
	long := []byte("user-0000000001-with-a-long-key")
	for _, tid := range []uint64{1, 9, 1 << 40} {
		for _, row := range [][]byte{long, []byte("r"), {0, 1, 0, 1}, []byte("\x00\x00\x00\x00\x00\x00\x00\x01")} {
			bounds := [][]byte{
				TablePrefix(tid), TableEnd(tid), RowPrefix(tid, row), RowAfter(tid, row),
				FamilyPrefix(tid, row, 1), FamilyPrefix(tid, row, 9), ColumnPrefix(tid, row, 2, long),
				PrefixEnd(ColumnPrefix(tid, row, 2, []byte("q"))), RowPrefixScanStart(tid, row), RowPrefixScanEnd(tid, row),
			}
			for _, b := range bounds {
				if got := Comparer.Split(b); got != len(b) {
					t.Fatalf("bound %x split at %d", b, got)
				}
			}
			k := CellKey(tid, row, 3, long, 5000)
			if got := Comparer.Split(k); got != len(k)-SuffixLen {
				t.Fatalf("cell key %x split at %d", k, got)
			}
		}
	}
}

func TestWithTableIDAndCellFamilyID(t *testing.T) {
	k := CellKey(7, []byte("r\x00w"), 3, []byte("q\x00"), 5000)
	moved, err := WithTableID([]byte("junk"), k, 0)
	if err != nil {
		t.Fatal(err)
	}
	moved = moved[4:]
	d, err := DecodeCellKey(moved)
	if err != nil || d.TableID != 0 || string(d.Row) != "r\x00w" || d.FamilyID != 3 || string(d.Qualifier) != "q\x00" || d.Timestamp != 5000 {
		t.Fatalf("moved key decodes to %+v, %v", d, err)
	}
	if fam, err := CellFamilyID(k); err != nil || fam != 3 {
		t.Errorf("CellFamilyID = %d, %v; want 3", fam, err)
	}
	if _, err := WithTableID(nil, MetaKey("table", "x"), 1); err == nil {
		t.Error("WithTableID accepted a metadata key")
	}
	if _, err := CellFamilyID([]byte{1, 2}); err == nil {
		t.Error("CellFamilyID accepted a short key")
	}
}

func TestStampedValueRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		data []byte
		exp  int64
		st   Stamp
	}{
		{[]byte("v"), 0, Stamp{}},
		{[]byte("v"), 5000, Stamp{}},
		{[]byte("value"), 0, Stamp{Commit: 1234, Cluster: "a"}},
		{nil, 99000, Stamp{Commit: 1 << 50, Cluster: "cluster-b"}},
	} {
		v := EncodeStamped(tc.data, tc.exp, tc.st)
		data, exp, st, err := DecodeStamped(v)
		if err != nil || string(data) != string(tc.data) || exp != tc.exp || st != tc.st {
			t.Errorf("%+v: got %q %d %+v %v", tc, data, exp, st, err)
		}
		d2, e2, err := DecodeValue(v)
		if err != nil || string(d2) != string(tc.data) || e2 != tc.exp || ValueExpiry(v) != tc.exp {
			t.Errorf("%+v: DecodeValue %q %d %v", tc, d2, e2, err)
		}
	}
	if _, _, _, err := DecodeStamped([]byte{flagStamp, 0, 0, 0, 0, 0, 0, 0, 1, 5, 'a'}); err == nil {
		t.Error("short stamp decoded")
	}
	if !(Stamp{1, "b"}).Less(Stamp{2, "a"}) || !(Stamp{2, "a"}).Less(Stamp{2, "b"}) || (Stamp{2, "b"}).Less(Stamp{2, "b"}) {
		t.Error("stamp order")
	}
}
