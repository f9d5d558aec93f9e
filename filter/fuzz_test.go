package filter

import (
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/ebbtable/ebbtable/cell"
)

// FuzzCompile feeds arbitrary patterns, counts, probabilities and bytes to
// every filter kind: Compile must return a Program or an ErrInvalid error,
// and Apply must not panic. Regex matching must agree with a plain anchored
// regexp over the Latin-1 decoded subject, whichever fast path it takes.
func FuzzCompile(f *testing.F) {
	f.Add("a.*", int64(1), 0.5, []byte("abc"))
	f.Add(`\C+`, int64(0), 0.0, []byte("a\nb"))
	f.Add(`[\C]`, int64(-1), 1.0, []byte{0xff})
	f.Add(`\Q\C\E`, int64(3), math.NaN(), []byte(`\C`))
	f.Add("[]a]", int64(1<<40), 0.999, []byte("]"))
	f.Add("[[:alpha:]\\]]+", int64(2), 1e-9, []byte("ab]"))
	f.Add("é|\xff", int64(2), 0.3, []byte("\xff"))
	f.Add("a)|(b", int64(2), 0.3, []byte("a"))
	f.Add("(?i)ÀB", int64(2), 0.3, []byte("\xe0b"))
	f.Fuzz(func(t *testing.T, pattern string, n int64, p float64, data []byte) {
		row := cell.Row{Key: data, Cells: []cell.Cell{
			{Family: "f", Qualifier: data, Timestamp: 2000, Value: data},
			{Family: "f", Qualifier: data, Timestamp: 1000, Value: []byte(pattern)},
			{Family: "g", Qualifier: []byte("q"), Timestamp: 1000, Value: data},
		}}
		leaves := []*Filter{
			RowKeyRegex(pattern), FamilyNameRegex(pattern), ColumnQualifierRegex(pattern), ValueRegex(pattern),
			RowSample(p), CellsPerRowOffset(n), CellsPerRowLimit(n), CellsPerColumnLimit(n),
			TimestampRange(n, n*2), ColumnRange(pattern, ClosedBound(data), OpenBound([]byte(pattern))),
			ValueRange(OpenBound(data), ClosedBound([]byte(pattern))), ValueBitmask(data), ApplyLabel(pattern),
		}
		for _, leaf := range leaves {
			for _, flt := range []*Filter{leaf, Interleave(Chain(leaf, Sink()), leaf, Condition(leaf, StripValue(), leaf))} {
				prog, err := Compile(flt, Options{Rand: func() float64 { return 0.5 }})
				if err != nil {
					if !isInvalid(err) {
						t.Fatalf("Compile(%+v): error %v does not wrap ErrInvalid", *flt, err)
					}
					continue
				}
				prog.Apply(row)
			}
		}

		m, err := compileRegex("value_regex_filter", pattern)
		if err != nil {
			return
		}
		ref, err := regexp.Compile(`\A(?:` + translateRegex(pattern) + `)\z`)
		if err != nil {
			t.Fatalf("pattern %q compiles alone but not anchored: %v", pattern, err)
		}
		for _, subject := range [][]byte{data, []byte(pattern), nil} {
			got, _ := m.match(subject, nil)
			want := ref.Match(latin1Decode(nil, subject))
			if got != want {
				t.Errorf("pattern %q on %q: match %v, reference %v", pattern, subject, got, want)
			}
			gotS, _ := m.matchString(string(subject), nil)
			if gotS != want {
				t.Errorf("pattern %q on %q: matchString %v, reference %v", pattern, subject, gotS, want)
			}
		}
		// Without \C and non-ASCII bytes, translation is the identity.
		if isASCIIString(pattern) && !strings.Contains(pattern, `\`) {
			if tr := translateRegex(pattern); tr != pattern {
				t.Errorf("translateRegex(%q) = %q", pattern, tr)
			}
		}
	})
}

func isInvalid(err error) bool {
	_, ok := err.(invalidError)
	return ok
}

// TestTranslateRegex pins the pattern rewriting.
func TestTranslateRegex(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`a\Cb`, `a(?s:.)b`},
		{`\\C`, `\\C`},
		{`[\C]`, `[\C]`},
		{`[]\C]\C`, `[]\C](?s:.)`},
		{`[^]\C]\C`, `[^]\C](?s:.)`},
		{`[[:alpha:]\C]\C`, `[[:alpha:]\C](?s:.)`},
		{`[[:x\C]\C`, `[[:x\C](?s:.)`},
		{`\Q\C\E\C`, `\Q\C\E(?s:.)`},
		{`\Q\C`, `\Q\C\E`},
		{`\Qa\`, `\Qa\\E`},
		{"\xff\\C", "\u00ff(?s:.)"},
		{`a\`, `a\`},
	} {
		if got := translateRegex(c.in); got != c.want {
			t.Errorf("translateRegex(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
