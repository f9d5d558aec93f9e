package filter_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ebbtable/ebbtable/cell"
	. "github.com/ebbtable/ebbtable/filter"
)

// mkRow builds a row from cells written "family:qualifier@timestamp=value".
// Qualifiers and values may hold any byte (use Go string escapes).
func mkRow(key string, specs ...string) cell.Row {
	r := cell.Row{Key: []byte(key)}
	for _, s := range specs {
		fam, rest, _ := strings.Cut(s, ":")
		at := strings.LastIndex(rest, "@")
		eq := at + strings.Index(rest[at:], "=")
		ts, err := strconv.ParseInt(rest[at+1:eq], 10, 64)
		if err != nil {
			panic(fmt.Sprintf("bad cell spec %q", s))
		}
		r.Cells = append(r.Cells, cell.Cell{
			Family: fam, Qualifier: []byte(rest[:at]), Timestamp: ts, Value: []byte(rest[eq+1:]),
		})
	}
	return r
}

// render writes cells the way mkRow reads them, with labels in braces and
// non-printable bytes escaped; "" is the empty row.
func render(r cell.Row) string {
	esc := func(b []byte) string {
		q := strconv.QuoteToASCII(string(b))
		return q[1 : len(q)-1]
	}
	var parts []string
	for _, c := range r.Cells {
		s := fmt.Sprintf("%s:%s@%d=%s", c.Family, esc(c.Qualifier), c.Timestamp, esc(c.Value))
		if len(c.Labels) > 0 {
			s += "{" + strings.Join(c.Labels, ",") + "}"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// base is the row most cases read: two families, several columns and
// versions, in Bigtable order.
var base = mkRow("row1",
	"a:x@3000=ax3",
	"a:x@2000=ax2",
	"a:x@1000=ax1",
	"a:y@3000=ay3",
	"a:y@1000=ay1",
	"b:x@2000=bx2",
	"b:z@1000=bz1",
)

const all = "a:x@3000=ax3 a:x@2000=ax2 a:x@1000=ax1 a:y@3000=ay3 a:y@1000=ay1 b:x@2000=bx2 b:z@1000=bz1"

// binary holds bytes a regex must treat one by one: a newline, bytes >=
// 0x80 that are not UTF-8, and a UTF-8 "é" (two bytes).
var binary = mkRow("k\nz",
	"f:nl@1000=a\nb",
	"f:raw@1000=\xff\x00\x80",
	"f:utf8@1000=é",
	"f:\xfe@1000=q",
)

type spec struct {
	name   string
	filter *Filter
	row    *cell.Row // nil means base
	want   string
}

// specs is the behaviour of every filter kind, and of the combinations that
// are easy to get wrong, over base (or the row given).
var specs = []spec{
	// Trivial filters.
	{"nil filter passes all", nil, nil, all},
	{"pass all", PassAll(), nil, all},
	{"block all", BlockAll(), nil, ""},
	{"zero Filter is pass all", &Filter{}, nil, all},

	// Family, qualifier and value regexes are full matches.
	{"family regex", FamilyNameRegex("b"), nil, "b:x@2000=bx2 b:z@1000=bz1"},
	{"family regex class", FamilyNameRegex("[ab]"), nil, all},
	{"qualifier regex is full match", ColumnQualifierRegex("x"), nil, "a:x@3000=ax3 a:x@2000=ax2 a:x@1000=ax1 b:x@2000=bx2"},
	{"qualifier regex no partial match", ColumnQualifierRegex(""), nil, ""},
	{"value regex no prefix match", ValueRegex("ax"), nil, ""},
	{"value regex no suffix match", ValueRegex("x3"), nil, ""},
	{"value regex wildcard", ValueRegex("ax.*"), nil, "a:x@3000=ax3 a:x@2000=ax2 a:x@1000=ax1"},
	{"value regex alternation anchored as a whole", ValueRegex("ax3|ay"), nil, "a:x@3000=ax3"},
	{"value regex user anchors", ValueRegex("^b.1$"), nil, "b:z@1000=bz1"},
	{"value regex case flag", ValueRegex("(?i)BX2"), nil, "b:x@2000=bx2"},

	// Row key regex keeps or drops everything that reaches it.
	{"row key regex match", RowKeyRegex("row1"), nil, all},
	{"row key regex partial", RowKeyRegex("row"), nil, ""},
	{"row key regex wildcard", RowKeyRegex("r.*"), nil, all},
	{"row key regex passes only its input", Chain(FamilyNameRegex("b"), RowKeyRegex("row1")), nil, "b:x@2000=bx2 b:z@1000=bz1"},
	{"row key dot skips newline", RowKeyRegex("k.z"), &binary, ""},
	{"row key \\C matches newline", RowKeyRegex(`k\Cz`), &binary, render(binary)},

	// Raw bytes: one byte is one character.
	{"dot does not match newline", ValueRegex("a.b"), &binary, ""},
	{"\\C matches newline", ValueRegex(`a\Cb`), &binary, "f:nl@1000=a\\nb"},
	{"(?s) dot matches newline", ValueRegex("(?s)a.b"), &binary, "f:nl@1000=a\\nb"},
	{"raw bytes literal", ValueRegex("\xff\x00\x80"), &binary, "f:raw@1000=\\xff\\x00\\x80"},
	{"\\x escapes are bytes", ValueRegex(`\xff\x00.`), &binary, "f:raw@1000=\\xff\\x00\\x80"},
	{"byte class", ValueRegex("[\x80-\xff]\x00[\x80-\xff]"), &binary, "f:raw@1000=\\xff\\x00\\x80"},
	{"three wildcard bytes", ValueRegex(`\C{3}`), &binary, "f:nl@1000=a\\nb f:raw@1000=\\xff\\x00\\x80"},
	{"utf8 is two bytes", ValueRegex(".."), &binary, "f:utf8@1000=\\u00e9"},
	{"utf8 is not one char", ValueRegex("."), &binary, "f:\\xfe@1000=q"},
	{"utf8 literal", ValueRegex("é"), &binary, "f:utf8@1000=\\u00e9"},
	{"\\C in \\Q..\\E is literal", ValueRegex(`\Q\C\E|q`), &binary, "f:\\xfe@1000=q"},
	{"unterminated \\Q quotes to the end", ValueRegex(`\Qa)|(b`), &quoted, "f:q@1=a)|(b"},
	{"binary qualifier", ColumnQualifierRegex("\xfe"), &binary, "f:\\xfe@1000=q"},
	{"binary qualifier escaped", ColumnQualifierRegex(`\xfe`), &binary, "f:\\xfe@1000=q"},
	{"binary qualifier not matched by its UTF-8", ColumnQualifierRegex("þ"), &binary, ""},

	// Column range: family must match; bounds open, closed or unbounded.
	{"column range closed closed", ColumnRange("a", ClosedBound([]byte("x")), ClosedBound([]byte("y"))), nil,
		"a:x@3000=ax3 a:x@2000=ax2 a:x@1000=ax1 a:y@3000=ay3 a:y@1000=ay1"},
	{"column range open start", ColumnRange("a", OpenBound([]byte("x")), ClosedBound([]byte("y"))), nil, "a:y@3000=ay3 a:y@1000=ay1"},
	{"column range open end", ColumnRange("a", ClosedBound([]byte("x")), OpenBound([]byte("y"))), nil, "a:x@3000=ax3 a:x@2000=ax2 a:x@1000=ax1"},
	{"column range open open empty", ColumnRange("a", OpenBound([]byte("x")), OpenBound([]byte("y"))), nil, ""},
	{"column range point", ColumnRange("b", ClosedBound([]byte("z")), ClosedBound([]byte("z"))), nil, "b:z@1000=bz1"},
	{"column range unbounded", ColumnRange("b", Bound{}, Bound{}), nil, "b:x@2000=bx2 b:z@1000=bz1"},
	{"column range unbounded end", ColumnRange("b", OpenBound([]byte("x")), Bound{}), nil, "b:z@1000=bz1"},
	{"column range other family", ColumnRange("c", Bound{}, Bound{}), nil, ""},

	// Timestamp range is [start, end), end 0 unbounded.
	{"timestamp range", TimestampRange(2000, 3000), nil, "a:x@2000=ax2 b:x@2000=bx2"},
	{"timestamp range start inclusive", TimestampRange(3000, 0), nil, "a:x@3000=ax3 a:y@3000=ay3"},
	{"timestamp range end exclusive", TimestampRange(0, 1000), nil, ""},
	{"timestamp range one micro", TimestampRange(1000, 1001), nil, "a:x@1000=ax1 a:y@1000=ay1 b:z@1000=bz1"},
	{"timestamp range all", TimestampRange(0, 0), nil, all},
	{"timestamp range empty", TimestampRange(2000, 2000), nil, ""},

	// Value range compares bytes; an unbounded start is "" inclusive.
	{"value range", ValueRange(ClosedBound([]byte("ax2")), OpenBound([]byte("ay3"))), nil, "a:x@3000=ax3 a:x@2000=ax2 a:y@1000=ay1"},
	{"value range open start", ValueRange(OpenBound([]byte("ax2")), ClosedBound([]byte("ay1"))), nil, "a:x@3000=ax3 a:y@1000=ay1"},
	{"value range unbounded start", ValueRange(Bound{}, OpenBound([]byte("ax2"))), nil, "a:x@1000=ax1"},
	{"value range unbounded end", ValueRange(ClosedBound([]byte("bx")), Bound{}), nil, "b:x@2000=bx2 b:z@1000=bz1"},
	{"value range sees stripped values", Chain(StripValue(), ValueRange(Bound{}, ClosedBound(nil))), nil,
		"a:x@3000= a:x@2000= a:x@1000= a:y@3000= a:y@1000= b:x@2000= b:z@1000="},
	{"value regex sees stripped values", Chain(StripValue(), ValueRegex("ax3")), nil, ""},

	// Value bitmask: same length, every mask bit set.
	// 'y' has every bit of 'x', and '3' every bit of '1'.
	{"value bitmask", ValueBitmask([]byte("ax1")), nil, "a:x@3000=ax3 a:x@1000=ax1 a:y@3000=ay3 a:y@1000=ay1"},
	{"value bitmask length must match", ValueBitmask([]byte{'a'}), nil, ""},

	// Per-row offset and limit count the cells that reach them.
	{"row offset", CellsPerRowOffset(5), nil, "b:x@2000=bx2 b:z@1000=bz1"},
	{"row offset zero", CellsPerRowOffset(0), nil, all},
	{"row offset past end", CellsPerRowOffset(7), nil, ""},
	{"row limit", CellsPerRowLimit(2), nil, "a:x@3000=ax3 a:x@2000=ax2"},
	{"row limit past end", CellsPerRowLimit(100), nil, all},
	{"offset then limit", Chain(CellsPerRowOffset(1), CellsPerRowLimit(2)), nil, "a:x@2000=ax2 a:x@1000=ax1"},
	{"limit then offset", Chain(CellsPerRowLimit(3), CellsPerRowOffset(2)), nil, "a:x@1000=ax1"},
	{"limit of a limit", Chain(CellsPerRowLimit(4), CellsPerRowLimit(2)), nil, "a:x@3000=ax3 a:x@2000=ax2"},

	// Per-column limit restarts at each column, families included.
	{"column limit 1", CellsPerColumnLimit(1), nil, "a:x@3000=ax3 a:y@3000=ay3 b:x@2000=bx2 b:z@1000=bz1"},
	{"column limit 2", CellsPerColumnLimit(2), nil, "a:x@3000=ax3 a:x@2000=ax2 a:y@3000=ay3 a:y@1000=ay1 b:x@2000=bx2 b:z@1000=bz1"},
	{"column limit then row limit", Chain(CellsPerColumnLimit(1), CellsPerRowLimit(3)), nil, "a:x@3000=ax3 a:y@3000=ay3 b:x@2000=bx2"},
	{"row offset then column limit", Chain(CellsPerRowOffset(1), CellsPerColumnLimit(1)), nil, "a:x@2000=ax2 a:y@3000=ay3 b:x@2000=bx2 b:z@1000=bz1"},
	{"filter then column limit", Chain(TimestampRange(0, 3000), CellsPerColumnLimit(1)), nil, "a:x@2000=ax2 a:y@1000=ay1 b:x@2000=bx2 b:z@1000=bz1"},

	// Transformers.
	{"strip value", Chain(FamilyNameRegex("b"), StripValue()), nil, "b:x@2000= b:z@1000="},
	{"label", Chain(FamilyNameRegex("b"), ApplyLabel("lab")), nil, "b:x@2000=bx2{lab} b:z@1000=bz1{lab}"},
	{"second label replaces first", Chain(FamilyNameRegex("b"), ApplyLabel("one"), ApplyLabel("two")), nil, "b:x@2000=bx2{two} b:z@1000=bz1{two}"},
	{"strip keeps label", Chain(ColumnQualifierRegex("z"), ApplyLabel("l"), StripValue()), nil, "b:z@1000={l}"},

	// Chain.
	{"chain narrows", Chain(FamilyNameRegex("a"), ColumnQualifierRegex("y"), CellsPerColumnLimit(1)), nil, "a:y@3000=ay3"},
	{"chain of one", Chain(ColumnQualifierRegex("z")), nil, "b:z@1000=bz1"},
	{"chain with nil member", Chain(nil, ColumnQualifierRegex("z")), nil, "b:z@1000=bz1"},
	{"chain with block", Chain(PassAll(), BlockAll()), nil, ""},

	// Interleave pools outputs in row order and keeps duplicates.
	{"interleave keeps row order", Interleave(FamilyNameRegex("b"), ColumnQualifierRegex("y")), nil, "a:y@3000=ay3 a:y@1000=ay1 b:x@2000=bx2 b:z@1000=bz1"},
	{"interleave duplicates", Interleave(ColumnQualifierRegex("z"), PassAll()), nil,
		"a:x@3000=ax3 a:x@2000=ax2 a:x@1000=ax1 a:y@3000=ay3 a:y@1000=ay1 b:x@2000=bx2 b:z@1000=bz1 b:z@1000=bz1"},
	{"interleave of blocks", Interleave(BlockAll(), BlockAll()), nil, ""},
	{"interleave labels ties in branch order", Interleave(
		Chain(ColumnQualifierRegex("y"), ApplyLabel("l1")),
		Chain(TimestampRange(3000, 0), ApplyLabel("l2")),
	), nil, "a:x@3000=ax3{l2} a:y@3000=ay3{l1} a:y@3000=ay3{l2} a:y@1000=ay1{l1}"},
	{"row limit counts duplicates", Chain(Interleave(PassAll(), PassAll()), CellsPerRowLimit(3)), nil, "a:x@3000=ax3 a:x@3000=ax3 a:x@2000=ax2"},
	{"column limit counts duplicates", Chain(Interleave(PassAll(), PassAll()), CellsPerColumnLimit(1)), nil, "a:x@3000=ax3 a:y@3000=ay3 b:x@2000=bx2 b:z@1000=bz1"},
	{"row offset counts duplicates", Chain(Interleave(ColumnQualifierRegex("z"), ColumnQualifierRegex("z")), CellsPerRowOffset(1)), nil, "b:z@1000=bz1"},

	// Condition runs a branch on its own input; a missing branch is empty.
	{"condition true", Condition(ValueRegex("bz1"), FamilyNameRegex("a"), BlockAll()), nil,
		"a:x@3000=ax3 a:x@2000=ax2 a:x@1000=ax1 a:y@3000=ay3 a:y@1000=ay1"},
	{"condition false", Condition(ValueRegex("nope"), BlockAll(), ColumnQualifierRegex("z")), nil, "b:z@1000=bz1"},
	{"condition missing true branch", Condition(PassAll(), nil, PassAll()), nil, ""},
	{"condition missing false branch", Condition(BlockAll(), PassAll(), nil), nil, ""},
	{"condition nil predicate passes", Condition(nil, ColumnQualifierRegex("z"), nil), nil, "b:z@1000=bz1"},
	{"condition sees chain input only", Chain(FamilyNameRegex("a"), Condition(FamilyNameRegex("b"), PassAll(), StripValue())), nil,
		"a:x@3000= a:x@2000= a:x@1000= a:y@3000= a:y@1000="},
	{"condition predicate labels do not leak", Condition(ApplyLabel("p"), ColumnQualifierRegex("z"), nil), nil, "b:z@1000=bz1"},
	{"condition on a row without cells", Condition(PassAll(), PassAll(), PassAll()), &cell.Row{Key: []byte("e")}, ""},

	// Sink sends what reaches it to the final output, and nothing onward.
	{"sink alone", Sink(), nil, all},
	{"sink ignores later chain members", Chain(ColumnQualifierRegex("z"), Sink(), PassAll()), nil, "b:z@1000=bz1"},
	{"sink escapes a later block", Chain(ColumnQualifierRegex("z"), Sink(), BlockAll()), nil, "b:z@1000=bz1"},
	{"sink in interleave duplicates", Chain(ColumnQualifierRegex("z"), Interleave(Sink(), PassAll())), nil, "b:z@1000=bz1 b:z@1000=bz1"},
	// The example of the RowFilter.sink proto documentation.
	{"sink proto example", Chain(
		FamilyNameRegex("a"),
		Interleave(PassAll(), Chain(ApplyLabel("foo"), Sink())),
		ColumnQualifierRegex("y"),
	), nil, "a:x@3000=ax3{foo} a:x@2000=ax2{foo} a:x@1000=ax1{foo} a:y@3000=ay3{foo} a:y@3000=ay3 a:y@1000=ay1{foo} a:y@1000=ay1"},
	{"sink after limit", Chain(CellsPerRowLimit(1), Sink()), nil, "a:x@3000=ax3"},

	// Labels on input cells pass through unless replaced.
	{"input labels kept", PassAll(), &labeled, "f:q@1=v{in}"},
	{"input labels kept by a filter", ValueRegex("v"), &labeled, "f:q@1=v{in}"},
	{"input labels replaced", ApplyLabel("out"), &labeled, "f:q@1=v{out}"},
}

var quoted = mkRow("k", "f:q@1=a)|(b", "f:r@1=a", "f:s@1=b")

var labeled = cell.Row{Key: []byte("l"), Cells: []cell.Cell{{Family: "f", Qualifier: []byte("q"), Timestamp: 1, Value: []byte("v"), Labels: []string{"in"}}}}

func TestApply(t *testing.T) {
	for _, s := range specs {
		t.Run(s.name, func(t *testing.T) {
			row := base
			if s.row != nil {
				row = *s.row
			}
			before := deepCopy(row)
			p, err := Compile(s.filter, Options{})
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			got := p.Apply(row)
			if g := render(got); g != s.want {
				t.Errorf("got  %s\nwant %s", g, s.want)
			}
			if !reflect.DeepEqual(row, before) {
				t.Errorf("Apply modified its input:\n%s\nwas\n%s", render(row), render(before))
			}
			if string(got.Key) != string(row.Key) {
				t.Errorf("key %q, want %q", got.Key, row.Key)
			}
		})
	}
}

func deepCopy(r cell.Row) cell.Row {
	out := cell.Row{Key: append([]byte(nil), r.Key...)}
	for _, c := range r.Cells {
		c.Qualifier = append([]byte(nil), c.Qualifier...)
		c.Value = append([]byte(nil), c.Value...)
		c.Labels = append([]string(nil), c.Labels...)
		out.Cells = append(out.Cells, c)
	}
	return out
}

func TestApplyOutputDoesNotAliasLabels(t *testing.T) {
	p, err := Compile(Interleave(ApplyLabel("a"), ApplyLabel("b")), Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := p.Apply(mkRow("k", "f:q@1=v"))
	got.Cells[0].Labels[0] = "changed"
	if g := render(got); g != "f:q@1=v{changed} f:q@1=v{b}" {
		t.Errorf("got %s", g)
	}
}

func TestNilProgram(t *testing.T) {
	p, err := Compile(nil, Options{})
	if err != nil || p != nil {
		t.Fatalf("Compile(nil) = %v, %v; want nil, nil", p, err)
	}
	if g := render(p.Apply(base)); g != all {
		t.Errorf("nil Program: got %s", g)
	}
}

func TestRowSample(t *testing.T) {
	draws := []float64{0.2, 0.7, 0.49999, 0.5}
	var n int
	rnd := func() float64 { n++; return draws[n-1] }
	p, err := Compile(RowSample(0.5), Options{Rand: rnd})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{all, "", all, ""} {
		if g := render(p.Apply(base)); g != want {
			t.Errorf("draw %v: got %q, want %q", draws[i], g, want)
		}
	}
	if n != 4 {
		t.Errorf("Rand called %d times, want 4", n)
	}

	// Each RowSample in an Interleave draws on its own.
	n = 0
	draws = []float64{0.9, 0.1}
	p, err = Compile(Interleave(Chain(RowSample(0.5), ApplyLabel("one")), Chain(RowSample(0.5), ApplyLabel("two"))), Options{Rand: rnd})
	if err != nil {
		t.Fatal(err)
	}
	if g := render(p.Apply(mkRow("k", "f:q@1=v"))); g != "f:q@1=v{two}" {
		t.Errorf("interleaved samples: got %s", g)
	}

	// An empty input draws nothing.
	n = 0
	draws = nil
	p, _ = Compile(Chain(BlockAll(), RowSample(0.5)), Options{Rand: rnd})
	p.Apply(base)

	// The default source works and is roughly fair.
	p, err = Compile(RowSample(0.5), Options{})
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for range 1000 {
		if len(p.Apply(base).Cells) > 0 {
			kept++
		}
	}
	if kept < 350 || kept > 650 {
		t.Errorf("default Rand kept %d of 1000 rows at p=0.5", kept)
	}
}

func nest(depth int) *Filter {
	f := ColumnQualifierRegex("z")
	for range depth {
		f = Chain(f, PassAll())
	}
	return f
}

func TestCompileErrors(t *testing.T) {
	cases := []struct {
		name   string
		filter *Filter
		want   string // prefix of the error message
	}{
		{"bad family regex", FamilyNameRegex("["), `filter: invalid family_name_regex_filter "[": missing closing ]`},
		{"family regex with colon", FamilyNameRegex("a:b"), `filter: invalid family_name_regex_filter "a:b": must not contain ':'`},
		{"bad qualifier regex", ColumnQualifierRegex("a(b"), `filter: invalid column_qualifier_regex_filter "a(b": missing closing )`},
		{"bad value regex", ValueRegex("*"), `filter: invalid value_regex_filter "*": missing argument to repetition operator`},
		{"unbalanced regex is not rescued by anchoring", ValueRegex("a)|(b"), `filter: invalid value_regex_filter "a)|(b": unexpected )`},
		{"trailing backslash", ValueRegex(`a\`), `filter: invalid value_regex_filter "a\\": trailing backslash`},
		{"\\C in a class", ValueRegex(`[\C]`), `filter: invalid value_regex_filter "[\\C]": invalid escape sequence`},
		{"repeat too large", ValueRegex(`a{1001}`), `filter: invalid value_regex_filter "a{1001}": invalid repeat count`},
		{"empty row key regex", RowKeyRegex(""), `filter: invalid row_key_regex_filter: must not be empty`},
		{"bad row key regex", RowKeyRegex("("), `filter: invalid row_key_regex_filter "(": missing closing )`},
		{"sample zero", RowSample(0), `filter: invalid row_sample_filter 0:`},
		{"sample one", RowSample(1), `filter: invalid row_sample_filter 1:`},
		{"sample negative", RowSample(-0.5), `filter: invalid row_sample_filter -0.5:`},
		{"sample NaN", RowSample(math.NaN()), `filter: invalid row_sample_filter NaN:`},
		{"negative offset", CellsPerRowOffset(-1), `filter: invalid cells_per_row_offset_filter -1:`},
		{"zero row limit", CellsPerRowLimit(0), `filter: invalid cells_per_row_limit_filter 0:`},
		{"negative row limit", CellsPerRowLimit(-3), `filter: invalid cells_per_row_limit_filter -3:`},
		{"zero column limit", CellsPerColumnLimit(0), `filter: invalid cells_per_column_limit_filter 0:`},
		{"huge column limit", CellsPerColumnLimit(1 << 40), `filter: invalid cells_per_column_limit_filter 1099511627776:`},
		{"negative timestamp", TimestampRange(-1, 0), `filter: invalid timestamp_range_filter [-1, 0): timestamps must not be negative`},
		{"timestamp end before start", TimestampRange(3000, 2000), `filter: invalid timestamp_range_filter [3000, 2000): end before start`},
		{"column range without family", ColumnRange("", Bound{}, Bound{}), `filter: invalid column_range_filter: family_name must not be empty`},
		{"column range inverted", ColumnRange("a", ClosedBound([]byte("y")), OpenBound([]byte("x"))), `filter: invalid column_range_filter: start "y" after end "x"`},
		{"value range inverted", ValueRange(OpenBound([]byte("b")), ClosedBound([]byte("a"))), `filter: invalid value_range_filter: start "b" after end "a"`},
		{"bad bound kind", ValueRange(Bound{Kind: 9}, Bound{}), `filter: invalid value_range_filter: unknown bound kind 9`},
		{"empty label", ApplyLabel(""), `filter: invalid apply_label_transformer "":`},
		{"upper-case label", ApplyLabel("Lab"), `filter: invalid apply_label_transformer "Lab":`},
		{"long label", ApplyLabel("sixteen-chars-xx"), `filter: invalid apply_label_transformer "sixteen-chars-xx":`},
		{"empty mask", ValueBitmask(nil), `filter: invalid value_bitmask_filter: mask must not be empty`},
		{"empty chain", Chain(), `filter: invalid chain: must contain at least one filter`},
		{"empty interleave", Interleave(), `filter: invalid interleave: must contain at least one filter`},
		{"sink in predicate", Condition(Sink(), nil, nil), `filter: invalid sink: not allowed inside a condition`},
		{"sink deep in branch", Condition(nil, Chain(PassAll(), Interleave(Sink(), PassAll())), nil), `filter: invalid sink: not allowed inside a condition`},
		{"sink in false branch", Condition(nil, nil, Sink()), `filter: invalid sink: not allowed inside a condition`},
		{"error deep in a tree", Chain(PassAll(), Interleave(PassAll(), Condition(nil, ValueRegex("["), nil))), `filter: invalid value_regex_filter "["`},
		{"too deep", nest(MaxDepth + 1), `filter: invalid chain: filters nested deeper than 20`},
		{"too deep condition", func() *Filter {
			f := nest(MaxDepth)
			return Condition(f, nil, nil)
		}(), `filter: invalid chain: filters nested deeper than 20`},
		{"unknown kind", &Filter{Kind: 200}, `filter: invalid filter kind 200: unknown`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Compile(c.filter, Options{})
			if err == nil {
				t.Fatalf("Compile succeeded (%v), want error %q", p, c.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("error %q\nwant prefix %q", err, c.want)
			}
		})
	}
}

// TestCompileLimits checks the values just inside each limit compile.
func TestCompileLimits(t *testing.T) {
	for _, f := range []*Filter{
		nest(MaxDepth),
		ApplyLabel("fifteen-chars-x"),
		ApplyLabel("0-9"),
		RowSample(math.Nextafter(0, 1)),
		RowSample(math.Nextafter(1, 0)),
		CellsPerRowLimit(1<<31 - 1),
		CellsPerColumnLimit(1),
		CellsPerRowOffset(0),
		ColumnRange("a", OpenBound([]byte("x")), OpenBound([]byte("x"))),
		ValueRange(ClosedBound([]byte("x")), Bound{}),
		TimestampRange(5, 5),
		TimestampRange(5, 0),
		FamilyNameRegex(""),
		ValueRegex(`\x{100}`),
	} {
		if _, err := Compile(f, Options{}); err != nil {
			t.Errorf("Compile(%+v): %v", *f, err)
		}
	}
}

func TestKindString(t *testing.T) {
	if g := KindCellsPerColumnLimit.String(); g != "cells_per_column_limit_filter" {
		t.Errorf("got %q", g)
	}
	if g := Kind(250).String(); g != "unknown filter kind" {
		t.Errorf("got %q", g)
	}
}

func TestConcurrentApply(t *testing.T) {
	p, err := Compile(Interleave(
		Chain(FamilyNameRegex("a"), ColumnQualifierRegex("x|\xfe"), ApplyLabel("l")),
		Chain(ValueRegex("b\\C+"), StripValue()),
	), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := render(p.Apply(base))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if g := render(p.Apply(base)); g != want {
					t.Errorf("got %s, want %s", g, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
