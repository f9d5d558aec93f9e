package storage

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// TestAppendCellKey: AppendCellKey appends CellKey's key, and both escape
// zero bytes as the byte-by-byte reference does.
func TestAppendCellKey(t *testing.T) {
	ref := func(b []byte) []byte {
		var out []byte
		for _, c := range b {
			if c == 0 {
				out = append(out, 0, 0xFF)
			} else {
				out = append(out, c)
			}
		}
		return append(out, 0, 1)
	}
	for _, rq := range [][2][]byte{
		{[]byte("row"), []byte("q")},
		{nil, nil},
		{{0}, {0, 0}},
		{{0, 'a', 0, 0, 'b', 0}, []byte("x\x00")},
		{bytes.Repeat([]byte{7}, 300), bytes.Repeat([]byte{0}, 70)},
	} {
		row, q := rq[0], rq[1]
		want := []byte{tagCell}
		want = binary.BigEndian.AppendUint64(want, 42)
		want = append(want, ref(row)...)
		want = binary.BigEndian.AppendUint32(want, 3)
		want = append(want, ref(q)...)
		want = binary.BigEndian.AppendUint64(want, ^uint64(1234))
		if got := CellKey(42, row, 3, q, 1234); !bytes.Equal(got, want) {
			t.Fatalf("CellKey(%q, %q) = %x, want %x", row, q, got, want)
		}
		dst := []byte("prefix")
		if got := AppendCellKey(dst, 42, row, 3, q, 1234); !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("AppendCellKey(%q, %q) = %x", row, q, got)
		}
	}
}
