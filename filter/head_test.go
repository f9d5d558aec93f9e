package filter_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ebbtable/ebbtable/cell"
	. "github.com/ebbtable/ebbtable/filter"
)

func TestHeadStages(t *testing.T) {
	col, row := CellsPerColumnLimit(1), CellsPerRowLimit(2)
	cases := []struct {
		f    *Filter
		head bool
	}{
		{nil, false},
		{PassAll(), false},
		{col, true},
		{Chain(FamilyNameRegex("a"), col), true},
		{Chain(CellsPerRowOffset(1), col), false},
		{Interleave(col, row), false},
		{Condition(col, col, nil), false},
		{Chain(StripValue(), col), false},
		{ApplyLabel("x"), false},
		{Chain(TimestampRange(1, 2), StripValue()), true},
	}
	for i, c := range cases {
		p, err := Compile(c.f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Head() != nil; got != c.head {
			t.Errorf("case %d: Head() != nil is %v, want %v", i, got, c.head)
		}
	}
}

// streamHead is what a reader does with a program's head: each column
// first asks SkipColumn, then each cell goes through Cell, and the reader
// jumps past what Cell says it may skip.
func streamHead(r cell.Row, h *Head) (kept cell.Row, judged int) {
	kept.Key = r.Key
	h.StartRow(r.Key)
	cells := r.Cells
	skipColumnFrom := func(i int) int {
		j := i + 1
		for j < len(cells) && cell.SameColumn(&cells[i], &cells[j]) {
			j++
		}
		return j
	}
	for i := 0; i < len(cells); {
		c := cells[i]
		if i == 0 || !cell.SameColumn(&cells[i-1], &c) {
			h.StartColumn()
			if h.SkipColumn(c.Family, c.Qualifier) {
				i = skipColumnFrom(i)
				continue
			}
		}
		judged++
		keep, skip := h.Cell(c.Family, c.Qualifier, c.Timestamp, c.Value)
		if keep {
			kept.Cells = append(kept.Cells, c)
		}
		switch skip {
		case SkipRow:
			return kept, judged
		case SkipColumn:
			i = skipColumnFrom(i)
		default:
			i++
		}
	}
	return kept, judged
}

// TestHeadPreservesApply checks Head's promise on random rows and
// programs: the cells a reader keeps, skipping what Cell allows, give Apply
// the answer the whole row gives.
func TestHeadPreservesApply(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d (replay: put it in place of rand.Uint64() in TestHeadPreservesApply)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	leaf := func() *Filter {
		switch rng.IntN(14) {
		case 0, 1, 2:
			return CellsPerColumnLimit(int64(1 + rng.IntN(3)))
		case 3, 4:
			return CellsPerRowLimit(int64(1 + rng.IntN(6)))
		case 5:
			return CellsPerRowOffset(int64(rng.IntN(3)))
		case 6:
			return FamilyNameRegex("a")
		case 7:
			return ColumnQualifierRegex("[pq]")
		case 8:
			return ColumnRange("b", ClosedBound([]byte("q")), Bound{})
		case 9:
			return TimestampRange(int64(rng.IntN(3)), int64(rng.IntN(6)))
		case 10:
			return StripValue()
		case 11:
			return RowKeyRegex("r[0-4]")
		case 12:
			return ValueRange(ClosedBound([]byte("v3")), Bound{})
		}
		return ValueRegex("v[0-4]")
	}
	var gen func(d int) *Filter
	gen = func(d int) *Filter {
		if d > 2 || rng.IntN(3) == 0 {
			return leaf()
		}
		var kids []*Filter
		for range 1 + rng.IntN(4) {
			kids = append(kids, gen(d+1))
		}
		if rng.IntN(5) == 0 {
			return Interleave(kids...)
		}
		return Chain(kids...)
	}
	heads, skipped := 0, 0
	for iter := 0; iter < 5000; iter++ {
		r := cell.Row{Key: []byte(fmt.Sprintf("r%d", rng.IntN(10)))}
		for _, fam := range []string{"a", "b"} {
			for q := range rng.IntN(4) {
				for v := rng.IntN(6); v > 0; v-- {
					r.Cells = append(r.Cells, cell.Cell{Family: fam, Qualifier: []byte{byte('p' + q)}, Timestamp: int64(v), Value: []byte(fmt.Sprintf("v%d", rng.IntN(10)))})
				}
			}
		}
		f := gen(0)
		if end := rng.IntN(5); end > 0 {
			f = Chain(f, TimestampRange(0, int64(end))) // a valid range: start 0
		}
		p, err := Compile(f, Options{Rand: func() float64 { return 0 }})
		if err != nil {
			continue // a random timestamp range may end before it starts
		}
		want := p.Apply(r)
		h := p.Head()
		if h == nil {
			continue
		}
		heads++
		kept, judged := streamHead(r, h)
		if judged < len(r.Cells) {
			skipped++
		}
		if got := p.Apply(kept); render(got) != render(want) {
			t.Fatalf("seed %d iter %d: row %s\nkept %s\ngot  %s\nwant %s", seed, iter, render(r), render(kept), render(got), render(want))
		}
	}
	if heads < 1000 || skipped < 300 {
		t.Errorf("only %d programs with a head, %d reads that skipped: the generator misses the point", heads, skipped)
	}
	t.Logf("%d programs with a head, %d reads skipped cells", heads, skipped)
}
