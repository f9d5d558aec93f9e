package filter

// Limit is a cell-count limit a program applies before anything else: the
// first N cells of each column (PerColumn) or of the row. A reader that
// applies a program's leading limits while it streams a row's cells, in
// order, may stop reading the row once a row limit turns a cell away (or
// is full), and a column once a column limit does with no row limit before
// it (a row limit before it counts the column's later cells too), and still
// hand the whole program the cells it kept: Apply then returns exactly what
// it would have returned for the full row.
//
// Why that holds: the leading limits L1..Lk, composed, keep a subset S of
// the row, and every cell of S, fed through them again, meets at each limit
// a subset of the cells that preceded it the first time, so it is kept
// again and L(S) = S. The program is L followed by the rest R, so
// Apply(S) = R(L(S)) = R(L(row)) = Apply(row).
type Limit struct {
	PerColumn bool // CellsPerColumnLimit; otherwise CellsPerRowLimit
	N         int
}

// LeadingLimits returns the CellsPerColumnLimit and CellsPerRowLimit filters
// that come first in p, in the order they apply: p itself when it is one,
// or the first sub-filters of a Chain (recursively) up to the first filter
// of any other kind. Anything else first — a filter that could drop, add,
// relabel or reorder cells, an Interleave, a Condition, a Sink, an offset —
// ends the list, since a limit after it counts cells the reader cannot
// judge alone. A nil p has none.
func (p *Program) LeadingLimits() []Limit {
	if p == nil {
		return nil
	}
	out, _ := leadingLimits(p.root, nil)
	return out
}

// leadingLimits appends the limits at the head of n; whole reports whether
// n consists of nothing but limits (so a Chain may look past it).
func leadingLimits(n *node, out []Limit) (_ []Limit, whole bool) {
	switch n.kind {
	case KindCellsPerColumnLimit, KindCellsPerRowLimit:
		return append(out, Limit{PerColumn: n.kind == KindCellsPerColumnLimit, N: n.n}), true
	case KindChain:
		for _, k := range n.kids {
			if out, whole = leadingLimits(k, out); !whole {
				return out, false
			}
		}
		return out, true
	}
	return out, false
}
