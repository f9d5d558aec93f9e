package server

import (
	"fmt"
	"testing"

	"github.com/ebbtable/ebbtable/table"
)

func TestSubtractSpans(t *testing.T) {
	sp := func(s, e string) table.RowRange {
		r := table.RowRange{Start: []byte(s)}
		if e != "" {
			r.End = []byte(e)
		}
		return r
	}
	str := func(rs []table.RowRange) string {
		out := ""
		for _, r := range rs {
			out += fmt.Sprintf("[%s,%s)", r.Start, r.End)
		}
		return out
	}
	for _, c := range []struct {
		a, b []table.RowRange
		want string
	}{
		{[]table.RowRange{sp("", "")}, []table.RowRange{sp("g", "p")}, "[,g)[p,)"},
		{[]table.RowRange{sp("", "")}, []table.RowRange{sp("", "")}, ""},
		{[]table.RowRange{sp("", "g")}, []table.RowRange{sp("p", "")}, "[,g)"},
		{[]table.RowRange{sp("a", "k")}, []table.RowRange{sp("", "c"), sp("e", "f")}, "[c,e)[f,k)"},
		{[]table.RowRange{sp("a", "c"), sp("p", "")}, []table.RowRange{sp("b", "q")}, "[a,b)[q,)"},
		{nil, []table.RowRange{sp("b", "q")}, ""},
		{[]table.RowRange{sp("g", "p")}, nil, "[g,p)"},
	} {
		if got := str(subtractSpans(c.a, c.b)); got != c.want {
			t.Errorf("%s minus %s: %s, want %s", str(c.a), str(c.b), got, c.want)
		}
	}
	// Tablets of one node, joined where they meet.
	spans := appendSpan(appendSpan(appendSpan(nil, nil, []byte("g")), []byte("g"), []byte("p")), []byte("t"), nil)
	if got := str(spans); got != "[,p)[t,)" {
		t.Errorf("joined spans: %s", got)
	}
	if !spansCover(spans, []byte("a")) || spansCover(spans, []byte("q")) || !spansCover(spans, []byte("zz")) {
		t.Errorf("spansCover of %s wrong", str(spans))
	}
	if !spansOverlap(spans, []byte("o"), []byte("s")) || spansOverlap(spans, []byte("p"), []byte("t")) {
		t.Errorf("spansOverlap of %s wrong", str(spans))
	}
}

func TestOutGroup(t *testing.T) {
	for _, key := range []string{"", "a", "a\x00b", "\x00", "x\x00\x01"} {
		for _, gid := range []string{"", "g1", "\x00\x01"} {
			k := outKey([]byte(key), []byte(gid))
			if g := outGroup(k); string(g) != gid || g == nil {
				t.Errorf("outGroup(outKey(%q, %q)) = %q", key, gid, g)
			}
		}
	}
}
