package filter

// Head is the part of a program a reader may run itself while it streams a
// row's cells, before handing the row to Apply: the program's leading
// stages — CellsPerColumnLimit, CellsPerRowLimit and the filters that judge
// each cell alone (family, qualifier, column range, timestamp range, value
// regex, range and bitmask, row key regex, block all) — up to the first
// filter of any other kind. It is the program itself when the program is
// such a filter, or the first sub-filters of a Chain, recursively. Anything
// else first (a filter that adds, relabels or changes cells, an
// Interleave, a Condition, a Sink, an offset, a sample) ends the head.
//
// A reader feeds each cell, in row order, to Cell and keeps those it
// accepts; Apply on the kept cells then returns exactly what it returns on
// the whole row. Why: the stages composed, C, keep a subset S of the row;
// fed S, every stage meets a subset of what it met the first time (each
// stage only drops cells, and S reached every stage), so each cell of S
// passes again — a predicate judges it the same, a limit finds no more
// cells before it — and C(S) = S. The program is C followed by the rest R,
// so Apply(S) = R(C(S)) = R(S) = R(C(row)) = Apply(row).
//
// Cell also says when the rest of the column or row cannot pass, so the
// reader can skip it unread: a full row limit, or a failed row-key regex or
// block all, ends the row; a full column limit, a failed family, qualifier
// or column range test, or a timestamp below a timestamp range (a column's
// versions come newest first) ends the column, unless a row limit comes
// before it in the head (it would have counted the column's later cells).
//
// A Head holds counters and scratch: one per read, not shared.
type Head struct {
	*head
	counts []int
	key    []byte
	buf    []byte
	small  [4]int // counts of a short head, without another allocation
}

// head is the compiled, shared part of a Head.
type head struct {
	stages []*node
	// colSkip[i]: no row limit comes before stage i.
	colSkip []bool
}

// Skip says what a reader may leave unread after a cell.
type Skip uint8

// What Cell lets a reader skip.
const (
	SkipNone   Skip = iota
	SkipColumn      // the rest of this cell's column
	SkipRow         // the rest of the row
)

// Head returns a fresh Head of p, or nil when p has none (or is nil).
func (p *Program) Head() *Head {
	if p == nil || p.head == nil {
		return nil
	}
	h := &Head{head: p.head}
	h.counts = h.small[:0]
	if len(p.head.stages) > len(h.small) {
		h.counts = make([]int, len(p.head.stages))
	}
	h.counts = h.counts[:len(p.head.stages)]
	return h
}

// compileHead finds the head of root, nil when it has none.
func compileHead(root *node) *head {
	stages, _ := headStages(root, nil)
	if len(stages) == 0 {
		return nil
	}
	h := &head{stages: stages, colSkip: make([]bool, len(stages))}
	noRowLimit := true
	for i, n := range stages {
		h.colSkip[i] = noRowLimit
		if n.kind == KindCellsPerRowLimit {
			noRowLimit = false
		}
	}
	return h
}

// headStages appends the stages at the head of n; whole reports whether n
// is all stages (so a Chain may look past it).
func headStages(n *node, out []*node) (_ []*node, whole bool) {
	switch n.kind {
	case KindCellsPerColumnLimit, KindCellsPerRowLimit,
		KindFamilyNameRegex, KindColumnQualifierRegex, KindColumnRange,
		KindTimestampRange, KindValueRegex, KindValueRange, KindValueBitmask,
		KindRowKeyRegex, KindBlockAll:
		return append(out, n), true
	case KindChain:
		for _, k := range n.kids {
			if out, whole = headStages(k, out); !whole {
				return out, false
			}
		}
		return out, true
	}
	return out, false
}

// StartRow resets the counters for the row of the given key.
func (h *Head) StartRow(key []byte) {
	h.key = key
	clear(h.counts)
}

// StartColumn resets the per-column counters.
func (h *Head) StartColumn() {
	for i, n := range h.stages {
		if n.kind == KindCellsPerColumnLimit {
			h.counts[i] = 0
		}
	}
}

// SkipColumn reports whether no cell of the column family:qualifier can
// pass the head, whatever it holds, so that the reader may skip the whole
// column before reading any of it: a family, qualifier or column range test
// fails with no row limit before it.
func (h *Head) SkipColumn(family string, qualifier []byte) bool {
	for i, n := range h.stages {
		if !h.colSkip[i] {
			return false
		}
		if isColumnTest(n.kind) && !h.passColumn(n, family, qualifier) {
			return true
		}
	}
	return false
}

func isColumnTest(k Kind) bool {
	return k == KindFamilyNameRegex || k == KindColumnQualifierRegex || k == KindColumnRange
}

func (h *Head) passColumn(n *node, family string, qualifier []byte) bool {
	var ok bool
	switch n.kind {
	case KindFamilyNameRegex:
		ok, h.buf = n.re.matchString(family, h.buf)
	case KindColumnQualifierRegex:
		ok, h.buf = n.re.match(qualifier, h.buf)
	case KindColumnRange:
		ok = family == n.family && inRange(qualifier, n.start, n.end)
	}
	return ok
}

// Cell runs one cell (in row order, after StartRow and, at each new column,
// StartColumn) through the head: keep says whether it passes, skip what the
// reader may leave unread after it.
func (h *Head) Cell(family string, qualifier []byte, ts int64, value []byte) (keep bool, skip Skip) {
	raise := func(s Skip) {
		if s > skip {
			skip = s
		}
	}
	for i, n := range h.stages {
		switch n.kind {
		case KindCellsPerColumnLimit, KindCellsPerRowLimit:
			h.counts[i]++
			if h.counts[i] >= n.n {
				if n.kind == KindCellsPerRowLimit {
					raise(SkipRow)
				} else if h.colSkip[i] {
					raise(SkipColumn)
				}
			}
			if h.counts[i] > n.n {
				return false, skip
			}
		case KindFamilyNameRegex, KindColumnQualifierRegex, KindColumnRange:
			if !h.passColumn(n, family, qualifier) {
				if h.colSkip[i] {
					raise(SkipColumn)
				}
				return false, skip
			}
		case KindRowKeyRegex:
			var ok bool
			if ok, h.buf = n.re.match(h.key, h.buf); !ok {
				return false, SkipRow
			}
		case KindBlockAll:
			return false, SkipRow
		case KindTimestampRange:
			if ts < n.startTS || n.endTS != 0 && ts >= n.endTS {
				// A column's versions come newest first: past the
				// start, so are all the rest (timestamps are never
				// negative; the check keeps that assumption honest).
				if ts < n.startTS && ts >= 0 && h.colSkip[i] {
					raise(SkipColumn)
				}
				return false, skip
			}
		case KindValueRegex:
			var ok bool
			if ok, h.buf = n.re.match(value, h.buf); !ok {
				return false, skip
			}
		case KindValueRange:
			if !inRange(value, n.start, n.end) {
				return false, skip
			}
		case KindValueBitmask:
			if !bitmaskMatch(value, n.mask) {
				return false, skip
			}
		}
	}
	return true, skip
}
