package server

import (
	"context"
	"fmt"
	"testing"

	"cloud.google.com/go/bigtable"
)

// TestReadCostFollowsWhatIsReturned: through the official client, a point
// read of a maxversions=1 column holding 2,000 not-yet-collected versions,
// and a LatestNFilter(1) read of a column of 2,000 versions under no GC
// rule, each examine a handful of cells (the request stats' cells seen).
// (It wrote 20,000 until session 15: a read that walks the versions it
// skips sees hundreds of times the bound either way.)
func TestReadCostFollowsWhatIsReturned(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"one": bigtable.MaxVersionsPolicy(1), "all": nil})
	ctx := context.Background()
	const versions = 2_000
	for _, fam := range []string{"one", "all"} {
		m := bigtable.NewMutation()
		for v := 1; v <= versions; v++ {
			m.Set(fam, "q", bigtable.Timestamp(v*1000), []byte(fmt.Sprint(v)))
		}
		if err := tbl.Apply(ctx, "r-"+fam, m); err != nil {
			t.Fatal(err)
		}
	}
	if n := storedCells(t, env, "t"); n != 2*versions {
		t.Fatalf("%d cells stored, want %d (nothing collected yet)", n, 2*versions)
	}
	cases := []struct {
		row    string
		filter bigtable.Filter
	}{
		{"r-one", nil},
		{"r-all", bigtable.LatestNFilter(1)},
		{"r-all", bigtable.ChainFilters(bigtable.LatestNFilter(1), bigtable.StripValueFilter())},
	}
	for _, c := range cases {
		var stats *bigtable.FullReadStats
		opts := []bigtable.ReadOption{bigtable.WithFullReadStats(func(s *bigtable.FullReadStats) { stats = s })}
		if c.filter != nil {
			opts = append(opts, bigtable.RowFilter(c.filter))
		}
		var got []bigtable.ReadItem
		err := tbl.ReadRows(ctx, bigtable.SingleRow(c.row), func(r bigtable.Row) bool {
			for _, items := range r {
				got = append(got, items...)
			}
			return true
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Timestamp != versions*1000 {
			t.Fatalf("%s %v: read %v, want only the newest version", c.row, c.filter, got)
		}
		if stats == nil {
			t.Fatalf("%s %v: no read stats", c.row, c.filter)
		}
		if s := stats.ReadIterationStats; s.CellsReturnedCount != 1 || s.CellsSeenCount > 5 {
			t.Errorf("%s %v: %+v, want 1 cell returned and at most 5 seen", c.row, c.filter, s)
		}
	}
}
