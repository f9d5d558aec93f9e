package storage

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// TestAppendStamped: AppendStamped appends exactly the value the old
// two-step encoding built (EncodeValue, or the header with the stamp),
// StampedLen is its length, and what was in dst is kept.
func TestAppendStamped(t *testing.T) {
	// want is the encoding as written before AppendStamped existed.
	want := func(data []byte, expireAt int64, st Stamp) []byte {
		if st.IsZero() {
			return EncodeValue(data, expireAt)
		}
		id := st.Cluster[:min(len(st.Cluster), 255)]
		flags := flagStamp
		var v []byte
		if expireAt != 0 {
			flags |= flagExpiry
		}
		v = append(v, flags)
		if expireAt != 0 {
			v = binary.BigEndian.AppendUint64(v, uint64(expireAt))
		}
		v = binary.BigEndian.AppendUint64(v, uint64(st.Commit))
		v = append(v, byte(len(id)))
		v = append(v, id...)
		return append(v, data...)
	}
	for _, data := range [][]byte{nil, {}, []byte("v"), bytes.Repeat([]byte("x"), 300)} {
		for _, exp := range []int64{0, 1, 1767225600000000, -5} {
			for _, st := range []Stamp{{}, {Commit: 1234, Cluster: "a"}, {Commit: 1 << 50}, {Cluster: "c"}, {Commit: 7, Cluster: strings.Repeat("k", 300)}} {
				w := want(data, exp, st)
				if got := AppendStamped([]byte("pre"), data, exp, st); !bytes.Equal(got, append([]byte("pre"), w...)) {
					t.Fatalf("AppendStamped(%q, %d, %+v) = %x, want pre+%x", data, exp, st, got, w)
				}
				if got := EncodeStamped(data, exp, st); !bytes.Equal(got, w) {
					t.Fatalf("EncodeStamped(%q, %d, %+v) = %x, want %x", data, exp, st, got, w)
				}
				if n := StampedLen(len(data), exp, st); n != len(w) {
					t.Fatalf("StampedLen(%d, %d, %+v) = %d, want %d", len(data), exp, st, n, len(w))
				}
			}
		}
	}
}
