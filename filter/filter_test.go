package filter_test

import (
	"fmt"
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
