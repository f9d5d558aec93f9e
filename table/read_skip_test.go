package table_test

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/filter"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/table"
)

const skipInst = "projects/p/instances/i"

// openSkipTable opens an engine with table t of the given families (name
// to rule).
func openSkipTable(tb testing.TB, fams map[string]string) (*table.Engine, *clock.Fake) {
	tb.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	eng, err := table.Open(table.Options{Dir: tb.TempDir(), Clock: clk})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { eng.Close() })
	var spec table.TableSpec
	for name, rule := range fams {
		spec.Families = append(spec.Families, table.FamilySpec{Name: name, GC: gcrule.MustParse(rule)})
	}
	if _, err := eng.CreateTable(skipInst, "t", spec); err != nil {
		tb.Fatal(err)
	}
	return eng, clk
}

// writeVersions writes n versions of row/fam:q, timestamps newest-1ms*i,
// values "v<i>", in batches.
func writeVersions(tb testing.TB, eng *table.Engine, row, fam, q string, newest int64, n int) {
	tb.Helper()
	for i := 0; i < n; {
		var muts []table.Mutation
		for ; i < n && len(muts) < 20_000; i++ {
			muts = append(muts, table.Mutation{Kind: table.SetCell, Family: fam, Qualifier: []byte(q), Timestamp: newest - int64(i)*1000, Value: []byte(fmt.Sprintf("v%d", i))})
		}
		if err := eng.MutateRow(skipInst, "t", []byte(row), muts); err != nil {
			tb.Fatal(err)
		}
	}
}

func set(fam, q string, ts int64, v string) table.Mutation {
	return table.Mutation{Kind: table.SetCell, Family: fam, Qualifier: []byte(q), Timestamp: ts, Value: []byte(v)}
}

// readStats reads req and returns the cells, rendered, and what it examined.
func readStats(tb testing.TB, eng *table.Engine, req table.ReadRequest) ([]string, table.ReadStats) {
	tb.Helper()
	var st table.ReadStats
	req.Stats = &st
	var got []string
	err := eng.ReadRows(context.Background(), skipInst, "t", req, func(r cell.Row) error {
		for _, c := range r.Cells {
			got = append(got, fmt.Sprintf("%s/%s:%s@%d=%s", r.Key, c.Family, c.Qualifier, c.Timestamp, c.Value))
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return got, st
}

func compile(tb testing.TB, f *filter.Filter) *filter.Program {
	p, err := filter.Compile(f, filter.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// TestReadSkipsHiddenVersions: a point read of a maxversions=1 column with
// thousands of hidden versions steps on a handful of keys, in the memtable
// and after a flush, and lands on the columns after it.
func TestReadSkipsHiddenVersions(t *testing.T) {
	for _, steps := range []int{0, 3} {
		t.Run(fmt.Sprintf("steps=%d", steps), func(t *testing.T) {
			defer table.SetSkipSteps(table.SetSkipSteps(steps))
			eng, clk := openSkipTable(t, map[string]string{"one": "maxversions=1", "keep": "never"})
			now := clock.MillisTruncated(clk.Now())
			writeVersions(t, eng, "r", "one", "a", now, 5000)
			writeVersions(t, eng, "r", "one", "b", now, 3)
			if err := eng.MutateRow(skipInst, "t", []byte("r"), []table.Mutation{set("keep", "z", now, "k")}); err != nil {
				t.Fatal(err)
			}
			want := []string{"r/keep:z@" + fmt.Sprint(now) + "=k", "r/one:a@" + fmt.Sprint(now) + "=v0", "r/one:b@" + fmt.Sprint(now) + "=v0"}
			for _, flushed := range []bool{false, true} {
				if flushed {
					if err := eng.Flush(); err != nil {
						t.Fatal(err)
					}
				}
				got, st := readStats(t, eng, table.ReadRequest{Keys: [][]byte{[]byte("r")}})
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("flushed=%v: read %v, want %v", flushed, got, want)
				}
				// keep:z, one:a and one:b returned, plus at most the steps
				// over each hidden tail before its seek.
				if max := int64(3 + 2*steps); st.CellsSeen > max || st.CellsReturned != 3 {
					t.Errorf("flushed=%v: %+v, want at most %d cells seen", flushed, st, max)
				}
				// Reversed, a column of many versions is judged forward
				// from its newest once a few of its oldest were met.
				got, st = readStats(t, eng, table.ReadRequest{Keys: [][]byte{[]byte("r")}, Reversed: true})
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("flushed=%v reversed: read %v, want %v", flushed, got, want)
				}
				if max := int64(3 * (3*steps + 3)); st.CellsSeen > max {
					t.Errorf("flushed=%v reversed: %+v, want at most %d cells seen", flushed, st, max)
				}
			}
		})
	}
}

// TestReadSkipsAgedVersions: under maxage, the versions past the cutoff are
// skipped once the first is met (they are newest first), and under a union
// either term ends the column.
func TestReadSkipsAgedVersions(t *testing.T) {
	defer table.SetSkipSteps(table.SetSkipSteps(0))
	eng, clk := openSkipTable(t, map[string]string{"age": "maxage=1h", "or": "maxage=1h or maxversions=2", "and": "maxage=1h and maxversions=2"})
	now := clock.MillisTruncated(clk.Now())
	hour := time.Hour.Microseconds()
	for _, fam := range []string{"age", "or", "and"} {
		var muts []table.Mutation
		for i := int64(0); i < 2000; i++ {
			// Four young versions, then old ones a minute apart.
			ts := now - i*1000
			if i >= 4 {
				ts = now - hour - i*60_000_000
			}
			muts = append(muts, set(fam, "q", ts, fmt.Sprint(i)))
		}
		if err := eng.MutateRow(skipInst, "t", []byte("r"), muts); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		fam      string
		returned int64
	}{{"age", 4}, {"or", 2}, {"and", 4}} {
		p := compile(t, filter.FamilyNameRegex(c.fam))
		_, st := readStats(t, eng, table.ReadRequest{Keys: [][]byte{[]byte("r")}, Filter: p})
		if st.CellsReturned != c.returned || st.CellsSeen > 3*5 {
			t.Errorf("%s: %+v, want %d returned and a handful seen", c.fam, st, c.returned)
		}
	}
}

// pushdownVersions is the length of TestReadColumnLimitPushdown's long
// column: any length far above the cells the cases may see (at most 39)
// shows a limit that is not pushed down; 100,000 is the long run's.
var pushdownVersions = flag.Int("pushdown.versions", 5_000, "TestReadColumnLimitPushdown: versions of the long column")

// TestReadColumnLimitPushdown: CellsPerColumnLimit(1) on a column of
// thousands of versions (-pushdown.versions) under a never rule reads a
// handful of cells, and so do the other heads of a filter (filter.Head)
// where they can end a column or row; where they cannot, the answer is
// still right.
func TestReadColumnLimitPushdown(t *testing.T) {
	t.Parallel()
	eng, clk := openSkipTable(t, map[string]string{"cf": "never", "other": "never"})
	now := clock.MillisTruncated(clk.Now())
	writeVersions(t, eng, "r", "cf", "q", now, *pushdownVersions)
	writeVersions(t, eng, "r", "cf", "q2", now, 10)
	writeVersions(t, eng, "r", "other", "q", now, 10)
	n := fmt.Sprint(now)
	cases := []struct {
		name    string
		f       *filter.Filter
		want    []string
		maxSeen int64
	}{
		{"col(1)", filter.CellsPerColumnLimit(1), []string{"r/cf:q@" + n + "=v0", "r/cf:q2@" + n + "=v0", "r/other:q@" + n + "=v0"}, 12},
		{"chain(col(2),strip)", filter.Chain(filter.CellsPerColumnLimit(2), filter.StripValue()),
			[]string{"r/cf:q@" + n + "=", "r/cf:q@" + fmt.Sprint(now-1000) + "=", "r/cf:q2@" + n + "=", "r/cf:q2@" + fmt.Sprint(now-1000) + "=", "r/other:q@" + n + "=", "r/other:q@" + fmt.Sprint(now-1000) + "="}, 15},
		{"row(2)", filter.CellsPerRowLimit(2), []string{"r/cf:q@" + n + "=v0", "r/cf:q@" + fmt.Sprint(now-1000) + "=v1"}, 2},
		{"chain(col(1),row(2))", filter.Chain(filter.CellsPerColumnLimit(1), filter.CellsPerRowLimit(2)), []string{"r/cf:q@" + n + "=v0", "r/cf:q2@" + n + "=v0"}, 12},
		// The row limit counts every version on its way to the column
		// limit: the column is walked until the row limit is full.
		{"chain(row(3),col(1))", filter.Chain(filter.CellsPerRowLimit(3), filter.CellsPerColumnLimit(1)), []string{"r/cf:q@" + n + "=v0"}, 3},
		// The family filter skips the cf columns unread (their first key,
		// and the steps before a seek, are seen).
		{"chain(family,col(1))", filter.Chain(filter.FamilyNameRegex("other"), filter.CellsPerColumnLimit(1)), []string{"r/other:q@" + n + "=v0"}, 12},
		// A row limit before the qualifier test counts every cell that
		// reaches it: cf:q's versions are judged until it is full.
		{"chain(row(2),qualifier,col(1))", filter.Chain(filter.CellsPerRowLimit(2), filter.ColumnQualifierRegex("q2"), filter.CellsPerColumnLimit(1)), nil, 3},
		// Versions older than a timestamp: the newer ones are judged, the
		// first older one kept, the column then ended by the limit.
		{"chain(ts<now-5ms,col(1))", filter.Chain(filter.TimestampRange(0, now-5000), filter.CellsPerColumnLimit(1)),
			[]string{"r/cf:q@" + fmt.Sprint(now-6000) + "=v6", "r/cf:q2@" + fmt.Sprint(now-6000) + "=v6", "r/other:q@" + fmt.Sprint(now-6000) + "=v6"}, 3 * (7 + 3)},
		// A value test drops cells one by one: the limit after it cannot
		// end the column before a cell passes.
		{"chain(value=v9.*,col(1))", filter.Chain(filter.ValueRegex("v9.*"), filter.CellsPerColumnLimit(1)),
			[]string{"r/cf:q@" + fmt.Sprint(now-9000) + "=v9", "r/cf:q2@" + fmt.Sprint(now-9000) + "=v9", "r/other:q@" + fmt.Sprint(now-9000) + "=v9"}, 3 * (10 + 3)},
	}
	for _, c := range cases {
		got, st := readStats(t, eng, table.ReadRequest{Keys: [][]byte{[]byte("r")}, Filter: compile(t, c.f)})
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: read %v, want %v", c.name, got, c.want)
		}
		if st.CellsSeen > c.maxSeen {
			t.Errorf("%s: %+v, want at most %d cells seen", c.name, st, c.maxSeen)
		}
		t.Logf("%s: %+v", c.name, st)
	}
	// The reversed read is not pushed down and returns the same.
	got, _ := readStats(t, eng, table.ReadRequest{Keys: [][]byte{[]byte("r")}, Filter: compile(t, filter.CellsPerColumnLimit(1)), Reversed: true})
	if len(got) != 3 {
		t.Errorf("reversed col(1): %v", got)
	}
}
