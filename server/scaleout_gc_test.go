package server

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/metadata"
)

// gcMoveSetup starts three nodes on one shifted clock with the collector
// running every interval (real time), creates table t (splits g and p;
// family a with a max age of 1h, family f without a rule) and writes rows
// h..o, all in tablet [g,p), through a node that owns neither side of
// the move to come: per row a max-age cell a:old (timestamp now: expires
// in 1h), a native-TTL cell f:ttl (90m) and a cell f:keep that never
// expires. Half go to the shared levels (flush and compaction on the
// owner), half stay in the owner's memtable, so the move ships both kinds.
// prepare runs before the move; then the tablet moves, and the source
// must hold none of its cells, the target all of them.
func gcMoveSetup(t *testing.T, interval time.Duration, prepare func(src, dst *scaleNode)) (sc *scaleCluster, clk *clock.Shifted, src, dst *scaleNode, rows []string) {
	t.Helper()
	clk = clock.NewShifted(time.Now())
	sc = startScaleClusterTuned(t, 0, func(o *Options) {
		o.Clock = clk
		o.GC = collector.Options{Interval: interval}
	}, "n1", "n2", "n3")
	ctx := context.Background()
	err := sc.nodes["n1"].admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: []string{"g", "p"},
		ColumnFamilies: map[string]bigtable.Family{"a": {GCPolicy: bigtable.MaxAgePolicy(time.Hour)}, "f": {}}})
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	var tab *clusterpb.Tablet
	for _, tb := range tabs.Tablets {
		if string(tb.Start) == "g" {
			tab = tb
		}
	}
	if tab == nil {
		t.Fatalf("no tablet starts at g: %v", tabs.Tablets)
	}
	from := tab.Owner
	to := "n1"
	if from == "n1" {
		to = "n3"
	}
	src, dst = sc.nodes[from], sc.nodes[to]

	var via *scaleNode
	for _, id := range []string{"n1", "n2", "n3"} {
		if id != from && id != to {
			via = sc.nodes[id]
		}
	}
	tbl := via.client.Open("t")
	rows = strings.Split("hijklmno", "")
	ttlCtx := metadata.AppendToOutgoingContext(ctx, "x-ebbtable-cell-ttl", "90m")
	write := func(r string) {
		ts := bigtable.Time(clk.Now())
		m := bigtable.NewMutation()
		m.Set("a", "old", ts, []byte("old-"+r))
		m.Set("f", "keep", ts, []byte("keep-"+r))
		if err := tbl.Apply(ctx, r, m); err != nil {
			t.Fatalf("write %s: %v", r, err)
		}
		m = bigtable.NewMutation()
		m.Set("f", "ttl", ts, []byte("ttl-"+r))
		if err := tbl.Apply(ttlCtx, r, m); err != nil {
			t.Fatalf("write %s with a ttl: %v", r, err)
		}
	}
	for _, r := range rows[:4] {
		write(r)
	}
	if err := src.srv.Engine().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := src.srv.Engine().Compact(ctx, []byte{0}, []byte{0xff, 0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows[4:] {
		write(r)
	}
	all := "a:old f:keep f:ttl"
	wantEverywhere(t, sc, rows, all)
	if prepare != nil {
		prepare(src, dst)
	}

	res, err := via.ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tab.Id, To: to})
	if err != nil {
		t.Fatalf("move %s → %s: %v", from, to, err)
	}
	t.Logf("moved [g,p) %s → %s: %+v", from, to, res)
	if got := rawCells(t, src); got != "" {
		t.Fatalf("source %s still holds cells after the move: %s", from, got)
	}
	if got, want := rawCells(t, dst), countCells(rows, all); got != want {
		t.Fatalf("target %s holds %s, want %s", to, got, want)
	}
	return sc, clk, src, dst, rows
}

// TestScaleOutGCAfterMove: cells that expire in a moved tablet (a
// family's max age, and native cell TTLs written through the official
// client) are hidden through every node the moment they expire, and the
// new owner's first GC pass after their expiry collects them (so within
// one interval of the collector's cadence, inside the two promised); the
// source keeps neither the span's cells nor GC debt or agenda entries for
// it.
//
// The nodes share a clock.Shifted: the real clock moved forward by the
// test (leases, renewals and timers run in real time, so the cluster
// stays live), and the background collector's interval is an hour, so
// the passes are the ones the test runs through EbbAdmin/GcRun.
func TestScaleOutGCAfterMove(t *testing.T) {
	t.Parallel()
	// A pass on both sides before the move: their collectors now know the
	// table, so their next passes would be incremental (the target's is
	// not: an ingest makes it sweep the table whole once).
	sc, clk, src, dst, rows := gcMoveSetup(t, time.Hour, func(src, dst *scaleNode) {
		for _, n := range []*scaleNode{src, dst} {
			if got := gcRun(t, n); got.Collected != 0 {
				t.Fatalf("pass on %s before expiry collected %d cells", n.id, got.Collected)
			}
		}
	})
	ctx := context.Background()
	from, to := src.id, dst.id
	const all = "a:old f:keep f:ttl"
	wantEverywhere(t, sc, rows, all)
	// The target's first pass after the ingest sweeps the table whole,
	// before anything expired: the pass that must collect is the
	// incremental one after it.
	if got := gcRun(t, dst); got.Collected != 0 {
		t.Fatalf("pass on %s before expiry collected %d cells", to, got.Collected)
	}

	// The max age passes: a:old is hidden at once through every node,
	// and the target's next pass collects it.
	clk.Advance(61 * time.Minute)
	wantEverywhere(t, sc, rows, "f:keep f:ttl")
	if got := gcRun(t, dst); got.Collected != int64(len(rows)) {
		t.Errorf("first pass on %s after the max age collected %d cells, want %d", to, got.Collected, len(rows))
	}
	if got, want := rawCells(t, dst), countCells(rows, "f:keep f:ttl"); got != want {
		t.Fatalf("after one pass %s holds %s, want %s", to, got, want)
	}

	// The native TTL passes: f:ttl likewise.
	clk.Advance(30 * time.Minute)
	wantEverywhere(t, sc, rows, "f:keep")
	if got := gcRun(t, dst); got.Collected != int64(len(rows)) {
		t.Errorf("first pass on %s after the TTL collected %d cells, want %d", to, got.Collected, len(rows))
	}
	if got, want := rawCells(t, dst), countCells(rows, "f:keep"); got != want {
		t.Fatalf("after one pass %s holds %s, want %s", to, got, want)
	}

	// Nothing is owed anywhere: the target collected everything, the
	// source holds no debt, no agenda entries and no cells for the span.
	for _, n := range []*scaleNode{src, dst} {
		m := tableMeta(t, n)
		d, err := n.srv.collector.DebtOf(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if d.Cells != 0 {
			t.Errorf("%s owes %d cells of GC debt", n.id, d.Cells)
		}
		due, later, err := n.srv.Engine().AgendaCounts(m, clock.Micros(clk.Now()), 1000)
		if err != nil {
			t.Fatal(err)
		}
		if due+later != 0 {
			t.Errorf("%s keeps %d due and %d later agenda entries", n.id, due, later)
		}
	}
	if got := gcRun(t, src); got.Collected != 0 {
		t.Errorf("pass on the source %s collected %d cells", from, got.Collected)
	}
	if got := rawCells(t, src); got != "" {
		t.Errorf("source %s holds cells: %s", from, got)
	}
}

func tableMeta(t *testing.T, n *scaleNode) *table.Meta {
	t.Helper()
	m, err := n.srv.Engine().Table("projects/"+testProject+"/instances/"+testInstance, "t")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// gcRun runs a GC pass over table t on a node through EbbAdmin/GcRun.
func gcRun(t *testing.T, n *scaleNode) *ebbadminpb.GcRunResponse {
	t.Helper()
	res, err := ebbadminpb.NewEbbAdminClient(n.conn).GcRun(context.Background(), &ebbadminpb.GcRunRequest{Project: testProject, Instance: testInstance, Table: "t"})
	if err != nil {
		t.Fatalf("GcRun on %s: %v", n.id, err)
	}
	return res
}

// rawCells counts the cells a node's engine physically stores for table t,
// by family:qualifier ("a:old=8 f:keep=8"), expired ones included.
func rawCells(t *testing.T, n *scaleNode) string {
	t.Helper()
	counts := map[string]int{}
	if err := n.srv.Engine().RawCells(tableMeta(t, n), nil, nil, func(c table.RawCell) error {
		counts[c.Family+":"+string(c.Qualifier)]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return formatCounts(counts)
}

func countCells(rows []string, cols string) string {
	counts := map[string]int{}
	for _, c := range strings.Fields(cols) {
		counts[c] = len(rows)
	}
	return formatCounts(counts)
}

func formatCounts(counts map[string]int) string {
	var out []string
	for k, v := range counts {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// wantEverywhere reads the table through every node and wants exactly the
// columns cols ("a:old f:keep") in each of rows. The nodes' lease fences
// drop for a moment when the shared clock jumps (until the next renewal),
// so a read that fails is tried again until a deadline.
func wantEverywhere(t *testing.T, sc *scaleCluster, rows []string, cols string) {
	t.Helper()
	want := map[string]string{}
	for _, r := range rows {
		want[r] = cols
	}
	ids := make([]string, 0, len(sc.nodes))
	for id := range sc.nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		n := sc.nodes[id]
		var got map[string]string
		var rerr error
		if !testkit.Poll(10*time.Second, func() bool {
			got, rerr = map[string]string{}, nil
			rerr = n.client.Open("t").ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
				var cs []string
				for _, its := range r {
					for _, it := range its {
						cs = append(cs, it.Column)
					}
				}
				sort.Strings(cs)
				got[r.Key()] = strings.Join(cs, " ")
				return true
			})
			return rerr == nil
		}) {
			t.Fatalf("read through %s: %v", id, rerr)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("read through %s: %v, want %v", id, got, want)
		}
	}
}

// TestScaleOutGCAfterMoveBackground: the same with the collectors' own
// loops running every 200ms (real time) and no pass run by hand: after
// both expiries pass at once, the new owner collects every expired cell of
// the moved tablet within two of its passes that started after the expiry
// (counted by ebbtable_gc_table_passes_total; one pass under way at the
// jump may count too, hence three).
func TestScaleOutGCAfterMoveBackground(t *testing.T) {
	t.Parallel()
	const interval = 200 * time.Millisecond
	sc, clk, src, dst, rows := gcMoveSetup(t, interval, nil)
	before := gcTablePasses(t, dst)
	clk.Advance(2 * time.Hour)
	want := countCells(rows, "f:keep")
	var passes float64
	testkit.Eventually(t, "the target to collect the expired cells", 20*time.Second, func() (bool, string) {
		passes = gcTablePasses(t, dst) - before
		got := rawCells(t, dst)
		return got == want, fmt.Sprintf("%s holds %s", dst.id, got)
	})
	t.Logf("collected on %s within %v passes of its collector after the expiry", dst.id, passes)
	if passes > 3 {
		t.Errorf("the target collected the expired cells after %v passes, want at most 3", passes)
	}
	wantEverywhere(t, sc, rows, "f:keep")
	if got := rawCells(t, src); got != "" {
		t.Errorf("source %s holds cells: %s", src.id, got)
	}
}

// gcTablePasses sums a node's ebbtable_gc_table_passes_total (one table
// here, so its passes).
func gcTablePasses(t *testing.T, n *scaleNode) float64 {
	t.Helper()
	mfs, err := n.srv.opts.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "ebbtable_gc_table_passes_total" {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
