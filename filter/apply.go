package filter

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/ebbtable/ebbtable/cell"
)

// item is one cell on its way through the filter tree: the index of the
// input cell it is a copy of, plus the transformations applied to it so far.
// Every list of items a node outputs is ordered by idx (duplicates, from
// Interleave, are adjacent), so row order is kept without comparing cells.
type item struct {
	idx   int
	label string // "" keeps the input cell's labels
	strip bool
}

// state is the scratch of one Apply call.
type state struct {
	cells []cell.Cell
	key   []byte
	rand  func() float64
	sink  []item // items that reached a Sink, in evaluation order
	buf   []byte // Latin-1 transcoding scratch
}

// Apply returns row filtered by p. Output cells keep the relative order of
// the input cells they copy (so a row in Bigtable order stays in Bigtable
// order, with Interleave and Sink duplicates next to each other); each is a
// copy of its input cell with Labels set to the single label applied, if any,
// and Value nil if stripped. The input row is never modified; the result may
// share the key, the cells slice (when nothing was filtered) and the byte
// slices of row. CellsPerColumnLimit relies on each column's cells being
// adjacent, as in Bigtable order. A nil p returns row unchanged.
func (p *Program) Apply(row cell.Row) cell.Row {
	if p == nil || p.passAll || len(row.Cells) == 0 {
		return row
	}
	st := state{cells: row.Cells, key: row.Key, rand: p.rand}
	in := make([]item, len(row.Cells))
	for i := range in {
		in[i].idx = i
	}
	out := st.eval(p.root, in)
	if len(st.sink) > 0 {
		// Sunk copies come before normal output on ties, as in the proto's
		// Sink example (the order of such duplicates is unspecified).
		out = append(st.sink, out...)
		slices.SortStableFunc(out, byIdx)
	}
	if identity(out, len(row.Cells)) {
		return row
	}
	res := cell.Row{Key: row.Key}
	if len(out) == 0 {
		return res
	}
	res.Cells = make([]cell.Cell, len(out))
	for i, it := range out {
		c := row.Cells[it.idx]
		if it.label != "" {
			c.Labels = []string{it.label}
		}
		if it.strip {
			c.Value = nil
		}
		res.Cells[i] = c
	}
	return res
}

// identity reports whether out is every input cell, once each, unchanged.
func identity(out []item, n int) bool {
	if len(out) != n {
		return false
	}
	for i, it := range out {
		if it.idx != i || it.label != "" || it.strip {
			return false
		}
	}
	return true
}

func byIdx(a, b item) int { return cmp.Compare(a.idx, b.idx) }

// eval runs n over in and returns its output. It never modifies in, which
// Interleave and Condition share between sub-filters; the result may alias
// in, and is never appended to by a caller.
func (st *state) eval(n *node, in []item) []item {
	if len(in) == 0 {
		return nil
	}
	switch n.kind {
	case KindPassAll:
		return in
	case KindBlockAll:
		return nil
	case KindChain:
		for _, k := range n.kids {
			if in = st.eval(k, in); len(in) == 0 {
				return nil
			}
		}
		return in
	case KindInterleave:
		var all []item
		for _, k := range n.kids {
			all = append(all, st.eval(k, in)...)
		}
		slices.SortStableFunc(all, byIdx)
		return all
	case KindCondition:
		branch := n.f
		if len(st.eval(n.pred, in)) > 0 {
			branch = n.t
		}
		if branch == nil {
			return nil
		}
		return st.eval(branch, in)
	case KindSink:
		st.sink = append(st.sink, in...)
		return nil
	case KindRowKeyRegex:
		var ok bool
		if ok, st.buf = n.re.match(st.key, st.buf); ok {
			return in
		}
		return nil
	case KindRowSample:
		if st.rand() < n.p {
			return in
		}
		return nil
	case KindFamilyNameRegex:
		var last string
		var lastOK, seen bool
		return keep(in, func(it item) bool {
			fam := st.cells[it.idx].Family
			if !seen || fam != last {
				seen, last = true, fam
				lastOK, st.buf = n.re.matchString(fam, st.buf)
			}
			return lastOK
		})
	case KindColumnQualifierRegex:
		var last []byte
		var lastOK, seen bool
		return keep(in, func(it item) bool {
			q := st.cells[it.idx].Qualifier
			if !seen || !bytes.Equal(q, last) {
				seen, last = true, q
				lastOK, st.buf = n.re.match(q, st.buf)
			}
			return lastOK
		})
	case KindColumnRange:
		return keep(in, func(it item) bool {
			c := &st.cells[it.idx]
			return c.Family == n.family && inRange(c.Qualifier, n.start, n.end)
		})
	case KindTimestampRange:
		return keep(in, func(it item) bool {
			ts := st.cells[it.idx].Timestamp
			return ts >= n.startTS && (n.endTS == 0 || ts < n.endTS)
		})
	case KindValueRegex:
		return keep(in, func(it item) bool {
			var ok bool
			ok, st.buf = n.re.match(st.value(it), st.buf)
			return ok
		})
	case KindValueRange:
		return keep(in, func(it item) bool { return inRange(st.value(it), n.start, n.end) })
	case KindValueBitmask:
		return keep(in, func(it item) bool { return bitmaskMatch(st.value(it), n.mask) })
	case KindCellsPerRowOffset:
		if n.n >= len(in) {
			return nil
		}
		return in[n.n:]
	case KindCellsPerRowLimit:
		if n.n >= len(in) {
			return in
		}
		return in[:n.n:n.n]
	case KindCellsPerColumnLimit:
		count := 0
		return keepIndexed(in, func(i int, it item) bool {
			if i == 0 || !cell.SameColumn(&st.cells[in[i-1].idx], &st.cells[it.idx]) {
				count = 0
			}
			count++
			return count <= n.n
		})
	case KindStripValue:
		out := slices.Clone(in)
		for i := range out {
			out[i].strip = true
		}
		return out
	case KindApplyLabel:
		out := slices.Clone(in)
		for i := range out {
			out[i].label = n.label
		}
		return out
	}
	panic("filter: unknown node kind " + n.kind.String())
}

// value is the value of it as the filter sees it: empty once stripped.
func (st *state) value(it item) []byte {
	if it.strip {
		return nil
	}
	return st.cells[it.idx].Value
}

// keep returns the items of in that ok accepts; in itself when it accepts
// them all.
func keep(in []item, ok func(item) bool) []item {
	return keepIndexed(in, func(_ int, it item) bool { return ok(it) })
}

// keepIndexed is keep with the index of each item passed to ok, which is
// called exactly once per item, in order.
func keepIndexed(in []item, ok func(int, item) bool) []item {
	for i, it := range in {
		if ok(i, it) {
			continue
		}
		out := make([]item, i, len(in)-1)
		copy(out, in[:i])
		for j := i + 1; j < len(in); j++ {
			if ok(j, in[j]) {
				out = append(out, in[j])
			}
		}
		return out
	}
	return in
}

// inRange reports whether v lies between start and end; an unbounded start is
// "" inclusive and an unbounded end is infinite.
func inRange(v []byte, start, end Bound) bool {
	switch start.Kind {
	case Closed:
		if bytes.Compare(v, start.Value) < 0 {
			return false
		}
	case Open:
		if bytes.Compare(v, start.Value) <= 0 {
			return false
		}
	}
	switch end.Kind {
	case Closed:
		return bytes.Compare(v, end.Value) <= 0
	case Open:
		return bytes.Compare(v, end.Value) < 0
	}
	return true
}

// bitmaskMatch reports whether v has the length of mask and every bit of it.
func bitmaskMatch(v, mask []byte) bool {
	if len(v) != len(mask) {
		return false
	}
	for i, m := range mask {
		if v[i]&m != m {
			return false
		}
	}
	return true
}
