package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
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

// TestAppendRowKeyAndQualifier: AppendRowKey and AppendQualifier append
// what DecodeRowKey and DecodeQualifier return, after dst's bytes and
// without touching them, for keys with zero and 0xFF bytes, empty ones and
// long ones; broken encodings fail as the decoders do, with ErrCorruptKey.
func TestAppendRowKeyAndQualifier(t *testing.T) {
	for _, s := range [][]byte{
		[]byte("row"), {}, {0}, {0, 0}, {0xFF}, {0, 0xFF, 0}, {'a', 0, 1}, []byte("a\x00"),
		bytes.Repeat([]byte{7}, 300), bytes.Repeat([]byte{0}, 70),
	} {
		prefix := RowPrefix(42, s)
		want, err := DecodeRowKey(prefix)
		if err != nil || !bytes.Equal(want, s) {
			t.Fatalf("DecodeRowKey(RowPrefix(%q)) = %q, %v", s, want, err)
		}
		for _, dst := range [][]byte{nil, []byte("kept"), make([]byte, 3, 1000)} {
			head := bytes.Clone(dst)
			got, err := AppendRowKey(dst, prefix)
			if err != nil || !bytes.Equal(got[:len(head)], head) || !bytes.Equal(got[len(head):], s) {
				t.Fatalf("AppendRowKey(%q, RowPrefix(%q)) = %q, %v", head, s, got, err)
			}
		}
		enc := appendEscaped(nil, s)
		if q, err := DecodeQualifier(enc); err != nil || !bytes.Equal(q, s) {
			t.Fatalf("DecodeQualifier(%x) = %q, %v", enc, q, err)
		}
		for _, dst := range [][]byte{nil, []byte("kept"), make([]byte, 3, 1000)} {
			head := bytes.Clone(dst)
			got, err := AppendQualifier(dst, enc)
			if err != nil || !bytes.Equal(got[:len(head)], head) || !bytes.Equal(got[len(head):], s) {
				t.Fatalf("AppendQualifier(%q, %x) = %q, %v", head, enc, got, err)
			}
		}
	}
	for _, bad := range [][]byte{
		{}, {'a'}, {'a', 0}, {'a', 0, 2}, {0, 1, 'x'}, {'a', 0, 1, 'b'},
	} {
		_, errD := DecodeQualifier(bad)
		if _, err := AppendQualifier([]byte("kept"), bad); !errors.Is(err, ErrCorruptKey) || errD == nil {
			t.Fatalf("AppendQualifier(%x): %v (DecodeQualifier: %v), want ErrCorruptKey from both", bad, err, errD)
		}
		prefix := append(TablePrefix(42), bad...)
		_, errD = DecodeRowKey(prefix)
		if _, err := AppendRowKey(nil, prefix); !errors.Is(err, ErrCorruptKey) || errD == nil {
			t.Fatalf("AppendRowKey(%x): %v (DecodeRowKey: %v), want ErrCorruptKey from both", prefix, err, errD)
		}
	}
}
