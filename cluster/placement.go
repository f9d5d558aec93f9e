package cluster

import (
	"fmt"
	"sort"
)

// Node is one member of the cluster as registered under its lease.
type Node struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	Draining bool   `json:"draining,omitempty"`
}

// Move is one planned tablet move.
type Move struct {
	Table  string
	Tablet uint64
	From   string
	To     string
}

// String describes the move.
func (m Move) String() string {
	return fmt.Sprintf("%s tablet %d: %s → %s", m.Table, m.Tablet, m.From, m.To)
}

// Takers returns the ids of the live nodes that may take tablets (not
// draining), sorted.
func Takers(nodes []Node) []string {
	var ids []string
	for _, n := range nodes {
		if !n.Draining {
			ids = append(ids, n.ID)
		}
	}
	sort.Strings(ids)
	return ids
}

// Load counts the tablets each node owns across the directories.
func Load(dirs []Directory) map[string]int {
	load := map[string]int{}
	for _, d := range dirs {
		for _, t := range d.Tablets {
			load[t.Owner]++
		}
	}
	return load
}

// Place orders the takers for n new tablets, least loaded first (ties by
// id), so a new table spreads over the cluster.
func Place(n int, nodes []Node, dirs []Directory) ([]string, error) {
	takers := Takers(nodes)
	if len(takers) == 0 {
		return nil, ErrNoNodes
	}
	load := Load(dirs)
	out := make([]string, 0, n)
	for range n {
		best := takers[0]
		for _, id := range takers[1:] {
			if load[id] < load[best] {
				best = id
			}
		}
		load[best]++
		out = append(out, best)
	}
	return out, nil
}

// PlanDrain moves every tablet owned by from to the least loaded other
// taker, one move per tablet, in directory order.
func PlanDrain(from string, nodes []Node, dirs []Directory) ([]Move, error) {
	var others []Node
	for _, n := range nodes {
		if n.ID != from {
			others = append(others, n)
		}
	}
	takers := Takers(others)
	load := Load(dirs)
	var moves []Move
	for _, d := range dirs {
		for _, t := range d.Tablets {
			if t.Owner != from {
				continue
			}
			if len(takers) == 0 {
				return nil, fmt.Errorf("%w: nowhere to drain %s to", ErrNoNodes, from)
			}
			best := takers[0]
			for _, id := range takers[1:] {
				if load[id] < load[best] {
					best = id
				}
			}
			load[best]++
			moves = append(moves, Move{Table: d.Table, Tablet: t.ID, From: from, To: best})
		}
	}
	return moves, nil
}

// Orphans lists the tablets whose owner is not among the live nodes: a
// node that died and has not come back. They are not served until their
// owner returns with its disk, or an operator gives them away (the data
// only the dead node's disk held is then lost; docs/scale-out.md).
func Orphans(nodes []Node, dirs []Directory) []Move {
	live := map[string]bool{}
	for _, n := range nodes {
		live[n.ID] = true
	}
	var out []Move
	for _, d := range dirs {
		for _, t := range d.Tablets {
			if !live[t.Owner] {
				out = append(out, Move{Table: d.Table, Tablet: t.ID, From: t.Owner})
			}
		}
	}
	return out
}

// SplitPoint chooses where a tablet grown past threshold bytes splits:
// the sample key nearest the middle of its size, given the tablet's
// sampled (key, cumulative bytes) pairs in key order. It returns nil when
// the tablet is small enough or no sample key lies strictly inside it.
func SplitPoint(t Tablet, keys [][]byte, offsets []int64, threshold int64) []byte {
	if len(keys) == 0 || len(keys) != len(offsets) {
		return nil
	}
	total := offsets[len(offsets)-1]
	if total < threshold {
		return nil
	}
	var best []byte
	bestDist := int64(-1)
	for i, k := range keys {
		if len(k) == 0 || !t.Contains(k) || string(k) == string(t.Start) {
			continue
		}
		dist := offsets[i] - total/2
		if dist < 0 {
			dist = -dist
		}
		if bestDist < 0 || dist < bestDist {
			best, bestDist = k, dist
		}
	}
	return best
}
