package cluster

import (
	"bytes"
	"sort"
)

// Automatic failover (docs/scale-out.md): when a node's lease expires, its
// tablets go to live nodes, one table's worth of a dead node's tablets to
// one node (a TakeOver), which rebuilds them from the dead node's
// checkpoints and commit log before etcd names it the owner.

// TakeOver is one table's tablets of a dead node, and the live node that
// is to recover them.
type TakeOver struct {
	Dead    string
	Table   string
	Tablets []Tablet
	To      string
}

// PlanTakeOvers groups the tablets of dead owners (owners with no live
// node) by owner and table, in table order and then owner order, and gives
// each group to the least loaded taker (ties by id) that exclude (when
// set) does not rule out, counting the groups already given; a group no
// taker may have is left out. Every node computes the same plan from the
// same state, so the node a group falls to recovers it; etcd's
// compare-and-swap settles the rare race between nodes that saw different
// states.
func PlanTakeOvers(nodes []Node, dirs []Directory, exclude func(dead, table, node string) bool) ([]TakeOver, error) {
	live := map[string]bool{}
	for _, n := range nodes {
		live[n.ID] = true
	}
	takers := Takers(nodes)
	load := Load(dirs)
	var out []TakeOver
	sorted := append([]Directory(nil), dirs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Table < sorted[j].Table })
	for _, d := range sorted {
		byOwner := map[string][]Tablet{}
		var owners []string
		for _, t := range d.Tablets {
			if live[t.Owner] {
				continue
			}
			if byOwner[t.Owner] == nil {
				owners = append(owners, t.Owner)
			}
			byOwner[t.Owner] = append(byOwner[t.Owner], t)
		}
		sort.Strings(owners)
		for _, o := range owners {
			if len(takers) == 0 {
				return out, ErrNoNodes
			}
			best := ""
			for _, id := range takers {
				if exclude != nil && exclude(o, d.Table, id) {
					continue
				}
				if best == "" || load[id] < load[best] {
					best = id
				}
			}
			if best == "" {
				continue
			}
			load[best] += len(byOwner[o])
			out = append(out, TakeOver{Dead: o, Table: d.Table, Tablets: byOwner[o], To: best})
		}
	}
	return out, nil
}

// Checkpointed is a span of rows a checkpoint holds, with every commit log
// record up to After.
type Checkpointed struct {
	Start, End []byte
	After      uint64
}

// RecoveryPiece is part of a tablet being recovered: rows [Start, End), based on
// checkpoint Entry (-1: none, an empty base), to which the commit log's
// records after After apply.
type RecoveryPiece struct {
	Start, End []byte
	After      uint64
	Entry      int
}

// RecoveryPieces cuts tablets by the checkpoints that cover them; the parts no
// checkpoint covers are based on nothing and take the records after
// truncated.
func RecoveryPieces(tablets []Tablet, cps []Checkpointed, truncated uint64) []RecoveryPiece {
	var out []RecoveryPiece
	for _, t := range tablets {
		rest := [][2][]byte{{t.Start, t.End}}
		for i, c := range cps {
			var next [][2][]byte
			for _, r := range rest {
				lo, hi, ok := intersect(r[0], r[1], c.Start, c.End)
				if !ok {
					next = append(next, r)
					continue
				}
				out = append(out, RecoveryPiece{Start: lo, End: hi, After: c.After, Entry: i})
				if bytes.Compare(r[0], lo) < 0 {
					next = append(next, [2][]byte{r[0], lo})
				}
				if len(hi) > 0 && (len(r[1]) == 0 || bytes.Compare(hi, r[1]) < 0) {
					next = append(next, [2][]byte{hi, r[1]})
				}
			}
			rest = next
		}
		for _, r := range rest {
			out = append(out, RecoveryPiece{Start: r[0], End: r[1], After: truncated, Entry: -1})
		}
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].Start, out[j].Start) < 0 })
	return out
}

// Overlaps reports whether rows [aStart, aEnd) and [bStart, bEnd) share a
// row (an empty end: unbounded).
func Overlaps(aStart, aEnd, bStart, bEnd []byte) bool {
	_, _, ok := intersect(aStart, aEnd, bStart, bEnd)
	return ok
}

// intersect is the common part of two row ranges, if any.
func intersect(aStart, aEnd, bStart, bEnd []byte) (lo, hi []byte, ok bool) {
	lo = aStart
	if bytes.Compare(bStart, lo) > 0 {
		lo = bStart
	}
	switch {
	case len(aEnd) == 0:
		hi = bEnd
	case len(bEnd) == 0:
		hi = aEnd
	case bytes.Compare(aEnd, bEnd) < 0:
		hi = aEnd
	default:
		hi = bEnd
	}
	if len(hi) > 0 && bytes.Compare(lo, hi) >= 0 {
		return nil, nil, false
	}
	return lo, hi, true
}

// Outside is what of rows [start, end) the tablets do not cover, in key
// order.
func Outside(start, end []byte, tablets []Tablet) [][2][]byte {
	rest := [][2][]byte{{start, end}}
	for _, t := range tablets {
		var next [][2][]byte
		for _, r := range rest {
			lo, hi, ok := intersect(r[0], r[1], t.Start, t.End)
			if !ok {
				next = append(next, r)
				continue
			}
			if bytes.Compare(r[0], lo) < 0 {
				next = append(next, [2][]byte{r[0], lo})
			}
			if len(hi) > 0 && (len(r[1]) == 0 || bytes.Compare(hi, r[1]) < 0) {
				next = append(next, [2][]byte{hi, r[1]})
			}
		}
		rest = next
	}
	sort.Slice(rest, func(i, j int) bool { return bytes.Compare(rest[i][0], rest[j][0]) < 0 })
	return rest
}
