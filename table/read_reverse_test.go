package table_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/table"
)

// TestReadReversedHidesLikeForward: a reversed read returns a row's cells
// exactly as a forward read does, whichever way it judges a column under a
// rule: whole at the row's end (Engine.visible: columns of up to 3 × the
// skip steps versions), or forward from its newest version (columnForward:
// longer ones). A lone version past a max-age rule is hidden both ways.
func TestReadReversedHidesLikeForward(t *testing.T) {
	eng, clk := openSkipTable(t, map[string]string{
		"age": "maxage=1h", "or": "maxage=2h or maxversions=3", "and": "maxage=1h and maxversions=1",
		"vers": "maxversions=2", "keep": "never",
	})
	now := clock.MillisTruncated(clk.Now())
	hour := time.Hour.Microseconds()
	var muts []table.Mutation
	for _, fam := range []string{"age", "or", "and", "vers", "keep"} {
		// A lone version three hours old: past the age of age and or.
		muts = append(muts, set(fam, "lone", now-3*hour, "old"))
		// Columns of 5 and 30 versions ten minutes apart, some past their
		// own expiry, some with one still ahead.
		for _, c := range []struct {
			q string
			n int
		}{{"short", 5}, {"long", 30}} {
			for i := range c.n {
				m := set(fam, c.q, now-int64(i)*10*time.Minute.Microseconds(), fmt.Sprint(i))
				switch {
				case i%4 == 1:
					m.ExpireAt = now - 1
				case i%7 == 2:
					m.ExpireAt = now + hour
				}
				muts = append(muts, m)
			}
		}
	}
	if err := eng.MutateRow(skipInst, "t", []byte("r"), muts); err != nil {
		t.Fatal(err)
	}
	for _, steps := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("steps=%d", steps), func(t *testing.T) {
			defer table.SetSkipSteps(table.SetSkipSteps(steps))
			fwd, _ := readStats(t, eng, table.ReadRequest{Keys: [][]byte{[]byte("r")}})
			lone := func(fam string) bool {
				return slices.ContainsFunc(fwd, func(s string) bool { return strings.HasPrefix(s, "r/"+fam+":lone@") })
			}
			if lone("age") || lone("or") || !lone("and") || !lone("vers") || !lone("keep") {
				t.Fatalf("forward read: want the lone versions of and, vers and keep, not those of age and or: %q", fwd)
			}
			rev, _ := readStats(t, eng, table.ReadRequest{Keys: [][]byte{[]byte("r")}, Reversed: true})
			if !slices.Equal(rev, fwd) {
				only := func(a, b []string) []string {
					return slices.DeleteFunc(slices.Clone(a), func(s string) bool { return slices.Contains(b, s) })
				}
				t.Errorf("reversed read differs from the forward read: only forward %q, only reversed %q (%d and %d cells)",
					only(fwd, rev), only(rev, fwd), len(fwd), len(rev))
			}
		})
	}
}
