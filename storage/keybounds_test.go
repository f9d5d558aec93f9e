package storage

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestAppendRowBounds checks the appending forms against RowBound and
// RowAfter on many row keys (zero and 0xFF bytes included), appended to a
// buffer that holds something already.
func TestAppendRowBounds(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	rows := [][]byte{nil, {}, {0}, {0, 0}, {0xFF}, {0, 0xFF, 0}, []byte("user000000000042")}
	for range 5000 {
		r := make([]byte, rng.IntN(24))
		for i := range r {
			r[i] = []byte{0, 1, 0xFE, 0xFF, byte(rng.Uint32())}[rng.IntN(5)]
		}
		rows = append(rows, r)
	}
	for _, row := range rows {
		for _, id := range []uint64{0, 1, 7, 1<<40 + 3, ^uint64(0)} {
			head := []byte("head")
			lo := AppendRowBound(head, id, row)
			if want := RowBound(id, row); !bytes.Equal(lo[len(head):], want) || !bytes.Equal(lo[:len(head)], []byte("head")) {
				t.Fatalf("AppendRowBound(%d, %x) = %x, want %x", id, row, lo[len(head):], want)
			}
			hi := AppendRowAfter(lo, id, row)
			if want := RowAfter(id, row); !bytes.Equal(hi[len(lo):], want) {
				t.Fatalf("AppendRowAfter(%d, %x) = %x, want %x", id, row, hi[len(lo):], want)
			}
			if !bytes.Equal(hi[len(head):len(lo)], RowBound(id, row)) {
				t.Fatalf("AppendRowAfter overwrote what it appended to")
			}
		}
	}
}
