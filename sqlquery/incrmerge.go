package sqlquery

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/ebbtable/ebbtable/table"
)

// Partial states of a maintained view (a cluster whose table's tablets are
// on several nodes). Each node maintains the query over the rows it holds,
// exactly as over a whole table; a reader takes every node's partial state
// of every group and merges them: counts, sums, per-bit counts add, BIT_XOR
// xors, MIN and MAX (and ANY_VALUE, which a maintained view answers as
// the smallest value) keep each part's extreme, and ARRAY_AGG and
// STRING_AGG's elements, stored by source row, are a union (the parts'
// rows are disjoint). A DISTINCT aggregate's values may be in several
// parts: each part keeps its distinct values with their counts (so a
// deletion takes a value out only with its last row there) and ships the
// values; the merge puts each into its group as a new row would, so a
// value counts once however many parts hold it.

// HasDistinct reports whether the query has a DISTINCT aggregate.
func (ic *Incremental) HasDistinct() bool {
	for _, a := range ic.q.aggs {
		if a.distinct {
			return true
		}
	}
	return false
}

// ContributionsIn is Contributions over the rows of ranges (half-open;
// a nil End is unbounded).
func (ic *Incremental) ContributionsIn(ctx context.Context, cat Catalog, now time.Time, ranges []table.RowRange, fn func(row []byte, c *Contribution) error) error {
	if len(ranges) == 0 {
		return nil
	}
	keys := make([]keyRange, 0, len(ranges))
	for _, r := range ranges {
		lo := r.Start
		if lo == nil {
			lo = []byte{}
		}
		keys = append(keys, keyRange{lo: lo, hi: r.End})
	}
	keys = normalize(keys)
	if len(keys) == 0 {
		return nil
	}
	return ic.contributions(ctx, cat, now, keys, fn)
}

// partial is one group's partial state as it travels.
type partial struct {
	G GroupState `json:"g"`
	// X holds, by aggregate, MIN's, MAX's or ANY_VALUE's extreme value
	// (EncodeValue).
	X map[int][]byte `json:"x,omitempty"`
	// L holds, by aggregate, ARRAY_AGG's or STRING_AGG's elements: pairs
	// of source row and encoded inputs.
	L map[int][][2][]byte `json:"l,omitempty"`
	// D holds, by DISTINCT aggregate, its distinct values (EncodeValue);
	// such an aggregate's state in G is not merged, it is rebuilt from D.
	D map[int][][]byte `json:"d,omitempty"`
}

// Partial encodes group gid's stored state g (and what of st its result
// needs) for a merge.
func (ic *Incremental) Partial(st Store, gid []byte, g *GroupState) ([]byte, error) {
	p := partial{G: *g}
	p.G.Out, p.G.HasOut = nil, false
	p.G.Aggs = slices.Clone(g.Aggs)
	for i, a := range ic.q.aggs {
		switch {
		case a.distinct:
			pre := aggPrefix('U', gid, i)
			err := st.Scan(pre, prefixEnd(pre), false, func(_, v []byte) (bool, error) {
				_, m := binary.Varint(v)
				if m <= 0 || m == len(v) {
					return false, fmt.Errorf("%w: a DISTINCT value without its value (a state of an older layout)", errCodec)
				}
				if p.D == nil {
					p.D = map[int][][]byte{}
				}
				p.D[i] = append(p.D[i], bytes.Clone(v[m:]))
				return true, nil
			})
			if err != nil {
				return nil, err
			}
			p.G.Aggs[i] = aggState{}
		case a.name == "MIN" || a.name == "MAX" || a.name == "ANY_VALUE":
			pre := aggPrefix('M', gid, i)
			err := st.Scan(pre, prefixEnd(pre), a.name == "MAX", func(_, v []byte) (bool, error) {
				_, m := binary.Varint(v)
				if m <= 0 {
					return false, errCodec
				}
				if p.X == nil {
					p.X = map[int][]byte{}
				}
				p.X[i] = bytes.Clone(v[m:])
				return false, nil
			})
			if err != nil {
				return nil, err
			}
		case a.name == "ARRAY_AGG" || a.name == "STRING_AGG":
			pre := aggPrefix('L', gid, i)
			err := st.Scan(pre, prefixEnd(pre), false, func(k, v []byte) (bool, error) {
				if p.L == nil {
					p.L = map[int][][2][]byte{}
				}
				p.L[i] = append(p.L[i], [2][]byte{bytes.Clone(k[len(pre):]), bytes.Clone(v)})
				return true, nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return json.Marshal(p)
}

// Merge merges groups' partial states and computes their outputs.
type Merge struct {
	ic     *Incremental
	mem    *memStore
	groups map[string]*GroupState
}

// NewMerge starts a merge of partial states.
func (ic *Incremental) NewMerge() *Merge {
	return &Merge{ic: ic, mem: &memStore{m: map[string][]byte{}}, groups: map[string]*GroupState{}}
}

// Add merges one part's partial state of group gid.
func (m *Merge) Add(gid, b []byte) error {
	var p partial
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("%w: partial state: %v", errCodec, err)
	}
	if len(p.G.Aggs) == 0 {
		p.G.Aggs = make([]aggState, len(m.ic.q.aggs))
	}
	if len(p.G.Aggs) != len(m.ic.q.aggs) {
		return fmt.Errorf("%w: partial state of another query", errCodec)
	}
	g := m.groups[string(gid)]
	if g == nil {
		g = &GroupState{Keys: p.G.Keys, Aggs: make([]aggState, len(m.ic.q.aggs))}
		m.groups[string(gid)] = g
	}
	g.N += p.G.N
	for i, a := range m.ic.q.aggs {
		if !a.distinct {
			mergeAgg(&g.Aggs[i], &p.G.Aggs[i])
			continue
		}
		// Each value in as a row of the group would put it: counted once
		// whichever parts hold it.
		for _, x := range p.D[i] {
			v, _, err := DecodeValue(x)
			if err != nil {
				return err
			}
			if err := m.ic.applyAgg(m.mem, gid, nil, i, a, &g.Aggs[i], []Value{v}, 1); err != nil {
				return err
			}
		}
	}
	for i, x := range p.X {
		v, _, err := DecodeValue(x)
		if err != nil {
			return err
		}
		if _, err := addCount(m.mem, orderedKey(aggPrefix('M', gid, i), v), 1, v); err != nil {
			return err
		}
	}
	for i, els := range p.L {
		for _, e := range els {
			if err := m.mem.Set(append(aggPrefix('L', gid, i), e[0]...), e[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

func mergeAgg(d, s *aggState) {
	d.N += s.N
	if s.I != "" {
		a, _ := new(big.Int).SetString(cmpOr(d.I, "0"), 10)
		b, _ := new(big.Int).SetString(s.I, 10)
		if a != nil && b != nil {
			d.I = a.Add(a, b).String()
		}
	}
	if s.F != "" {
		sum := parseFloatSum(d.F)
		sum.Add(sum, parseFloatSum(s.F))
		d.F = sum.Text('p', 0)
		if sum.Sign() == 0 {
			d.F = ""
		}
	}
	d.PInf += s.PInf
	d.NInf += s.NInf
	d.NaN += s.NaN
	d.T += s.T
	d.Fa += s.Fa
	if s.Bits != nil {
		if d.Bits == nil {
			d.Bits = make([]int64, 64)
		}
		for b := range s.Bits {
			if b < len(d.Bits) {
				d.Bits[b] += s.Bits[b]
			}
		}
	}
	d.X ^= s.X
}

// Output calls fn with every merged group's output row (as the view's
// maintenance outputs them: groups fed by rows, and the global group
// always), in no particular order; a group whose output fails gets err.
func (m *Merge) Output(ctx context.Context, now time.Time, fn func(gid []byte, vals []Value, err error) error) error {
	if m.ic.Global() && m.groups[""] == nil {
		m.groups[""] = &GroupState{}
	}
	gids := make([]string, 0, len(m.groups))
	for gid := range m.groups {
		gids = append(gids, gid)
	}
	slices.Sort(gids)
	for _, gid := range gids {
		g := m.groups[gid]
		if g.N <= 0 && !m.ic.Global() {
			continue
		}
		vals, err := m.ic.Output(ctx, m.mem, []byte(gid), g, now)
		if err := fn([]byte(gid), vals, err); err != nil {
			return err
		}
	}
	return nil
}

// memStore is a Store in memory.
type memStore struct {
	m      map[string][]byte
	sorted []string
}

func (s *memStore) Get(k []byte) ([]byte, bool, error) {
	v, ok := s.m[string(k)]
	return v, ok, nil
}

func (s *memStore) Set(k, v []byte) error {
	if _, ok := s.m[string(k)]; !ok {
		s.sorted = nil
	}
	s.m[string(k)] = bytes.Clone(v)
	return nil
}

func (s *memStore) Delete(k []byte) error {
	if _, ok := s.m[string(k)]; ok {
		delete(s.m, string(k))
		s.sorted = nil
	}
	return nil
}

func (s *memStore) Scan(lo, hi []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	if s.sorted == nil {
		s.sorted = make([]string, 0, len(s.m))
		for k := range s.m {
			s.sorted = append(s.sorted, k)
		}
		slices.Sort(s.sorted)
	}
	i, _ := slices.BinarySearch(s.sorted, string(lo))
	j := len(s.sorted)
	if hi != nil {
		j, _ = slices.BinarySearch(s.sorted, string(hi))
	}
	keys := slices.Clone(s.sorted[i:j])
	if reverse {
		slices.Reverse(keys)
	}
	for _, k := range keys {
		v, ok := s.m[k]
		if !ok {
			continue
		}
		more, err := fn([]byte(k), v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}
