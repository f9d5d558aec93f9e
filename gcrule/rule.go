// Package gcrule owns the garbage-collection rule model of a column family:
// the rule tree (no rule, max age, max versions, union, intersection, nested
// to any depth), its cbt text syntax (Parse, CbtString), the text the official
// Go client prints for it (String), validation, and the pure decision of which
// cells of one column are eligible for collection at a given time, and why
// (Eligible). It depends only on the standard library; the proto conversion
// lives in server/convert.
//
// The zero Rule is "no rule": keep everything.
package gcrule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every error this package returns: a rule that does
// not parse, does not validate, or does not decode.
var ErrInvalid = errors.New("invalid gc rule")

// Kind is the shape of a Rule.
type Kind uint8

// The kinds of rule.
const (
	KindNone         Kind = iota // no rule: keep everything
	KindMaxAge                   // cells older than a duration are eligible
	KindMaxVersions              // cells past the N newest of their column are eligible
	KindUnion                    // eligible when any child says so
	KindIntersection             // eligible when every child says so
)

// String is the kind's name.
func (k Kind) String() string {
	switch k {
	case KindNone:
		return "none"
	case KindMaxAge:
		return "maxage"
	case KindMaxVersions:
		return "maxversions"
	case KindUnion:
		return "union"
	case KindIntersection:
		return "intersection"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// MaxVersionsLimit is the largest max versions a rule may hold (the proto
// field is an int32).
const MaxVersionsLimit = math.MaxInt32

// Rule is a garbage-collection rule. Values are immutable: constructors copy
// the children they are given, and Children returns a copy. It keeps the shape
// it was built with (a union of one child stays a union of one child), so the
// proto round-trips exactly. Compare rules with Equal, not ==.
type Rule struct {
	kind     Kind
	age      time.Duration
	versions int
	children []Rule
}

// None is the absence of a rule (keep every cell); it is the zero Rule.
func None() Rule { return Rule{} }

// MaxAge makes cells whose timestamp is older than now - d eligible.
func MaxAge(d time.Duration) Rule { return Rule{kind: KindMaxAge, age: d} }

// MaxVersions makes every cell but the n newest of its column eligible.
func MaxVersions(n int) Rule { return Rule{kind: KindMaxVersions, versions: n} }

// Union makes a cell eligible when any child makes it eligible.
func Union(children ...Rule) Rule {
	return Rule{kind: KindUnion, children: slices.Clone(children)}
}

// Intersection makes a cell eligible when every child makes it eligible.
func Intersection(children ...Rule) Rule {
	return Rule{kind: KindIntersection, children: slices.Clone(children)}
}

// Kind is the rule's shape.
func (r Rule) Kind() Kind { return r.kind }

// IsNone reports whether r is no rule at all (keep everything).
func (r Rule) IsNone() bool { return r.kind == KindNone }

// Age is the duration of a KindMaxAge rule (0 for other kinds).
func (r Rule) Age() time.Duration { return r.age }

// Versions is the count of a KindMaxVersions rule (0 for other kinds).
func (r Rule) Versions() int { return r.versions }

// Children returns a copy of a union's or intersection's children (nil for
// other kinds).
func (r Rule) Children() []Rule { return slices.Clone(r.children) }

// Equal reports whether r and o have exactly the same shape and values.
func (r Rule) Equal(o Rule) bool {
	if r.kind != o.kind || r.age != o.age || r.versions != o.versions || len(r.children) != len(o.children) {
		return false
	}
	for i := range r.children {
		if !r.children[i].Equal(o.children[i]) {
			return false
		}
	}
	return true
}

// HasVersions reports whether a max-versions term appears anywhere in r.
// Only then can a cell's eligibility depend on its position in its column.
func (r Rule) HasVersions() bool {
	if r.kind == KindMaxVersions {
		return true
	}
	return slices.ContainsFunc(r.children, Rule.HasVersions)
}

// HasAge reports whether a max-age term appears anywhere in r.
func (r Rule) HasAge() bool {
	if r.kind == KindMaxAge {
		return true
	}
	return slices.ContainsFunc(r.children, Rule.HasAge)
}

// MinMaxAge is the shortest positive max age anywhere in r, 0 if none. For a
// rule without max-versions terms, no cell younger than it is ever eligible.
func (r Rule) MinMaxAge() time.Duration {
	var m time.Duration
	r.walk(func(x Rule) {
		if x.kind == KindMaxAge && x.age > 0 && (m == 0 || x.age < m) {
			m = x.age
		}
	})
	return m
}

// MaxMaxAge is the longest max age anywhere in r, 0 if none. Comparing it
// before and after a change tells how far a retention was raised (a raise on a
// replicated table can leave clusters out of sync).
func (r Rule) MaxMaxAge() time.Duration {
	var m time.Duration
	r.walk(func(x Rule) {
		if x.kind == KindMaxAge && x.age > m {
			m = x.age
		}
	})
	return m
}

func (r Rule) walk(fn func(Rule)) {
	fn(r)
	for _, c := range r.children {
		c.walk(fn)
	}
}

// Validate reports why r cannot be a family's rule, or nil. None is valid.
// It refuses a max age that is not positive or not a whole number of
// milliseconds, max versions below 1 or above MaxVersionsLimit, a union or
// intersection without children, and a None inside a union or intersection.
// Errors wrap ErrInvalid and name where in the rule the problem is.
func (r Rule) Validate() error {
	return r.validate("")
}

func (r Rule) validate(where string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s%s", ErrInvalid, where, fmt.Sprintf(format, args...))
	}
	switch r.kind {
	case KindNone:
		if where != "" {
			return bad("an empty rule (no rule) cannot be part of a union or intersection")
		}
	case KindMaxAge:
		if r.age <= 0 {
			return bad("max age must be positive, got %v", r.age)
		}
		if r.age%time.Millisecond != 0 {
			return bad("max age %v is not a whole number of milliseconds", r.age)
		}
	case KindMaxVersions:
		if r.versions < 1 {
			return bad("max versions must be at least 1, got %d", r.versions)
		}
		if r.versions > MaxVersionsLimit {
			return bad("max versions %d is too large (the limit is %d)", r.versions, MaxVersionsLimit)
		}
	case KindUnion, KindIntersection:
		if len(r.children) == 0 {
			if r.kind == KindUnion {
				return bad("a union needs at least one rule")
			}
			return bad("an intersection needs at least one rule")
		}
		for i, c := range r.children {
			if err := c.validate(fmt.Sprintf("%s%s rule %d: ", where, r.kind, i+1)); err != nil {
				return err
			}
		}
	default:
		return bad("unknown rule kind %v", r.kind)
	}
	return nil
}

// String is the text the official Go client (cloud.google.com/go/bigtable,
// gc.go) prints for the same rule: "age() > 30d", "versions() > 5",
// "(age() > 10d || versions() > 1)", "(versions() > 1 && age() > 1h)". Ages
// print in the largest of d, h, m that divides them, otherwise as a bare
// number of microseconds ("age() > 1000000" for 1s, "age() > 500000" for
// 500ms), as the client's MaxAgeGCPolicy does. No rule prints "<never>" (what
// the client prints for a family without a rule); a None inside a union or
// intersection prints "" (what it prints for an empty GcRule).
func (r Rule) String() string {
	if r.kind == KindNone {
		return "<never>"
	}
	var b strings.Builder
	r.clientString(&b)
	return b.String()
}

func (r Rule) clientString(b *strings.Builder) {
	switch r.kind {
	case KindMaxAge:
		b.WriteString("age() > ")
		b.WriteString(clientDuration(r.age))
	case KindMaxVersions:
		fmt.Fprintf(b, "versions() > %d", r.versions)
	case KindUnion, KindIntersection:
		sep := " || "
		if r.kind == KindIntersection {
			sep = " && "
		}
		b.WriteByte('(')
		for i, c := range r.children {
			if i > 0 {
				b.WriteString(sep)
			}
			c.clientString(b)
		}
		b.WriteByte(')')
	}
}

// clientDuration mirrors the client's MaxAgeGCPolicy.GetDurationString.
func clientDuration(d time.Duration) string {
	for _, u := range []struct {
		d      time.Duration
		suffix string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}} {
		if d%u.d == 0 {
			return fmt.Sprintf("%d%s", d/u.d, u.suffix)
		}
	}
	return fmt.Sprintf("%d", d/time.Microsecond)
}

// jsonRule is the stored form of a Rule: exactly one field set, or none for
// no rule. max_age is a Go duration string ("720h0m0s"), exact for any value.
type jsonRule struct {
	MaxAge       *string `json:"max_age,omitempty"`
	MaxVersions  *int    `json:"max_versions,omitempty"`
	Union        *[]Rule `json:"union,omitempty"`
	Intersection *[]Rule `json:"intersection,omitempty"`
}

// MarshalJSON encodes r as {} (no rule), {"max_age":"720h0m0s"},
// {"max_versions":5}, {"union":[...]} or {"intersection":[...]}; it keeps the
// exact shape.
func (r Rule) MarshalJSON() ([]byte, error) {
	var j jsonRule
	switch r.kind {
	case KindMaxAge:
		s := r.age.String()
		j.MaxAge = &s
	case KindMaxVersions:
		n := r.versions
		j.MaxVersions = &n
	case KindUnion, KindIntersection:
		cs := r.children
		if cs == nil {
			cs = []Rule{}
		}
		if r.kind == KindUnion {
			j.Union = &cs
		} else {
			j.Intersection = &cs
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON encodes; null is no rule.
func (r *Rule) UnmarshalJSON(data []byte) error {
	if string(bytes.TrimSpace(data)) == "null" {
		*r = Rule{}
		return nil
	}
	var j jsonRule
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	set := 0
	for _, p := range []bool{j.MaxAge != nil, j.MaxVersions != nil, j.Union != nil, j.Intersection != nil} {
		if p {
			set++
		}
	}
	if set > 1 {
		return fmt.Errorf("%w: stored rule %s sets more than one kind", ErrInvalid, data)
	}
	switch {
	case j.MaxAge != nil:
		d, err := time.ParseDuration(*j.MaxAge)
		if err != nil {
			return fmt.Errorf("%w: stored max age: %v", ErrInvalid, err)
		}
		*r = MaxAge(d)
	case j.MaxVersions != nil:
		*r = MaxVersions(*j.MaxVersions)
	case j.Union != nil:
		*r = Rule{kind: KindUnion, children: *j.Union}
	case j.Intersection != nil:
		*r = Rule{kind: KindIntersection, children: *j.Intersection}
	default:
		*r = Rule{}
	}
	return nil
}
