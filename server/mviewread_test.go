package server

import (
	"fmt"
	"testing"

	"github.com/ebbtable/ebbtable/table"
)

func TestReadSpans(t *testing.T) {
	b := func(s string) []byte { return []byte(s) }
	format := func(rs []table.RowRange) string {
		out := ""
		for _, r := range rs {
			end := "∞"
			if r.End != nil {
				end = fmt.Sprintf("%q", r.End)
			}
			out += fmt.Sprintf("[%q,%s)", r.Start, end)
		}
		return out
	}
	for _, c := range []struct {
		keys   [][]byte
		ranges []table.RowRange
		want   string
	}{
		{nil, nil, ""},
		{[][]byte{b("b"), b("a")}, nil, `["a","a\x00")["b","b\x00")`},
		{[][]byte{b("b")}, []table.RowRange{{Start: b("a"), End: b("c")}}, `["a","c")`},
		{nil, []table.RowRange{{Start: b("a"), StartOpen: true, End: b("c"), EndClosed: true}}, `["a\x00","c\x00")`},
		{nil, []table.RowRange{{Start: b("c"), End: b("d")}, {Start: b("a")}}, `["a",∞)`},
		{nil, []table.RowRange{{Start: b("c"), End: b("c")}}, `["","")`},
	} {
		if got := format(readSpans(c.keys, c.ranges)); got != c.want {
			t.Errorf("readSpans(%q, %v) = %s, want %s", c.keys, c.ranges, got, c.want)
		}
	}
}
