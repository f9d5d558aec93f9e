package server

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/mem"
)

// TestDirtyPool: Get returns a buffer of the length asked for, its
// capacity the smallest size holding it (a fresh one of exactly the
// length past 1 MiB); Put keeps only buffers of a size's capacity, and a
// kept buffer comes back for a length its size holds, not cleared.
func TestDirtyPool(t *testing.T) {
	var p dirtyPool
	for _, c := range []struct{ n, cap int }{{1, 256}, {256, 256}, {257, 4 << 10}, {1100, 4 << 10}, {4 << 10, 4 << 10}, {4<<10 + 1, 16 << 10},
		{16 << 10, 16 << 10}, {20 << 10, 32 << 10}, {1 << 20, 1 << 20}, {1<<20 + 1, 1<<20 + 1}, {0, 0}} {
		b := p.Get(c.n)
		if len(*b) != c.n || cap(*b) != c.cap {
			t.Errorf("Get(%d): len %d cap %d, want %d and %d", c.n, len(*b), cap(*b), c.n, c.cap)
		}
	}
	b := p.Get(1100)
	(*b)[0] = 7
	p.Put(b)
	// sync.Pool may drop what it holds at any time (a GC, or the race
	// detector's random drops): look for the buffer a few times.
	reused := false
	for range 100 {
		g := p.Get(300)
		if len(*g) != 300 || cap(*g) != 4<<10 {
			t.Fatalf("Get(300): len %d cap %d", len(*g), cap(*g))
		}
		if g == b {
			reused = true
			if (*g)[0] != 7 {
				t.Errorf("a reused buffer was cleared")
			}
			break
		}
		p.Put(b)
	}
	if !reused {
		t.Log("the put buffer never came back (sync.Pool dropped it)")
	}
	odd := make([]byte, 5000)
	p.Put(&odd) // not a size's capacity: dropped, not handed out for 4 KiB
	for range 10 {
		if g := p.Get(4 << 10); cap(*g) != 4<<10 {
			t.Fatalf("Get(4 KiB) after putting a 5000-byte buffer: cap %d", cap(*g))
		}
	}
}

// BenchmarkBufferPool: a Get and a Put of a hot-row write's data frame
// (1.1 KiB, a 4 KiB buffer) and of a full one (16 KiB), from gRPC's
// default pool, which clears the whole buffer on Get, and from dirtyPool:
// go test -run '^$' -bench BufferPool ./server
func BenchmarkBufferPool(b *testing.B) {
	for _, n := range []int{1100, 16 << 10} {
		for _, p := range []struct {
			name string
			pool interface {
				Get(int) *[]byte
				Put(*[]byte)
			}
		}{{"default", mem.DefaultBufferPool()}, {"dirty", &dirtyPool{}}} {
			b.Run(fmt.Sprintf("%s/%d", p.name, n), func(b *testing.B) {
				for b.Loop() {
					p.pool.Put(p.pool.Get(n))
				}
			})
		}
	}
}
