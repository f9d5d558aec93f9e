package filter_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/ebbtable/ebbtable/cell"
	. "github.com/ebbtable/ebbtable/filter"
)

func TestLeadingLimits(t *testing.T) {
	col := func(n int64) *Filter { return CellsPerColumnLimit(n) }
	row := func(n int64) *Filter { return CellsPerRowLimit(n) }
	cases := []struct {
		f    *Filter
		want []Limit
	}{
		{nil, nil},
		{PassAll(), nil},
		{col(1), []Limit{{true, 1}}},
		{row(3), []Limit{{false, 3}}},
		{Chain(col(2), StripValue()), []Limit{{true, 2}}},
		{Chain(col(2), row(5), FamilyNameRegex("f"), col(1)), []Limit{{true, 2}, {false, 5}}},
		{Chain(PassAll(), Chain(row(4), col(1)), col(3), ValueRegex("x")), []Limit{{false, 4}, {true, 1}, {true, 3}}},
		{Chain(Chain(row(4), StripValue()), col(3)), []Limit{{false, 4}}},
		{Chain(FamilyNameRegex("f"), col(1)), nil},
		{Chain(CellsPerRowOffset(1), col(1)), nil},
		{Interleave(col(1), row(1)), nil},
		{Condition(col(1), col(1), nil), nil},
		{Chain(StripValue(), col(1)), nil},
	}
	for i, c := range cases {
		p, err := Compile(c.f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.LeadingLimits(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("case %d: LeadingLimits = %v, want %v", i, got, c.want)
		}
	}
}

// applyLimits is what a reader does with a program's leading limits while
// it streams a row: each cell passes the limits in order, each counting the
// cells that reached it.
func applyLimits(r cell.Row, ls []Limit) cell.Row {
	counts := make([]int, len(ls))
	out := cell.Row{Key: r.Key}
	for i, c := range r.Cells {
		newCol := i == 0 || !cell.SameColumn(&r.Cells[i-1], &r.Cells[i])
		kept := true
		for j, l := range ls {
			if l.PerColumn && newCol {
				counts[j] = 0
			}
		}
		for j, l := range ls {
			if counts[j]++; counts[j] > l.N {
				kept = false
				break
			}
		}
		if kept {
			out.Cells = append(out.Cells, c)
		}
	}
	return out
}

// TestLeadingLimitsPreserveApply checks the promise behind LeadingLimits on
// random rows and programs: applying the leading limits first, then the
// whole program, returns what the program returns on the whole row.
func TestLeadingLimitsPreserveApply(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d (replay: edit the seed in TestLeadingLimitsPreserveApply)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	leaf := func() *Filter {
		switch rng.IntN(8) {
		case 0, 1:
			return CellsPerColumnLimit(int64(1 + rng.IntN(3)))
		case 2, 3:
			return CellsPerRowLimit(int64(1 + rng.IntN(6)))
		case 4:
			return CellsPerRowOffset(int64(rng.IntN(3)))
		case 5:
			return FamilyNameRegex("a")
		case 6:
			return StripValue()
		}
		return ValueRegex("v[0-4]")
	}
	var gen func(d int) *Filter
	gen = func(d int) *Filter {
		if d > 2 || rng.IntN(3) == 0 {
			return leaf()
		}
		var kids []*Filter
		for range 1 + rng.IntN(3) {
			kids = append(kids, gen(d+1))
		}
		if rng.IntN(4) == 0 {
			return Interleave(kids...)
		}
		return Chain(kids...)
	}
	for iter := 0; iter < 3000; iter++ {
		var r cell.Row
		r.Key = []byte("r")
		for _, fam := range []string{"a", "b"} {
			for q := range rng.IntN(3) {
				for v := rng.IntN(5); v > 0; v-- {
					r.Cells = append(r.Cells, cell.Cell{Family: fam, Qualifier: []byte{byte('p' + q)}, Timestamp: int64(v), Value: []byte(fmt.Sprintf("v%d", rng.IntN(10)))})
				}
			}
		}
		f := gen(0)
		p, err := Compile(f, Options{Rand: func() float64 { return 0 }})
		if err != nil {
			t.Fatal(err)
		}
		want := p.Apply(r)
		got := p.Apply(applyLimits(r, p.LeadingLimits()))
		if render(got) != render(want) {
			t.Fatalf("seed %d iter %d: limits %v: got %s, want %s", seed, iter, p.LeadingLimits(), render(got), render(want))
		}
	}
}
