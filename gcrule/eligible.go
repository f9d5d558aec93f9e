package gcrule

import (
	"math"
	"time"
)

// Reason says whether a cell is eligible for collection under a rule, and why.
type Reason uint8

// The reasons.
const (
	ReasonNone     Reason = iota // not eligible: keep
	ReasonAge                    // eligible, and only max-age terms made it so
	ReasonVersions               // eligible, and a max-versions term took part
)

// String is "none", "age" or "versions".
func (r Reason) String() string {
	switch r {
	case ReasonAge:
		return "age"
	case ReasonVersions:
		return "versions"
	}
	return "none"
}

// Eligible decides, for the cells of one column, which a rule makes eligible
// for collection at now. col holds the cells' timestamps in microseconds,
// newest first, so an index is a version position (0 is the newest); now is
// in microseconds too. The result has one Reason per cell.
//
//   - max age d: eligible when timestamp < now - d (strictly older; a cell
//     exactly d old, or with a timestamp in the future, is kept).
//   - max versions n: eligible when position >= n.
//   - union: when any child says so; intersection: when every child says so;
//     nested to any depth.
//   - the reason is ReasonVersions when a max-versions term took part in
//     making the cell eligible (an eligible child of a union, or any child of
//     an eligible intersection), ReasonAge when only max-age terms did.
//     Version-based deletions replicate; age-based ones are local.
//
// None makes nothing eligible. Eligible never makes data eligible through an
// invalid term: a max age or max versions that is not positive (or an age
// under a microsecond) and an empty union or intersection are never eligible.
// Positions count the cells given, so callers that set other cells aside
// (expired ones) pass the remaining timestamps.
func Eligible(r Rule, col []int64, now int64) []Reason {
	return AppendEligible(make([]Reason, 0, len(col)), r, col, now)
}

// AppendEligible is Eligible appending to dst, for callers that reuse memory.
func AppendEligible(dst []Reason, r Rule, col []int64, now int64) []Reason {
	for pos, ts := range col {
		dst = append(dst, r.Check(pos, ts, now))
	}
	return dst
}

// Check is Eligible for one cell: its position in its column (0 newest), its
// timestamp and now, in microseconds.
func (r Rule) Check(pos int, ts, now int64) Reason {
	elig, vers := r.eval(pos, ts, now)
	switch {
	case !elig:
		return ReasonNone
	case vers:
		return ReasonVersions
	default:
		return ReasonAge
	}
}

// eval reports whether the cell is eligible and whether a versions term took
// part in making it so.
func (r Rule) eval(pos int, ts, now int64) (elig, vers bool) {
	switch r.kind {
	case KindMaxAge:
		us := int64(r.age / time.Microsecond)
		if us <= 0 || now < math.MinInt64+us {
			return false, false
		}
		return ts < now-us, false
	case KindMaxVersions:
		if r.versions <= 0 {
			return false, false
		}
		e := pos >= r.versions
		return e, e
	case KindUnion:
		for _, c := range r.children {
			if e, v := c.eval(pos, ts, now); e {
				elig = true
				vers = vers || v
			}
		}
		return elig, vers
	case KindIntersection:
		if len(r.children) == 0 {
			return false, false
		}
		for _, c := range r.children {
			e, v := c.eval(pos, ts, now)
			if !e {
				return false, false
			}
			vers = vers || v
		}
		return true, vers
	}
	return false, false
}

// Looser reports whether changing a family's rule from old to next would keep
// some cell that old makes eligible: whether there is a column, a position, a
// timestamp and a time now at which old says eligible and next says keep
// (under Eligible's semantics). Looser(old, None()) is true for any rule old
// that can make something eligible; Looser(None(), next) is false.
//
// It is exact, not a heuristic: every term is a threshold on a cell's age or
// position, so checking one cell per region the thresholds of both rules cut
// (each age just past a threshold, and age 0; each threshold position, and
// position 0) covers every case. It ignores reasons: turning an age deletion
// into a versions deletion is not looser. A change can be both looser and
// stricter (maxage=30d to maxversions=5): Looser(next, old) tells the second.
func Looser(old, next Rule) bool {
	ages := []int64{0} // cell ages in microseconds
	poss := []int{0}
	for _, r := range []Rule{old, next} {
		r.walk(func(x Rule) {
			switch x.kind {
			case KindMaxAge:
				if us := int64(x.age / time.Microsecond); us > 0 {
					ages = append(ages, us+1)
				}
			case KindMaxVersions:
				if x.versions > 0 {
					poss = append(poss, x.versions)
				}
			}
		})
	}
	// Measure ages back from now = 0: a cell of age a has timestamp -a.
	for _, a := range ages {
		for _, p := range poss {
			if e, _ := old.eval(p, -a, 0); !e {
				continue
			}
			if e, _ := next.eval(p, -a, 0); !e {
				return true
			}
		}
	}
	return false
}
