package server

import (
	"math/bits"
	"sync"
)

// dirtyPool is the gRPC server's buffer pool (experimental.BufferPool):
// gRPC's default pool, without clearing. The default clears a buffer's
// whole capacity on every Get — 4 KiB for a 1.1 KiB hot-row write, 16 KiB
// for a data frame — though every user of the server's pool fills the
// length it asked for before reading it (the framer's and the parser's
// io.ReadFull, the receive buffer's copy, the write buffer's appends).
// Buffers of the default's sizes: 256 B, 4, 16 and 32 KiB, 1 MiB; a
// request for more is a fresh allocation.
type dirtyPool struct {
	tiers [len(dirtySizes)]sync.Pool
}

// dirtySizes are the pool's buffer sizes, as powers of two.
var dirtySizes = [...]uint8{8, 12, 14, 15, 20}

// tierFor is the index of the smallest size holding n bytes (n > 0), or
// -1 when none does.
func tierFor(n int) int {
	e := uint8(bits.Len(uint(n - 1)))
	for i, s := range dirtySizes {
		if e <= s {
			return i
		}
	}
	return -1
}

func (p *dirtyPool) Get(n int) *[]byte {
	if n == 0 {
		b := []byte{}
		return &b
	}
	i := tierFor(n)
	if i < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.tiers[i].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<dirtySizes[i])
	return &b
}

// Put keeps a buffer in the largest tier its capacity fills.
func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	for i := len(dirtySizes) - 1; i >= 0; i-- {
		if c >= 1<<dirtySizes[i] {
			if c == 1<<dirtySizes[i] {
				p.tiers[i].Put(b)
			}
			return
		}
	}
}
