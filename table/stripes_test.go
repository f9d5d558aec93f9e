package table

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// TestSortedStripes: sortedStripes lists every stripe given once, in
// order, whether it sorts or goes through its set: random lists of 0 to
// 300 stripes, with repeats, the first and last stripes among them.
func TestSortedStripes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		n := r.IntN(300)
		if i < 100 {
			n = i % (2 * sortedStripesBySet) // both sides of the switch, often
		}
		in := make([]int, n)
		for j := range in {
			switch r.IntN(10) {
			case 0:
				in[j] = 0
			case 1:
				in[j] = rowLockStripes - 1
			default:
				in[j] = r.IntN(rowLockStripes)
			}
		}
		want := slices.Clone(in)
		sort.Ints(want)
		want = slices.Compact(want)
		if got := sortedStripes(slices.Clone(in)); !slices.Equal(got, want) {
			t.Fatalf("sortedStripes(%v) = %v, want %v", in, got, want)
		}
	}
}

// BenchmarkSortedStripes: the row-lock stripes of n random rows sorted,
// each once (a bulk write's 100 rows lock 100 stripes or so); each op
// sorts another of 1,024 lists, so that the branch predictor cannot learn
// one list's order:
//
//	go test -run '^$' -bench SortedStripes ./table
func BenchmarkSortedStripes(b *testing.B) {
	for _, n := range []int{1, 8, 16, 32, 100} {
		r := rand.New(rand.NewPCG(3, 4))
		in := make([][]int, 1024)
		for i := range in {
			in[i] = make([]int, n)
			for j := range in[i] {
				in[i][j] = r.IntN(rowLockStripes)
			}
		}
		buf := make([]int, n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				copy(buf, in[i%len(in)])
				sortedStripes(buf)
				i++
			}
		})
	}
}
