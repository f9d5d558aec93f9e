package sqlquery

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"time"
)

// Incremental maintenance of a grouped query (a continuous materialized
// view). Each row of the table contributes to at most one group: its group
// key and the inputs of every aggregate (a Contribution). A group's state
// holds, per aggregate, what lets a contribution be added or taken back in
// time independent of the group's size: counts and sums (integers exact, in
// a big.Int; finite floats exact, in a wide big.Float, with counts of
// infinities and NaNs), per-bit counts for BIT_AND and BIT_OR, an ordered
// multiset of values for MIN, MAX and ANY_VALUE and a value multiset for
// DISTINCT (each value with its count), and for ARRAY_AGG and STRING_AGG the elements by source row.
// The state lives in a Store (an ordered key-value space); a group's output
// row is computed from its state.

// ErrNotIncremental is returned by Incremental for a query it cannot
// maintain.
var ErrNotIncremental = errors.New("ebbtable: the query cannot be maintained incrementally")

// Incremental is a grouped query over one table, decomposed to be
// maintained row by row.
type Incremental struct {
	p *Plan
	q *query
}

// Incremental decomposes the plan; ErrNotIncremental (wrapped) when it
// does not read a table directly, is not grouped, or has a LIMIT.
func (p *Plan) Incremental() (*Incremental, error) {
	q := p.root
	if !p.Direct() {
		return nil, fmt.Errorf("%w: it does not read one table directly", ErrNotIncremental)
	}
	if !q.grouped {
		return nil, fmt.Errorf("%w: it has no GROUP BY or aggregate", ErrNotIncremental)
	}
	if q.limit >= 0 || q.limitPar != "" {
		return nil, fmt.Errorf("%w: it has a LIMIT", ErrNotIncremental)
	}
	for _, a := range q.aggs {
		if a.count != nil {
			return nil, fmt.Errorf("%w: %s", ErrNotIncremental, a.name)
		}
		if a.mods != nil {
			return nil, fmt.Errorf("%w: %s with IGNORE NULLS, ORDER BY or LIMIT", ErrNotIncremental, a.name)
		}
		if a.distinct && (a.name == "ARRAY_AGG" || a.name == "STRING_AGG") {
			return nil, fmt.Errorf("%w: %s(DISTINCT …)", ErrNotIncremental, a.name)
		}
	}
	return &Incremental{p: p, q: q}, nil
}

// Global reports whether the query has no GROUP BY keys: one group, always
// output.
func (ic *Incremental) Global() bool { return len(ic.q.groups) == 0 }

// Contribution is what one table row adds to the query's groups.
type Contribution struct {
	// Group identifies the group (its keys' encoding).
	Group []byte
	// Keys are the group's key values.
	Keys []Value
	// Inputs holds each aggregate's argument values (none for COUNT(*)).
	Inputs [][]Value
}

// EncodeContribution encodes c (nil: none).
func EncodeContribution(c *Contribution) []byte {
	if c == nil {
		return nil
	}
	b := binary.AppendUvarint(nil, uint64(len(c.Group)))
	b = append(b, c.Group...)
	b = encodeList(b, c.Keys)
	b = binary.AppendUvarint(b, uint64(len(c.Inputs)))
	for _, in := range c.Inputs {
		b = encodeList(b, in)
	}
	return b
}

// DecodeContribution decodes EncodeContribution's bytes (empty: nil).
func DecodeContribution(b []byte) (*Contribution, error) {
	if len(b) == 0 {
		return nil, nil
	}
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return nil, errCodec
	}
	c := &Contribution{Group: append([]byte{}, b[n:n+int(l)]...)}
	b = b[n+int(l):]
	keys, b, err := decodeList(b)
	if err != nil {
		return nil, err
	}
	c.Keys = keys
	k, n := binary.Uvarint(b)
	if n <= 0 || k > uint64(len(b)) {
		return nil, errCodec
	}
	b = b[n:]
	for i := uint64(0); i < k; i++ {
		in, rest, err := decodeList(b)
		if err != nil {
			return nil, err
		}
		c.Inputs = append(c.Inputs, in)
		b = rest
	}
	return c, nil
}

// Contributions reads the given rows of the table (nil: every row) as the
// query does at time now and calls fn with each row read and what it
// contributes (nil when WHERE drops it or it has no group). Rows not found
// are not reported.
func (ic *Incremental) Contributions(ctx context.Context, cat Catalog, now time.Time, rows [][]byte, fn func(row []byte, c *Contribution) error) error {
	var keys []keyRange
	if rows != nil {
		if len(rows) == 0 {
			return nil
		}
		keys = make([]keyRange, 0, len(rows))
		for _, k := range rows {
			keys = append(keys, keyRange{lo: k, hi: succ(k)})
		}
		keys = normalize(keys)
	}
	return ic.contributions(ctx, cat, now, keys, fn)
}

// contributions is Contributions over keys (nil: every row).
func (ic *Incremental) contributions(ctx context.Context, cat Catalog, now time.Time, keys []keyRange, fn func(row []byte, c *Contribution) error) error {
	x := &execCtx{ctx: ctx, cat: cat, now: now.UTC()}
	q := ic.q
	return q.src.scan(x, keys, func(e *rowEnv) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		row := e.row.Key
		if q.where != nil {
			v, err := q.where(e)
			if err != nil {
				return err
			}
			if v != true {
				return fn(row, nil)
			}
		}
		c := &Contribution{Keys: make([]Value, len(q.groups)), Inputs: make([][]Value, len(q.aggs))}
		for i, g := range q.groups {
			v, err := g(e)
			if err != nil {
				return err
			}
			c.Keys[i] = v
			c.Group = appendKey(c.Group, v)
		}
		for i, a := range q.aggs {
			for _, f := range a.args {
				v, err := f(e)
				if err != nil {
					return err
				}
				c.Inputs[i] = append(c.Inputs[i], v)
			}
		}
		return fn(row, c)
	})
}

// Store is an ordered key-value space holding a view's group state.
type Store interface {
	Get(key []byte) ([]byte, bool, error)
	Set(key, val []byte) error
	Delete(key []byte) error
	// Scan calls fn for keys in [lo, hi) in order (or reversed) until fn
	// returns false.
	Scan(lo, hi []byte, reverse bool, fn func(k, v []byte) (bool, error)) error
}

// Keys of a Store, by their first byte: 'G' group states, 'M' ordered
// value multisets, 'U' DISTINCT value multisets, 'L' element lists. The
// caller may use other first bytes for its own keys.
func groupKey(gid []byte) []byte { return append([]byte{'G'}, gid...) }

func aggPrefix(space byte, gid []byte, agg int) []byte {
	b := binary.BigEndian.AppendUint32([]byte{space}, uint32(len(gid)))
	b = append(b, gid...)
	return binary.BigEndian.AppendUint16(b, uint16(agg))
}

// floatPrec holds any sum of float64s exactly (2^1024 down to 2^-1074,
// with room for carries).
const floatPrec = 2200

// GroupState is a group's stored state.
type GroupState struct {
	Keys []byte     `json:"k"` // encoded key values
	N    int64      `json:"n"` // contributing rows
	Aggs []aggState `json:"a"`
	// Out is the output key the group is stored under, by its owner.
	Out    []byte `json:"o,omitempty"`
	HasOut bool   `json:"ho,omitempty"`
}

type aggState struct {
	N    int64   `json:"n,omitempty"` // non-NULL inputs (DISTINCT: distinct values)
	I    string  `json:"i,omitempty"` // integer sum (decimal)
	F    string  `json:"f,omitempty"` // finite float sum (exact, %b)
	PInf int64   `json:"pi,omitempty"`
	NInf int64   `json:"ni,omitempty"`
	NaN  int64   `json:"nan,omitempty"`
	T    int64   `json:"t,omitempty"` // TRUE inputs
	Fa   int64   `json:"fa,omitempty"`
	Bits []int64 `json:"b,omitempty"` // per-bit counts of ones
	X    int64   `json:"x,omitempty"` // BIT_XOR
}

// LoadGroup reads a group's state (nil: none).
func LoadGroup(st Store, gid []byte) (*GroupState, error) {
	v, ok, err := st.Get(groupKey(gid))
	if err != nil || !ok {
		return nil, err
	}
	g := &GroupState{}
	if err := json.Unmarshal(v, g); err != nil {
		return nil, fmt.Errorf("%w: group state: %v", errCodec, err)
	}
	return g, nil
}

// SaveGroup stores a group's state; a group no row feeds is deleted.
func (ic *Incremental) SaveGroup(st Store, gid []byte, g *GroupState) error {
	if g.N == 0 && !ic.Global() {
		return st.Delete(groupKey(gid))
	}
	b, err := json.Marshal(g)
	if err != nil {
		return err
	}
	return st.Set(groupKey(gid), b)
}

// Apply takes contribution c of row out of (sign -1) or into (sign +1) its
// group's state g (loaded by the caller; a new group when nil).
func (ic *Incremental) Apply(st Store, row []byte, c *Contribution, sign int64, g *GroupState) (*GroupState, error) {
	if g == nil {
		g = &GroupState{Keys: encodeList(nil, c.Keys), Aggs: make([]aggState, len(ic.q.aggs))}
	}
	if len(g.Aggs) != len(ic.q.aggs) || len(c.Inputs) != len(ic.q.aggs) {
		return nil, fmt.Errorf("%w: group state of another query", errCodec)
	}
	g.N += sign
	for i, a := range ic.q.aggs {
		if err := ic.applyAgg(st, c.Group, row, i, a, &g.Aggs[i], c.Inputs[i], sign); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func (ic *Incremental) applyAgg(st Store, gid, row []byte, i int, a *aggSpec, s *aggState, in []Value, sign int64) error {
	if a.star {
		s.N += sign
		return nil
	}
	v := in[0]
	if a.name == "ARRAY_AGG" || a.name == "STRING_AGG" {
		if v == nil && a.name == "STRING_AGG" {
			return nil
		}
		k := append(aggPrefix('L', gid, i), row...)
		if sign < 0 {
			s.N--
			return st.Delete(k)
		}
		s.N++
		return st.Set(k, encodeList(nil, in))
	}
	if v == nil {
		return nil
	}
	if a.distinct {
		// The value is kept beside its count: a partial state ships its
		// distinct values (incrmerge.go).
		k := append(aggPrefix('U', gid, i), Format(v)...)
		n, err := addCount(st, k, sign, v)
		if err != nil {
			return err
		}
		if !(sign > 0 && n == 1 || sign < 0 && n == 0) {
			return nil
		}
	}
	s.N += sign
	switch a.name {
	case "COUNTIF":
		if v == true {
			s.T += sign
		}
	case "LOGICAL_AND", "LOGICAL_OR":
		if v == true {
			s.T += sign
		} else {
			s.Fa += sign
		}
	case "SUM", "AVG":
		switch x := v.(type) {
		case int64:
			sum, _ := new(big.Int).SetString(cmpOr(s.I, "0"), 10)
			s.I = sum.Add(sum, big.NewInt(sign*x)).String()
		default:
			f, _ := toFloat(v)
			switch {
			case math.IsNaN(f):
				s.NaN += sign
			case math.IsInf(f, 1):
				s.PInf += sign
			case math.IsInf(f, -1):
				s.NInf += sign
			default:
				sum := parseFloatSum(s.F)
				d := new(big.Float).SetPrec(floatPrec).SetFloat64(f)
				if sign < 0 {
					d.Neg(d)
				}
				sum.Add(sum, d)
				s.F = sum.Text('p', 0)
				if sum.Sign() == 0 {
					s.F = ""
				}
			}
		}
	case "MIN", "MAX", "ANY_VALUE":
		k := orderedKey(aggPrefix('M', gid, i), v)
		if _, err := addCount(st, k, sign, v); err != nil {
			return err
		}
	case "BIT_AND", "BIT_OR":
		if s.Bits == nil {
			s.Bits = make([]int64, 64)
		}
		x := uint64(v.(int64))
		for b := 0; b < 64; b++ {
			if x&(1<<b) != 0 {
				s.Bits[b] += sign
			}
		}
	case "BIT_XOR":
		s.X ^= v.(int64)
	}
	return nil
}

func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func parseFloatSum(s string) *big.Float {
	f := new(big.Float).SetPrec(floatPrec)
	if s != "" {
		f.Parse(s, 0)
	}
	return f
}

// addCount adds sign to the count under k (a multiset entry; v, when not
// nil, is stored beside the count) and returns the new count; zero deletes
// the entry.
func addCount(st Store, k []byte, sign int64, v Value) (int64, error) {
	var n int64
	old, ok, err := st.Get(k)
	if err != nil {
		return 0, err
	}
	if ok {
		x, m := binary.Varint(old)
		if m <= 0 {
			return 0, errCodec
		}
		n = x
	}
	n += sign
	if n <= 0 {
		return 0, st.Delete(k)
	}
	b := binary.AppendVarint(nil, n)
	if v != nil {
		b = EncodeValue(b, v)
	}
	return n, st.Set(k, b)
}

// Output computes group gid's output row from its state g at time now:
// the select list over its keys and aggregate results.
func (ic *Incremental) Output(ctx context.Context, st Store, gid []byte, g *GroupState, now time.Time) ([]Value, error) {
	var keys []Value
	if len(g.Keys) > 0 {
		var err error
		if keys, _, err = decodeList(g.Keys); err != nil {
			return nil, err
		}
	}
	if ic.Global() && len(g.Aggs) == 0 {
		g.Aggs = make([]aggState, len(ic.q.aggs))
	}
	aggv := make([]Value, len(ic.q.aggs))
	for i, a := range ic.q.aggs {
		v, err := ic.result(st, gid, i, a, &g.Aggs[i])
		if err != nil {
			return nil, err
		}
		aggv[i] = v
	}
	e := &rowEnv{x: &execCtx{ctx: ctx, now: now.UTC()}, gkeys: keys, aggv: aggv}
	vals := make([]Value, len(ic.q.items))
	for i, it := range ic.q.items {
		v, err := it.eval(e)
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	return vals, nil
}

func (ic *Incremental) result(st Store, gid []byte, i int, a *aggSpec, s *aggState) (Value, error) {
	switch a.name {
	case "COUNT":
		return s.N, nil
	case "COUNTIF":
		return s.T, nil
	}
	if s.N == 0 {
		return nil, nil
	}
	switch a.name {
	case "SUM", "AVG":
		isum, _ := new(big.Int).SetString(cmpOr(s.I, "0"), 10)
		if a.name == "SUM" && a.out.Kind == KindInt64 {
			if !isum.IsInt64() {
				return nil, invalidf("int64 overflow in SUM")
			}
			return isum.Int64(), nil
		}
		var f float64
		switch {
		case s.NaN > 0 || s.PInf > 0 && s.NInf > 0:
			f = math.NaN()
		case s.PInf > 0:
			f = math.Inf(1)
		case s.NInf > 0:
			f = math.Inf(-1)
		default:
			sum := parseFloatSum(s.F)
			sum.Add(sum, new(big.Float).SetPrec(floatPrec).SetInt(isum))
			f, _ = sum.Float64()
		}
		if a.name == "AVG" {
			return f / float64(s.N), nil
		}
		return f, nil
	case "MIN", "MAX", "ANY_VALUE":
		p := aggPrefix('M', gid, i)
		var out Value
		err := st.Scan(p, prefixEnd(p), a.name == "MAX", func(_, v []byte) (bool, error) {
			_, m := binary.Varint(v)
			if m <= 0 {
				return false, errCodec
			}
			x, _, err := DecodeValue(v[m:])
			out = x
			return false, err
		})
		return out, err
	case "ARRAY_AGG", "STRING_AGG":
		p := aggPrefix('L', gid, i)
		var arr Array
		var parts [][]byte
		var sep Value
		err := st.Scan(p, prefixEnd(p), false, func(_, v []byte) (bool, error) {
			in, _, err := decodeList(v)
			if err != nil || len(in) == 0 {
				return false, errCodec
			}
			if a.name == "ARRAY_AGG" {
				if in[0] == nil {
					return false, invalidf("ARRAY_AGG cannot hold NULL elements")
				}
				arr = append(arr, in[0])
				return true, nil
			}
			parts = append(parts, asBytes(in[0]))
			if len(in) > 1 && sep == nil {
				sep = in[1]
			}
			return true, nil
		})
		if err != nil {
			return nil, err
		}
		if a.name == "ARRAY_AGG" {
			return arr, nil
		}
		sb := []byte(",")
		if sep != nil {
			sb = asBytes(sep)
		}
		joined := slices.Concat(joinParts(parts, sb)...)
		if a.out.Kind == KindString {
			return string(joined), nil
		}
		return joined, nil
	case "LOGICAL_AND":
		return s.Fa == 0, nil
	case "LOGICAL_OR":
		return s.T > 0, nil
	case "BIT_AND", "BIT_OR":
		var x uint64
		for b := 0; b < 64 && b < len(s.Bits); b++ {
			if a.name == "BIT_AND" && s.Bits[b] == s.N || a.name == "BIT_OR" && s.Bits[b] > 0 {
				x |= 1 << b
			}
		}
		return int64(x), nil
	case "BIT_XOR":
		return s.X, nil
	}
	return nil, invalidf("aggregate %s cannot be maintained", strings.ToLower(a.name))
}

func joinParts(parts [][]byte, sep []byte) [][]byte {
	out := make([][]byte, 0, 2*len(parts))
	for i, p := range parts {
		if i > 0 {
			out = append(out, sep)
		}
		out = append(out, p)
	}
	return out
}

// CheckMaterialized checks the rules Cloud Bigtable sets for a continuous
// materialized view's query that ebbtable enforces (docs/sql.md): it reads
// a table (not a view, a subquery or UNPACK), has no LIMIT, and either
// groups (GROUP BY or aggregates) or, as an asynchronous secondary index,
// orders with ORDER BY, not both. Errors wrap ErrInvalid.
func (p *Plan) CheckMaterialized() error {
	q := p.root
	if _, ok := q.src.(*tableSource); !ok {
		return invalidf("a materialized view's query must read a table: FROM a view, a subquery or UNPACK is not allowed")
	}
	if q.limit >= 0 || q.limitPar != "" {
		return invalidf("a materialized view's query cannot have LIMIT")
	}
	if !q.grouped && len(q.order) == 0 {
		return invalidf("a materialized view's query needs GROUP BY (or ORDER BY, for an asynchronous secondary index)")
	}
	if q.grouped && len(q.order) > 0 {
		return invalidf("a materialized view's query has GROUP BY or ORDER BY, not both")
	}
	return nil
}
