package filter

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
)

// MaxDepth is how deeply Chains, Interleaves and Conditions may nest, as in
// Bigtable.
const MaxDepth = 20

// MaxLabelLength is the longest label ApplyLabel accepts.
const MaxLabelLength = 15

// Options tune Compile.
type Options struct {
	// Rand returns a number in [0, 1) for RowSample; nil uses math/rand/v2.
	// It is called concurrently when the Program is.
	Rand func() float64
}

// Program is a compiled, validated filter. It is immutable and safe for
// concurrent use. A nil *Program passes every cell.
type Program struct {
	root    *node
	rand    func() float64
	passAll bool // root passes every cell unchanged
	head    *head
}

// node is the compiled form of one Filter.
type node struct {
	kind       Kind
	kids       []*node // Chain, Interleave
	pred, t, f *node   // Condition; nil t or f outputs nothing
	re         *matcher
	family     string
	start, end Bound
	startTS    int64
	endTS      int64
	p          float64
	n          int
	label      string
	mask       []byte
}

// Compile validates f and compiles it into a Program. A nil f compiles to a
// nil Program, which passes every cell. Errors wrap ErrInvalid.
func Compile(f *Filter, opts Options) (*Program, error) {
	if f == nil {
		return nil, nil
	}
	root, err := compile(f, 0, false)
	if err != nil {
		return nil, err
	}
	r := opts.Rand
	if r == nil {
		r = rand.Float64
	}
	return &Program{root: root, rand: r, passAll: root.kind == KindPassAll, head: compileHead(root)}, nil
}

// invalidError is a validation failure; it unwraps to ErrInvalid.
type invalidError string

func (e invalidError) Error() string { return "filter: invalid " + string(e) }
func (e invalidError) Unwrap() error { return ErrInvalid }

func invalidf(format string, args ...any) error {
	return invalidError(fmt.Sprintf(format, args...))
}

// compile compiles f found at the given nesting depth; inCond says f lies
// inside a Condition, where Sink is not allowed. A nil f is PassAll.
func compile(f *Filter, depth int, inCond bool) (*node, error) {
	if f == nil {
		return &node{kind: KindPassAll}, nil
	}
	n := &node{kind: f.Kind}
	switch f.Kind {
	case KindPassAll, KindBlockAll, KindStripValue:
	case KindSink:
		if inCond {
			return nil, invalidf("sink: not allowed inside a condition")
		}
	case KindChain, KindInterleave:
		if len(f.Filters) == 0 {
			return nil, invalidf("%s: must contain at least one filter", f.Kind)
		}
		if depth >= MaxDepth {
			return nil, invalidf("%s: filters nested deeper than %d", f.Kind, MaxDepth)
		}
		for _, sub := range f.Filters {
			k, err := compile(sub, depth+1, inCond)
			if err != nil {
				return nil, err
			}
			n.kids = append(n.kids, k)
		}
		return simplify(n), nil
	case KindCondition:
		if depth >= MaxDepth {
			return nil, invalidf("%s: filters nested deeper than %d", f.Kind, MaxDepth)
		}
		var err error
		if n.pred, err = compile(f.Predicate, depth+1, true); err != nil {
			return nil, err
		}
		if f.True != nil {
			if n.t, err = compile(f.True, depth+1, true); err != nil {
				return nil, err
			}
		}
		if f.False != nil {
			if n.f, err = compile(f.False, depth+1, true); err != nil {
				return nil, err
			}
		}
	case KindRowKeyRegex, KindFamilyNameRegex, KindColumnQualifierRegex, KindValueRegex:
		if f.Kind == KindRowKeyRegex && f.Regex == "" {
			return nil, invalidf("%s: must not be empty", f.Kind)
		}
		if f.Kind == KindFamilyNameRegex {
			if strings.IndexByte(f.Regex, ':') >= 0 {
				return nil, invalidf("%s %q: must not contain ':'", f.Kind, f.Regex)
			}
		}
		m, err := compileRegex(f.Kind.String(), f.Regex)
		if err != nil {
			return nil, err
		}
		n.re = m
	case KindRowSample:
		if !(f.Probability > 0 && f.Probability < 1) {
			return nil, invalidf("%s %v: probability must be in (0, 1)", f.Kind, f.Probability)
		}
		n.p = f.Probability
	case KindColumnRange:
		if f.Family == "" {
			return nil, invalidf("%s: family_name must not be empty", f.Kind)
		}
		if err := checkRange(f.Kind, f.Start, f.End); err != nil {
			return nil, err
		}
		n.family, n.start, n.end = f.Family, f.Start, f.End
	case KindValueRange:
		if err := checkRange(f.Kind, f.Start, f.End); err != nil {
			return nil, err
		}
		n.start, n.end = f.Start, f.End
	case KindTimestampRange:
		if f.StartMicros < 0 || f.EndMicros < 0 {
			return nil, invalidf("%s [%d, %d): timestamps must not be negative", f.Kind, f.StartMicros, f.EndMicros)
		}
		if f.EndMicros != 0 && f.EndMicros < f.StartMicros {
			return nil, invalidf("%s [%d, %d): end before start", f.Kind, f.StartMicros, f.EndMicros)
		}
		n.startTS, n.endTS = f.StartMicros, f.EndMicros
	case KindCellsPerRowOffset:
		if f.N < 0 || f.N > maxCount {
			return nil, invalidf("%s %d: must be between 0 and %d", f.Kind, f.N, maxCount)
		}
		n.n = int(f.N)
		if n.n == 0 {
			n.kind = KindPassAll
		}
	case KindCellsPerRowLimit, KindCellsPerColumnLimit:
		if f.N < 1 || f.N > maxCount {
			return nil, invalidf("%s %d: must be between 1 and %d", f.Kind, f.N, maxCount)
		}
		n.n = int(f.N)
	case KindApplyLabel:
		if !validLabel(f.Label) {
			return nil, invalidf("%s %q: must be 1 to %d characters of [a-z0-9-]", f.Kind, f.Label, MaxLabelLength)
		}
		n.label = f.Label
	case KindValueBitmask:
		if len(f.Mask) == 0 {
			return nil, invalidf("%s: mask must not be empty", f.Kind)
		}
		n.mask = f.Mask
	default:
		return nil, invalidf("filter kind %d: unknown", f.Kind)
	}
	return n, nil
}

// maxCount is the largest offset or limit accepted (the proto's int32).
const maxCount = 1<<31 - 1

// simplify collapses a Chain or Interleave of one sub-filter into it, and a
// Chain of PassAlls into PassAll.
func simplify(n *node) *node {
	if len(n.kids) == 1 {
		return n.kids[0]
	}
	if n.kind == KindChain {
		kids := n.kids[:0:0]
		for _, k := range n.kids {
			if k.kind != KindPassAll {
				kids = append(kids, k)
			}
		}
		switch len(kids) {
		case 0:
			return &node{kind: KindPassAll}
		case 1:
			return kids[0]
		}
		n.kids = kids
	}
	return n
}

// checkRange rejects a range whose start lies after its end.
func checkRange(k Kind, start, end Bound) error {
	for _, b := range []Bound{start, end} {
		if b.Kind > Open {
			return invalidf("%s: unknown bound kind %d", k, b.Kind)
		}
	}
	if start.Kind != Unbounded && end.Kind != Unbounded && bytes.Compare(start.Value, end.Value) > 0 {
		return invalidf("%s: start %q after end %q", k, start.Value, end.Value)
	}
	return nil
}

func validLabel(l string) bool {
	if l == "" || len(l) > MaxLabelLength {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
