package filter_test

// The runner for the data-driven filter specs in testdata/*.txt: a small
// reader of blocks, rows written the way render prints them, and an
// evaluator of filter expressions written as calls of this package's
// constructors (Chain(FamilyNameRegex("a"), CellsPerColumnLimit(1))).

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/ebbtable/ebbtable/cell"
	. "github.com/ebbtable/ebbtable/filter"
)

// specCase is one block of a spec file: a name line, then "key: value"
// lines up to a blank line.
type specCase struct {
	name, at string
	fields   map[string]string
}

// readSpec parses the blocks of a spec file. Lines starting with # are
// comments. A "define row NAME: ..." line outside a block defines a row
// the blocks may name; readSpec returns those separately.
func readSpec(t *testing.T, path string) (cases []specCase, rows map[string]cell.Row) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rows = map[string]cell.Row{}
	var cur *specCase
	for i, line := range strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n") {
		at := fmt.Sprintf("%s:%d", path, i+1)
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.TrimSpace(line) == "" {
			cur = nil
			continue
		}
		if cur == nil {
			if def, ok := strings.CutPrefix(line, "define row "); ok {
				name, spec, ok := strings.Cut(def, ":")
				if !ok {
					t.Fatalf("%s: want \"define row NAME: KEY CELLS\"", at)
				}
				rows[strings.TrimSpace(name)] = parseRow(t, at, spec)
				continue
			}
			cases = append(cases, specCase{name: strings.TrimSpace(line), at: at, fields: map[string]string{}})
			cur = &cases[len(cases)-1]
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("%s: want \"key: value\" in the block %q, got %q", at, cur.name, line)
		}
		if _, dup := cur.fields[key]; dup {
			t.Fatalf("%s: %s: given twice", at, key)
		}
		cur.fields[key] = strings.TrimSpace(val)
	}
	return cases, rows
}

// parseRow reads a row: its key as a Go string literal, then its cells in
// render's format ("(none)" for no cells).
func parseRow(t *testing.T, at, spec string) cell.Row {
	t.Helper()
	spec = strings.TrimSpace(spec)
	q, err := strconv.QuotedPrefix(spec)
	if err != nil {
		t.Fatalf("%s: a row starts with its key as a Go string literal: %v", at, err)
	}
	key, _ := strconv.Unquote(q)
	r := parseCells(t, at, spec[len(q):])
	r.Key = []byte(key)
	return r
}

// parseCells reads cells as render writes them:
// family:qualifier@timestamp=value{label}, with Go escapes in qualifier
// and value, separated by spaces; "(none)" or nothing is no cells.
func parseCells(t *testing.T, at, s string) cell.Row {
	t.Helper()
	var r cell.Row
	s = strings.TrimSpace(s)
	if s == "(none)" {
		return r
	}
	unesc := func(s string) []byte {
		u, err := strconv.Unquote(`"` + s + `"`)
		if err != nil {
			t.Fatalf("%s: %q: %v", at, s, err)
		}
		return []byte(u)
	}
	for _, f := range strings.Fields(s) {
		var labels []string
		if strings.HasSuffix(f, "}") {
			open := strings.LastIndex(f, "{")
			if open < 0 {
				t.Fatalf("%s: cell %q: unbalanced label braces", at, f)
			}
			labels = strings.Split(f[open+1:len(f)-1], ",")
			f = f[:open]
		}
		fam, rest, ok := strings.Cut(f, ":")
		atSign := strings.LastIndex(rest, "@")
		eq := strings.Index(rest[max(atSign, 0):], "=")
		if !ok || atSign < 0 || eq < 0 {
			t.Fatalf("%s: cell %q: want family:qualifier@timestamp=value", at, f)
		}
		eq += atSign
		ts, err := strconv.ParseInt(rest[atSign+1:eq], 10, 64)
		if err != nil {
			t.Fatalf("%s: cell %q: %v", at, f, err)
		}
		r.Cells = append(r.Cells, cell.Cell{Family: fam, Qualifier: unesc(rest[:atSign]), Timestamp: ts,
			Value: unesc(rest[eq+1:]), Labels: labels})
	}
	return r
}

// parseFilter evaluates a filter expression: calls of this package's
// constructors with Go literal arguments. Bytes are written as strings;
// bounds as Closed("x"), Open("x") or Unbounded; nil is the nil filter
// (or a nil mask); NaN() is a NaN; nest(n) is n chains around
// ColumnQualifierRegex("z"); Kind(n) is a filter of kind n and nothing
// else; BoundKind(n) is a bound of kind n.
func parseFilter(t *testing.T, at, src string) *Filter {
	t.Helper()
	e, err := parser.ParseExpr(src)
	if err != nil {
		t.Fatalf("%s: filter %q: %v", at, src, err)
	}
	ev := &evaluator{t: t, at: at}
	return ev.filter(e)
}

type evaluator struct {
	t  *testing.T
	at string
}

func (ev *evaluator) fail(n ast.Node, format string, args ...any) {
	ev.t.Helper()
	ev.t.Fatalf("%s: column %d: %s", ev.at, n.Pos(), fmt.Sprintf(format, args...))
}

func (ev *evaluator) filter(e ast.Expr) *Filter {
	ev.t.Helper()
	if id, ok := e.(*ast.Ident); ok && id.Name == "nil" {
		return nil
	}
	call, ok := e.(*ast.CallExpr)
	if !ok {
		ev.fail(e, "want a filter call, got %T", e)
	}
	fn, ok := call.Fun.(*ast.Ident)
	if !ok {
		ev.fail(e, "want a constructor name")
	}
	args := call.Args
	want := func(n int) {
		ev.t.Helper()
		if len(args) != n {
			ev.fail(call, "%s takes %d arguments, got %d", fn.Name, n, len(args))
		}
	}
	filters := func() []*Filter {
		var fs []*Filter
		for _, a := range args {
			fs = append(fs, ev.filter(a))
		}
		return fs
	}
	switch fn.Name {
	case "PassAll", "BlockAll", "Sink", "StripValue":
		want(0)
		return map[string]func() *Filter{"PassAll": PassAll, "BlockAll": BlockAll, "Sink": Sink, "StripValue": StripValue}[fn.Name]()
	case "Chain":
		return Chain(filters()...)
	case "Interleave":
		return Interleave(filters()...)
	case "Condition":
		want(3)
		fs := filters()
		return Condition(fs[0], fs[1], fs[2])
	case "RowKeyRegex", "FamilyNameRegex", "ColumnQualifierRegex", "ValueRegex", "ApplyLabel":
		want(1)
		s := ev.str(args[0])
		return map[string]func(string) *Filter{"RowKeyRegex": RowKeyRegex, "FamilyNameRegex": FamilyNameRegex,
			"ColumnQualifierRegex": ColumnQualifierRegex, "ValueRegex": ValueRegex, "ApplyLabel": ApplyLabel}[fn.Name](s)
	case "RowSample":
		want(1)
		return RowSample(ev.float(args[0]))
	case "ColumnRange":
		want(3)
		return ColumnRange(ev.str(args[0]), ev.bound(args[1]), ev.bound(args[2]))
	case "ValueRange":
		want(2)
		return ValueRange(ev.bound(args[0]), ev.bound(args[1]))
	case "TimestampRange":
		want(2)
		return TimestampRange(ev.int(args[0]), ev.int(args[1]))
	case "CellsPerRowOffset", "CellsPerRowLimit", "CellsPerColumnLimit":
		want(1)
		n := ev.int(args[0])
		return map[string]func(int64) *Filter{"CellsPerRowOffset": CellsPerRowOffset, "CellsPerRowLimit": CellsPerRowLimit,
			"CellsPerColumnLimit": CellsPerColumnLimit}[fn.Name](n)
	case "ValueBitmask":
		want(1)
		if id, ok := args[0].(*ast.Ident); ok && id.Name == "nil" {
			return ValueBitmask(nil)
		}
		return ValueBitmask([]byte(ev.str(args[0])))
	case "nest":
		want(1)
		return nest(int(ev.int(args[0])))
	case "Kind":
		want(1)
		return &Filter{Kind: Kind(ev.int(args[0]))}
	}
	ev.fail(call, "unknown filter constructor %s", fn.Name)
	return nil
}

func (ev *evaluator) bound(e ast.Expr) Bound {
	ev.t.Helper()
	if id, ok := e.(*ast.Ident); ok && id.Name == "Unbounded" {
		return Bound{}
	}
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 {
		ev.fail(e, "want a bound: Closed(\"x\"), Open(\"x\"), Unbounded or BoundKind(n)")
	}
	switch call.Fun.(*ast.Ident).Name {
	case "Closed":
		return ClosedBound([]byte(ev.str(call.Args[0])))
	case "Open":
		return OpenBound([]byte(ev.str(call.Args[0])))
	case "BoundKind":
		return Bound{Kind: BoundKind(ev.int(call.Args[0]))}
	}
	ev.fail(e, "unknown bound")
	return Bound{}
}

func (ev *evaluator) str(e ast.Expr) string {
	ev.t.Helper()
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		ev.fail(e, "want a string literal")
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		ev.fail(e, "%v", err)
	}
	return s
}

func (ev *evaluator) int(e ast.Expr) int64 {
	ev.t.Helper()
	neg := false
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.SUB {
		neg, e = true, u.X
	}
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.INT {
		ev.fail(e, "want an integer literal")
	}
	n, err := strconv.ParseInt(lit.Value, 0, 64)
	if err != nil {
		ev.fail(e, "%v", err)
	}
	if neg {
		n = -n
	}
	return n
}

func (ev *evaluator) float(e ast.Expr) float64 {
	ev.t.Helper()
	if c, ok := e.(*ast.CallExpr); ok {
		if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "NaN" && len(c.Args) == 0 {
			return math.NaN()
		}
	}
	neg := false
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.SUB {
		neg, e = true, u.X
	}
	lit, ok := e.(*ast.BasicLit)
	if !ok || (lit.Kind != token.FLOAT && lit.Kind != token.INT) {
		ev.fail(e, "want a number literal")
	}
	f, err := strconv.ParseFloat(lit.Value, 64)
	if err != nil {
		ev.fail(e, "%v", err)
	}
	if neg {
		f = -f
	}
	return f
}

// TestApply is the behaviour of every filter kind as examples, read from
// testdata/apply.txt (its head says the format): each filter applied to
// its row gives the cells wanted, and leaves the row as it was.
func TestApply(t *testing.T) {
	cases, rows := readSpec(t, "testdata/apply.txt")
	if len(cases) < 100 {
		t.Fatalf("only %d cases read from the spec", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := c.fields["row"]
			if name == "" {
				name = "base"
			}
			row, ok := rows[name]
			if !ok {
				t.Fatalf("%s: no row %q defined", c.at, name)
			}
			want, ok := c.fields["want"]
			if !ok {
				t.Fatalf("%s: no want:", c.at)
			}
			// The wanted cells go through the reader and render, so the
			// file may write them either way render could.
			want = render(parseCells(t, c.at, want))
			before := deepCopy(row)
			p, err := Compile(parseFilter(t, c.at, c.fields["filter"]), Options{})
			if err != nil {
				t.Fatalf("%s: Compile: %v", c.at, err)
			}
			got := p.Apply(row)
			if g := render(got); g != want {
				t.Errorf("%s:\ngot  %s\nwant %s", c.at, g, want)
			}
			if !reflect.DeepEqual(row, before) {
				t.Errorf("%s: Apply modified its input:\n%s\nwas\n%s", c.at, render(row), render(before))
			}
			if string(got.Key) != string(row.Key) {
				t.Errorf("%s: key %q, want %q", c.at, got.Key, row.Key)
			}
		})
	}
}

// TestCompile is what Compile refuses, and the limits it accepts, read
// from testdata/compile.txt.
func TestCompile(t *testing.T) {
	cases, _ := readSpec(t, "testdata/compile.txt")
	if len(cases) < 50 {
		t.Fatalf("only %d cases read from the spec", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, ok := c.fields["error"]
			if !ok {
				t.Fatalf("%s: no error:", c.at)
			}
			p, err := Compile(parseFilter(t, c.at, c.fields["filter"]), Options{})
			switch {
			case want == "(none)":
				if err != nil {
					t.Errorf("%s: Compile: %v", c.at, err)
				}
			case err == nil:
				t.Errorf("%s: Compile succeeded (%v), want error %q", c.at, p, want)
			default:
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("%s: error %v does not wrap ErrInvalid", c.at, err)
				}
				if !strings.HasPrefix(err.Error(), want) {
					t.Errorf("%s: error %q\nwant prefix %q", c.at, err, want)
				}
			}
		})
	}
}

// TestSpecRoundTrip checks the spec reader against the Go rows: a row
// written as render prints it reads back as itself.
func TestSpecRoundTrip(t *testing.T) {
	_, rows := readSpec(t, "testdata/apply.txt")
	for _, r := range rows {
		got := parseCells(t, "round trip", render(r))
		got.Key = r.Key
		if render(got) != render(r) || len(got.Cells) != len(r.Cells) {
			t.Errorf("round trip of %s: got %s", render(r), render(got))
		}
	}
}
