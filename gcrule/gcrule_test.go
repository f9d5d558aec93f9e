package gcrule

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

const day = 24 * time.Hour

var (
	age  = MaxAge
	vers = MaxVersions
	or   = Union
	and  = Intersection
)

// TestParse: cbt text → rule, the client's String, and the CbtString that
// parses back to the same rule.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   Rule
		client string
		cbt    string
	}{
		{"never", None(), "<never>", "never"},
		{"  never\t", None(), "<never>", "never"},
		{"maxage=30d", age(30 * day), "age() > 30d", "maxage=30d"},
		{"maxversions=5", vers(5), "versions() > 5", "maxversions=5"},
		{"maxage=1s", age(time.Second), "age() > 1000000", "maxage=1s"},
		{"maxage=500ms", age(500 * time.Millisecond), "age() > 500000", "maxage=500ms"},
		{"maxage=90m", age(90 * time.Minute), "age() > 90m", "maxage=90m"},
		{"maxage=36h", age(36 * time.Hour), "age() > 36h", "maxage=36h"},
		{"maxage=48h", age(2 * day), "age() > 2d", "maxage=2d"},
		{"maxage=60s", age(time.Minute), "age() > 1m", "maxage=1m"},
		{"maxage=1500ms", age(1500 * time.Millisecond), "age() > 1500000", "maxage=1500ms"},
		{"maxage=007d", age(7 * day), "age() > 7d", "maxage=7d"},
		{"maxage=10d || maxversions=2", or(age(10*day), vers(2)), "(age() > 10d || versions() > 2)", "maxage=10d || maxversions=2"},
		{"maxage=10d or maxversions=2", or(age(10*day), vers(2)), "(age() > 10d || versions() > 2)", "maxage=10d || maxversions=2"},
		{"maxage=30d && maxversions=1", and(age(30*day), vers(1)), "(age() > 30d && versions() > 1)", "maxage=30d && maxversions=1"},
		{"maxage=30d and maxversions=1", and(age(30*day), vers(1)), "(age() > 30d && versions() > 1)", "maxage=30d && maxversions=1"},
		{" maxage = 30d\t&&\nmaxversions =1 ", and(age(30*day), vers(1)), "(age() > 30d && versions() > 1)", "maxage=30d && maxversions=1"},
		{"(maxage=30d && maxversions=1) || maxversions=10",
			or(and(age(30*day), vers(1)), vers(10)),
			"((age() > 30d && versions() > 1) || versions() > 10)",
			"(maxage=30d && maxversions=1) || maxversions=10"},
		{"maxage=30d || (maxage=3d && maxversions=100)",
			or(age(30*day), and(age(3*day), vers(100))),
			"(age() > 30d || (age() > 3d && versions() > 100))",
			"maxage=30d || (maxage=3d && maxversions=100)"},
		// Equal precedence, left to right, as in cbt.
		{"maxage=1d || maxversions=2 && maxage=3d",
			and(or(age(day), vers(2)), age(3*day)),
			"((age() > 1d || versions() > 2) && age() > 3d)",
			"(maxage=1d || maxversions=2) && maxage=3d"},
		{"maxage=1d && maxversions=2 || maxage=3d",
			or(and(age(day), vers(2)), age(3*day)),
			"((age() > 1d && versions() > 2) || age() > 3d)",
			"(maxage=1d && maxversions=2) || maxage=3d"},
		// A run of one operator is one node; parentheses make their own.
		{"maxversions=1 || maxversions=2 || maxversions=3", or(vers(1), vers(2), vers(3)),
			"(versions() > 1 || versions() > 2 || versions() > 3)", "maxversions=1 || maxversions=2 || maxversions=3"},
		{"(maxversions=1 || maxversions=2) || maxversions=3", or(or(vers(1), vers(2)), vers(3)),
			"((versions() > 1 || versions() > 2) || versions() > 3)", "(maxversions=1 || maxversions=2) || maxversions=3"},
		{"(maxage=5d)", age(5 * day), "age() > 5d", "maxage=5d"},
		{"((maxversions=2 || maxage=1h))", or(vers(2), age(time.Hour)), "(versions() > 2 || age() > 1h)", "maxversions=2 || maxage=1h"},
		{"(maxage=1d&&maxversions=2)||(maxage=7d&&(maxversions=1||maxage=30d))",
			or(and(age(day), vers(2)), and(age(7*day), or(vers(1), age(30*day)))),
			"((age() > 1d && versions() > 2) || (age() > 7d && (versions() > 1 || age() > 30d)))",
			"(maxage=1d && maxversions=2) || (maxage=7d && (maxversions=1 || maxage=30d))"},
		{"maxversions=2147483647", vers(math.MaxInt32), "versions() > 2147483647", "maxversions=2147483647"},
		{"maxage=106751d", age(106751 * day), "age() > 106751d", "maxage=106751d"},
	} {
		got, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if !got.Equal(tc.want) {
			t.Errorf("Parse(%q) = %s, want %s", tc.in, got, tc.want)
		}
		if s := got.String(); s != tc.client {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.in, s, tc.client)
		}
		if s := got.CbtString(); s != tc.cbt {
			t.Errorf("Parse(%q).CbtString() = %q, want %q", tc.in, s, tc.cbt)
		}
		if back, err := Parse(got.CbtString()); err != nil || !back.Equal(got) {
			t.Errorf("Parse(%q) round trip via %q = %s, %v", tc.in, got.CbtString(), back, err)
		}
	}
}

// TestParseErrors: every refusal wraps ErrInvalid and says what is wrong.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty rule"},
		{"   ", "empty rule"},
		{"maxage", `expected = after maxage, found end of input`},
		{"maxage=", "expected a duration after maxage="},
		{"maxage=30", "a duration is a whole number followed by a unit"},
		{"maxage=d", "a duration is a whole number followed by a unit"},
		{"maxage=30x", `unknown unit "x"`},
		{"maxage=30D", `unknown unit "D"`},
		{"maxage=1us", `unknown unit "us"`},
		{"maxage=1h30m", `unknown unit "h30m"`},
		{"maxage=1.5h", `unexpected character '.'`},
		{"maxage=-1d", `unexpected character '-'`},
		{"maxage=0d", "greater than zero"},
		{"maxage=0ms", "greater than zero"},
		{"maxage=106752d", "too long"},
		{"maxage=99999999999999999999999d", "too long"},
		{"maxversions=0", "keep at least 1 version"},
		{"maxversions=2147483648", "too large"},
		{"maxversions=99999999999999999999", "too large"},
		{"maxversions=5d", "expected a whole number"},
		{"maxversions=", "expected a number after maxversions="},
		{"maxversions==5", "expected a number after maxversions="},
		{"MaxAge=30d", `found "MaxAge"`},
		{"maxage:30d", `unexpected character ':'`},
		{"maxage=30d maxversions=5", `expected || or && before "maxversions"`},
		{"maxage=30d ||", "found end of input"},
		{"|| maxage=30d", `found "||"`},
		{"maxage=30d | maxversions=5", "expected ||"},
		{"maxage=30d & maxversions=5", "expected &&"},
		{"maxage=30d &| maxversions=5", "expected &&"},
		{"(maxage=30d", "expected ) to close the ( at column 1, found end of input"},
		{"maxage=30d)", "unmatched )"},
		{"()", `found ")"`},
		{"never || maxage=1d", "never stands alone"},
		{"maxage=1d || never", "never stands alone"},
		{"(never)", "never stands alone"},
		{"nevermore", `found "nevermore"`},
		{"maxage=30d || maxversions=x", "expected a whole number"},
		{strings.Repeat("(", MaxParseDepth+1) + "maxage=1d" + strings.Repeat(")", MaxParseDepth+1), "nest deeper than"},
	} {
		_, err := Parse(tc.in)
		if err == nil {
			t.Errorf("Parse(%q) succeeded, want error containing %q", tc.in, tc.want)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) error %v does not wrap ErrInvalid", tc.in, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) error %q, want it to contain %q", tc.in, err, tc.want)
		}
	}
	// Deep but within the limit is fine.
	deep := strings.Repeat("(", MaxParseDepth) + "maxage=1d" + strings.Repeat(")", MaxParseDepth)
	if _, err := Parse(deep); err != nil {
		t.Errorf("Parse(depth %d): %v", MaxParseDepth, err)
	}
}

// TestString: what the official Go client prints, for shapes text cannot
// build too.
func TestString(t *testing.T) {
	for _, tc := range []struct {
		r      Rule
		client string
		cbt    string
	}{
		{None(), "<never>", "never"},
		{age(time.Second), "age() > 1000000", "maxage=1s"},
		{age(500 * time.Millisecond), "age() > 500000", "maxage=500ms"},
		{age(time.Hour + 30*time.Minute), "age() > 90m", "maxage=90m"},
		{age(25 * time.Hour), "age() > 25h", "maxage=25h"},
		{age(61 * time.Second), "age() > 61000000", "maxage=61s"},
		{age(0), "age() > 0d", "maxage=0s"},
		{age(-day), "age() > -1d", "maxage=-1d"},
		{age(1500 * time.Microsecond), "age() > 1500", "maxage=1.5ms"},
		{vers(0), "versions() > 0", "maxversions=0"},
		{or(vers(1)), "(versions() > 1)", "maxversions=1"},
		{and(age(day)), "(age() > 1d)", "maxage=1d"},
		{or(), "()", "()"},
		{and(), "()", "()"},
		{or(None(), vers(1)), "( || versions() > 1)", "never || maxversions=1"},
		{and(or(vers(1), vers(2))), "((versions() > 1 || versions() > 2))", "maxversions=1 || maxversions=2"},
		{or(and(or(vers(1), vers(2))), vers(3)), "(((versions() > 1 || versions() > 2)) || versions() > 3)", "(maxversions=1 || maxversions=2) || maxversions=3"},
		{and(vers(1), age(time.Hour)), "(versions() > 1 && age() > 1h)", "maxversions=1 && maxage=1h"},
	} {
		if s := tc.r.String(); s != tc.client {
			t.Errorf("String() = %q, want %q", s, tc.client)
		}
		if s := tc.r.CbtString(); s != tc.cbt {
			t.Errorf("%s.CbtString() = %q, want %q", tc.client, s, tc.cbt)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		r    Rule
		want string // "" = valid
	}{
		{None(), ""},
		{age(time.Millisecond), ""},
		{age(30 * day), ""},
		{vers(1), ""},
		{vers(math.MaxInt32), ""},
		{or(vers(1)), ""},
		{and(or(vers(1), age(time.Hour)), age(day)), ""},
		{age(0), "max age must be positive, got 0s"},
		{age(-time.Hour), "max age must be positive, got -1h0m0s"},
		{age(1500 * time.Microsecond), "max age 1.5ms is not a whole number of milliseconds"},
		{age(time.Nanosecond), "not a whole number of milliseconds"},
		{vers(0), "max versions must be at least 1, got 0"},
		{vers(-3), "max versions must be at least 1, got -3"},
		{vers(math.MaxInt32 + 1), "max versions 2147483648 is too large (the limit is 2147483647)"},
		{or(), "a union needs at least one rule"},
		{and(), "an intersection needs at least one rule"},
		{or(vers(1), and()), "union rule 2: an intersection needs at least one rule"},
		{or(vers(1), None()), "union rule 2: an empty rule (no rule) cannot be part of a union or intersection"},
		{and(age(day), or(vers(2), vers(0))), "intersection rule 2: union rule 2: max versions must be at least 1, got 0"},
	} {
		err := tc.r.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s.Validate() = %v, want nil", tc.r, err)
		case tc.want != "" && err == nil:
			t.Errorf("%s.Validate() = nil, want %q", tc.r, tc.want)
		case tc.want != "" && !errors.Is(err, ErrInvalid):
			t.Errorf("%s.Validate() = %v, does not wrap ErrInvalid", tc.r, err)
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s.Validate() = %q, want it to contain %q", tc.r, err, tc.want)
		}
	}
}

// now is the clock of the eligibility examples (2023-11-14, in microseconds).
const now int64 = 1_700_000_000_000_000

// ago turns cell ages (newest first; negative = in the future) into timestamps.
func ago(ages ...time.Duration) []int64 {
	ts := make([]int64, len(ages))
	for i, a := range ages {
		ts[i] = now - a.Microseconds()
	}
	return ts
}

// days is ago with ages in days.
func days(ds ...float64) []int64 {
	ages := make([]time.Duration, len(ds))
	for i, d := range ds {
		ages[i] = time.Duration(d * float64(day))
	}
	return ago(ages...)
}

// reasons renders Eligible's result: . keep, A age, V versions.
func reasons(rs []Reason) string {
	b := make([]byte, len(rs))
	for i, r := range rs {
		b[i] = ".AV"[r]
	}
	return string(b)
}

// TestEligible is the collection semantics as examples, read from
// testdata/eligible.txt (its head says the format).
func TestEligible(t *testing.T) {
	cases := readEligibleSpec(t, "testdata/eligible.txt")
	if len(cases) < 30 {
		t.Fatalf("only %d cases read from the spec", len(cases))
	}
	for _, tc := range cases {
		r, err := Parse(tc.rule)
		if err != nil {
			t.Errorf("%s (%s): rule %q: %v", tc.name, tc.at, tc.rule, err)
			continue
		}
		if got := reasons(Eligible(r, tc.col, now)); got != tc.want {
			t.Errorf("%s (%s): Eligible(%q) = %q, want %q", tc.name, tc.at, tc.rule, got, tc.want)
		}
	}
}

// eligibleCase is one block of the eligibility spec.
type eligibleCase struct {
	name, at, rule, want string
	col                  []int64
}

// readEligibleSpec parses the blocks of an eligibility spec file.
func readEligibleSpec(t *testing.T, path string) []eligibleCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cases []eligibleCase
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		if l := strings.TrimSpace(lines[i]); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		at := fmt.Sprintf("%s:%d", path, i+1)
		if i+3 >= len(lines) {
			t.Fatalf("%s: a case needs a name, rule:, ages: and want: lines", at)
		}
		tc := eligibleCase{name: strings.TrimSpace(lines[i]), at: at}
		field := func(j int, key string) string {
			v, ok := strings.CutPrefix(lines[i+j], key+":")
			if !ok {
				t.Fatalf("%s:%d: want %q, got %q", path, i+j+1, key+":", lines[i+j])
			}
			if v = strings.TrimSpace(v); v == "(none)" {
				return ""
			}
			return v
		}
		tc.rule, tc.want = field(1, "rule"), field(3, "want")
		var ages []time.Duration
		for _, f := range strings.Fields(field(2, "ages")) {
			ages = append(ages, parseAge(t, f))
		}
		tc.col = ago(ages...)
		cases = append(cases, tc)
		i += 3
	}
	return cases
}

// parseAge reads an age: a number of days with a d suffix (2d, 0.5d, -1d)
// or a Go duration (36h, 47h30m, -1h).
func parseAge(t *testing.T, s string) time.Duration {
	t.Helper()
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(d, 64)
		if err != nil {
			t.Fatalf("age %q: %v", s, err)
		}
		return time.Duration(n * float64(day))
	}
	a, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("age %q: %v", s, err)
	}
	return a
}

// TestEligibleBoundaries pins the edges in microseconds.
func TestEligibleBoundaries(t *testing.T) {
	r := age(time.Second)
	for _, tc := range []struct {
		ts   int64
		want Reason
	}{
		{now - 1_000_000, ReasonNone}, // exactly max age old: kept
		{now - 1_000_001, ReasonAge},  // one microsecond older: eligible
		{now - 999_999, ReasonNone},
		{now, ReasonNone},
		{now + 1, ReasonNone},
		{math.MinInt64, ReasonAge},
		{math.MaxInt64, ReasonNone},
	} {
		if got := r.Check(0, tc.ts, now); got != tc.want {
			t.Errorf("maxage=1s: Check(ts=now%+d) = %v, want %v", tc.ts-now, got, tc.want)
		}
	}
	// A clock near the bottom of int64 does not wrap.
	if got := age(day).Check(0, math.MinInt64, math.MinInt64+5); got != ReasonNone {
		t.Errorf("underflowing cutoff: %v", got)
	}
	if got := vers(3).Check(2, 0, now); got != ReasonNone {
		t.Errorf("maxversions=3 at position 2: %v", got)
	}
	if got := vers(3).Check(3, 0, now); got != ReasonVersions {
		t.Errorf("maxversions=3 at position 3: %v", got)
	}
}

// TestEligibleInvalid: invalid terms never make data eligible.
func TestEligibleInvalid(t *testing.T) {
	col := days(0, 1, 2, 400)
	for _, r := range []Rule{
		age(0), age(-day), age(time.Nanosecond), vers(0), vers(-1), or(), and(),
		and(None()), or(None()), and(vers(1), and()),
	} {
		if got := reasons(Eligible(r, col, now)); got != "...." {
			t.Errorf("Eligible(%s) = %q, want nothing eligible", r, got)
		}
	}
	if got := reasons(Eligible(or(vers(0), vers(2)), col, now)); got != "..VV" {
		t.Errorf("union with an invalid child = %q", got)
	}
}

func TestHelpers(t *testing.T) {
	for _, tc := range []struct {
		rule         string
		versions     bool
		ages         bool
		minAge, maxA time.Duration
	}{
		{"never", false, false, 0, 0},
		{"maxversions=3", true, false, 0, 0},
		{"maxage=30d", false, true, 30 * day, 30 * day},
		{"maxage=30d || (maxage=3d && maxversions=100)", true, true, 3 * day, 30 * day},
		{"(maxage=1h || maxage=2h) && maxage=10m", false, true, 10 * time.Minute, 2 * time.Hour},
	} {
		r := MustParse(tc.rule)
		if r.HasVersions() != tc.versions || r.HasAge() != tc.ages || r.MinMaxAge() != tc.minAge || r.MaxMaxAge() != tc.maxA {
			t.Errorf("%q: HasVersions %v HasAge %v MinMaxAge %v MaxMaxAge %v", tc.rule, r.HasVersions(), r.HasAge(), r.MinMaxAge(), r.MaxMaxAge())
		}
	}
	if !None().IsNone() || !(Rule{}).IsNone() || vers(1).IsNone() {
		t.Error("IsNone")
	}
	kids := []Rule{vers(1), vers(2)}
	u := Union(kids...)
	kids[0] = vers(9)
	u.Children()[1] = vers(9)
	if !u.Equal(or(vers(1), vers(2))) {
		t.Errorf("Union shares its children: %s", u)
	}
}

// TestLooser: does the new rule keep something the old one collects?
func TestLooser(t *testing.T) {
	for _, tc := range []struct {
		old, next    string
		looser       bool
		alsoStricter bool
	}{
		{"maxage=30d", "maxage=30d", false, false},
		{"maxage=30d", "maxage=50d", true, false},
		{"maxage=50d", "maxage=30d", false, true},
		{"maxversions=5", "maxversions=3", false, true},
		{"maxversions=3", "maxversions=5", true, false},
		{"maxage=30d", "never", true, false},
		{"never", "maxage=30d", false, true},
		{"never", "never", false, false},
		{"maxage=30d", "maxversions=5", true, true},
		{"maxage=30d", "maxage=30d && maxversions=1", true, false},
		{"maxage=30d && maxversions=1", "maxage=30d", false, true},
		{"maxversions=2 || maxage=30d", "maxversions=2", true, false},
		{"maxversions=2", "maxversions=2 || maxage=30d", false, true},
		{"maxage=10d || maxversions=2", "maxversions=2 || maxage=10d", false, false},
		{"maxage=1d || maxage=2d", "maxage=1d", false, false},
		{"maxage=1d && maxage=2d", "maxage=2d", false, false},
		{"(maxage=30d && maxversions=1) || maxversions=10", "maxversions=10 || (maxversions=1 && maxage=30d)", false, false},
		{"(maxage=30d && maxversions=1) || maxversions=10", "(maxage=31d && maxversions=1) || maxversions=10", true, false},
		{"maxage=1000ms", "maxage=1s", false, false},
	} {
		old, next := MustParse(tc.old), MustParse(tc.next)
		if got := Looser(old, next); got != tc.looser {
			t.Errorf("Looser(%q, %q) = %v, want %v", tc.old, tc.next, got, tc.looser)
		}
		if got := Looser(next, old); got != tc.alsoStricter {
			t.Errorf("Looser(%q, %q) = %v, want %v", tc.next, tc.old, got, tc.alsoStricter)
		}
	}
}

// TestLooserBruteForce checks Looser against whole columns on a dense grid.
func TestLooserBruteForce(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	const h = int64(time.Hour / time.Microsecond)
	for range 3000 {
		old, next := randRule(rng, 3, true), randRule(rng, 3, true)
		// Ages up to 5h in steps around each whole hour, positions up to 5:
		// every threshold of randRule's small rules is crossed.
		found := false
		for p := 0; p <= 5 && !found; p++ {
			for a := int64(-1); a <= 5*h+1 && !found; a += h {
				for _, d := range []int64{0, 1, 2} {
					ts := now - (a + d)
					eo, _ := old.eval(p, ts, now)
					en, _ := next.eval(p, ts, now)
					if eo && !en {
						found = true
					}
				}
			}
		}
		if got := Looser(old, next); got != found {
			t.Fatalf("Looser(%q, %q) = %v, brute force %v", old.CbtString(), next.CbtString(), got, found)
		}
	}
}

// randRule builds a random valid rule whose unions and intersections have at
// least two children (the shapes text can say exactly). small keeps ages
// whole hours up to 4h and versions up to 4.
func randRule(rng *rand.Rand, depth int, small bool) Rule {
	k := rng.IntN(4)
	if depth == 0 {
		k = rng.IntN(2)
	}
	switch k {
	case 0:
		if small {
			return age(time.Duration(1+rng.IntN(4)) * time.Hour)
		}
		unit := []time.Duration{time.Millisecond, time.Second, time.Minute, time.Hour, day}[rng.IntN(5)]
		return age(time.Duration(1+rng.IntN(5000)) * unit)
	case 1:
		if small {
			return vers(1 + rng.IntN(4))
		}
		return vers(1 + rng.IntN(math.MaxInt32))
	}
	kids := make([]Rule, 2+rng.IntN(3))
	for i := range kids {
		kids[i] = randRule(rng, depth-1, small)
	}
	if k == 2 {
		return or(kids...)
	}
	return and(kids...)
}

// TestRoundTrip: CbtString parses back to the same rule, JSON decodes back
// to the same rule.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		r := randRule(rng, 4, false)
		back, err := Parse(r.CbtString())
		if err != nil || !back.Equal(r) {
			t.Fatalf("Parse(%q) = %s, %v; want %s", r.CbtString(), back, err, r)
		}
		checkJSON(t, r)
	}
}

func checkJSON(t *testing.T, r Rule) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("Marshal(%s): %v", r, err)
	}
	var back Rule
	if err := json.Unmarshal(b, &back); err != nil || !back.Equal(r) {
		t.Fatalf("Unmarshal(%s) = %s, %v; want %s", b, back, err, r)
	}
}

func TestJSON(t *testing.T) {
	for _, tc := range []struct {
		r    Rule
		want string
	}{
		{None(), `{}`},
		{age(30 * day), `{"max_age":"720h0m0s"}`},
		{vers(5), `{"max_versions":5}`},
		{or(age(day), vers(2)), `{"union":[{"max_age":"24h0m0s"},{"max_versions":2}]}`},
		{and(vers(1)), `{"intersection":[{"max_versions":1}]}`},
		{or(), `{"union":[]}`},
		{and(None(), age(0)), `{"intersection":[{},{"max_age":"0s"}]}`},
		{age(math.MinInt64), `{"max_age":"-2562047h47m16.854775808s"}`},
		{age(math.MaxInt64), `{"max_age":"2562047h47m16.854775807s"}`},
	} {
		b, err := json.Marshal(tc.r)
		if err != nil || string(b) != tc.want {
			t.Errorf("Marshal(%s) = %s, %v; want %s", tc.r, b, err, tc.want)
		}
		checkJSON(t, tc.r)
	}
	// Inside a struct, as the table schema stores it.
	type family struct {
		Name string `json:"name"`
		GC   Rule   `json:"gc"`
	}
	in := family{"cf", MustParse("(maxage=30d && maxversions=1) || maxversions=10")}
	b, _ := json.Marshal(in)
	var out family
	if err := json.Unmarshal(b, &out); err != nil || !out.GC.Equal(in.GC) {
		t.Errorf("struct round trip %s: %+v, %v", b, out, err)
	}
	var n family
	if err := json.Unmarshal([]byte(`{"name":"cf","gc":null}`), &n); err != nil || !n.GC.IsNone() {
		t.Errorf("null gc: %v %v", n.GC, err)
	}
	for _, bad := range []string{`{"max_age":"30x"}`, `{"max_versions":1,"max_age":"1s"}`, `{"maxage":"1s"}`, `[]`} {
		var r Rule
		if err := json.Unmarshal([]byte(bad), &r); !errors.Is(err, ErrInvalid) {
			t.Errorf("Unmarshal(%s) = %v, want ErrInvalid", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"never", "maxage=30d", "maxversions=5", "maxage=10d || maxversions=2",
		"(maxage=30d && maxversions=1) || maxversions=10", "maxage=1s", "maxage=500ms",
		"maxage=1d or maxversions=2 and maxage=3h", "((maxversions=1))", "maxage=",
		"(maxversions=1 || maxversions=2) || maxversions=3", "maxage=1h30m", "&|", "(",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("Parse(%q) returned an invalid rule: %v", s, err)
		}
		back, err := Parse(r.CbtString())
		if err != nil || !back.Equal(r) {
			t.Fatalf("Parse(%q) = %s; Parse(CbtString %q) = %s, %v", s, r, r.CbtString(), back, err)
		}
		if back.String() != r.String() || back.CbtString() != r.CbtString() {
			t.Fatalf("strings differ after round trip: %q %q", r.String(), back.String())
		}
		checkJSON(t, r)
		if Looser(r, r) {
			t.Fatalf("Looser(%q, itself)", s)
		}
		_ = Eligible(r, days(-1, 0, 1, 30, 400), now)
	})
}
