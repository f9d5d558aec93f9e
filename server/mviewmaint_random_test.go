package server

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/sqlquery"
	"github.com/ebbtable/ebbtable/table"
)

// maintQueries are views over table t (families f, with a max-age rule,
// and k) whose maintained state the random test compares with the query
// run from scratch: every aggregate, DISTINCT, WHERE, a float sum, a
// global group and a group per row.
var maintQueries = map[string]string{
	"sums": "SELECT f['g'] AS _key, COUNT(*) AS c, COUNT(f['v']) AS n, SUM(TO_INT64(f['v'])) AS s, AVG(TO_INT64(f['v'])) AS a, " +
		"MIN(f['v']) AS mn, MAX(TO_INT64(f['v'])) AS mx, COUNT(DISTINCT f['v']) AS d, SUM(DISTINCT TO_INT64(f['v'])) AS sd FROM t GROUP BY f['g']",
	"lists": "SELECT f['g'] AS _key, ARRAY_AGG(_key) AS ks, STRING_AGG(CAST(_key AS STRING), '|') AS js, " +
		"LOGICAL_AND(TO_INT64(f['v']) > 5) AS la, LOGICAL_OR(TO_INT64(f['v']) > 15) AS lo, BIT_AND(TO_INT64(f['v'])) AS ba, " +
		"BIT_OR(TO_INT64(f['v'])) AS bo, BIT_XOR(TO_INT64(f['v'])) AS bx, COUNTIF(TO_INT64(f['v']) > 10) AS ci " +
		"FROM t WHERE f['v'] IS NOT NULL GROUP BY f['g']",
	"floats": "SELECT k['h'] AS _key, SUM(CAST(TO_INT64(f['v']) AS FLOAT64) / 4) AS fs, AVG(CAST(TO_INT64(f['v']) AS FLOAT64) / 4) AS fa, MIN(f['g']) AS g FROM t GROUP BY k['h']",
	"global": "SELECT b'all' AS _key, COUNT(*) AS n, MAX(_key) AS last, COUNT(f['v']) AS nv FROM t",
	"rows":   "SELECT _key, COUNT(f['v']) AS n, MAX(k['h']) AS h FROM t GROUP BY _key",
}

// mviewAllSeeds runs TestMaterializedViewRandom's every seed (about 5 s
// each under the race detector); by default one per visibility mode.
var mviewAllSeeds = flag.Bool("mview.seeds", false, "TestMaterializedViewRandom: run every seed, not only the first")

// mviewSteps is how many random steps each run of
// TestMaterializedViewRandom takes (each checks every view about one step
// in three, and after the last); -mview.steps=300 is the default before
// session 14, 120 before session 15.
var mviewSteps = flag.Int("mview.steps", 60, "TestMaterializedViewRandom: random steps per seed")

// TestMaterializedViewRandom writes, overwrites and deletes rows through
// the official client, with cells that expire by native TTL and by the
// family's max age, runs the collector and drops row ranges, at random,
// and after each step compares every view's maintained rows with its query
// run from scratch; in both visibility modes. Then it restarts the server
// and checks that the views read the same without reading the table.
func TestMaterializedViewRandom(t *testing.T) {
	t.Parallel()
	seeds := []uint64{7, 11, 23}
	if !*mviewAllSeeds {
		seeds = seeds[:1]
	}
	for _, vis := range []table.Visibility{table.HideEligible, table.UntilCollected} {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("visibility=%v/seed=%d", vis, seed), func(t *testing.T) {
				t.Parallel()
				testMaintRandom(t, vis, seed)
			})
		}
	}
}

func testMaintRandom(t *testing.T, vis table.Visibility, seed uint64) {
	// The collector and the row policy's job run only when the test says:
	// a pass between reading the view and computing it would differ.
	quiet := func(o *Options) { o.GC.Interval, o.TTL.Interval = 1000*time.Hour, 1000*time.Hour }
	// DISTINCT, the list and logical aggregates and a view without GROUP BY
	// are beyond Cloud Bigtable's rules; their maintenance stays tested.
	env := newTestEnv(t, withVisibility(vis), quiet, withAnyViewQuery)
	ctx := context.Background()
	inst := "projects/" + testProject + "/instances/" + testInstance
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.MaxAgePolicy(time.Hour), "k": nil})
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	names := make([]string, 0, len(maintQueries))
	for name, q := range maintQueries {
		if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: name, Query: q}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if env.srv.planMaint(inst, name, maintQueries[name]) == nil {
			t.Fatalf("view %s is not maintained", name)
		}
	}
	maintained := func(name string) []string {
		t.Helper()
		var got []string
		ok, err := env.srv.maintainedRows(ctx, inst, name, nil, func(v []sqlquery.Value) error {
			got = append(got, sqlquery.Format(sqlquery.Array(v)))
			return nil
		})
		if err != nil || !ok {
			t.Fatalf("%s: maintainedRows: %v, %v", name, ok, err)
		}
		return got
	}
	scratch := func(name string) []string {
		t.Helper()
		cat := env.srv.catalog(inst)
		plan, err := sqlquery.Prepare(cat, maintQueries[name], nil)
		if err != nil {
			t.Fatal(err)
		}
		var rows [][]sqlquery.Value
		if err := plan.Run(ctx, cat, nil, env.clock.Now(), func(v []sqlquery.Value) error {
			if v[0] != nil {
				rows = append(rows, v)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		slices.SortStableFunc(rows, func(a, b []sqlquery.Value) int { return strings.Compare(string(a[0].([]byte)), string(b[0].([]byte))) })
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = sqlquery.Format(sqlquery.Array(r))
		}
		return out
	}
	check := func(step string) {
		t.Helper()
		for _, name := range names {
			got, want := maintained(name), scratch(name)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("%s, view %s:\nmaintained:\n  %s\nfrom scratch:\n  %s", step, name, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		}
	}
	rng := rand.New(rand.NewPCG(seed, uint64(vis)))
	row := func() string { return fmt.Sprintf("r%02d", rng.IntN(30)) }
	val := func() []byte { return binary.BigEndian.AppendUint64(nil, uint64(rng.IntN(20))) }
	check("empty")
	steps := *mviewSteps
	for step := 0; step < steps; step++ {
		var desc string
		m := bigtable.NewMutation()
		c := ctx
		r := row()
		ts := bigtable.Time(env.clock.Now())
		switch op := rng.IntN(12); {
		case op < 5:
			desc = "write " + r
			m.Set("f", "g", ts, []byte(fmt.Sprint("g", rng.IntN(4))))
			m.Set("f", "v", ts, val())
			m.Set("k", "h", ts, []byte(fmt.Sprint("h", rng.IntN(3))))
		case op == 5:
			desc = "write old " + r
			m.Set("f", "v", bigtable.Time(env.clock.Now().Add(-time.Duration(rng.IntN(60))*time.Minute)), val())
		case op == 6:
			desc = "write with TTL " + r
			c = withTTL(ctx, fmt.Sprintf("%dm", 1+rng.IntN(20)))
			m.Set("f", "g", ts, []byte(fmt.Sprint("g", rng.IntN(4))))
			m.Set("f", "v", ts, val())
		case op == 7:
			desc = "delete row " + r
			m.DeleteRow()
		case op == 8:
			desc = "delete column " + r
			m.DeleteCellsInColumn("f", "v")
		case op == 9:
			desc = "advance the clock"
			env.clock.Advance(time.Duration(1+rng.IntN(15)) * time.Minute)
			m = nil
		case op == 10:
			desc = "collect"
			if _, err := env.srv.collector.RunPass(ctx, collector.Selector{}); err != nil {
				t.Fatal(err)
			}
			m = nil
		default:
			if rng.IntN(4) == 0 {
				desc = "drop rows r1…"
				if err := env.admin.DropRowRange(ctx, "t", "r1"); err != nil {
					t.Fatal(err)
				}
				m = nil
				break
			}
			desc = "write group only " + r
			m.Set("f", "g", ts, []byte(fmt.Sprint("g", rng.IntN(4))))
		}
		if m != nil {
			if err := tbl.Apply(c, r, m); err != nil {
				t.Fatalf("%s: %v", desc, err)
			}
		}
		if rng.IntN(3) == 0 || step == steps-1 {
			check(fmt.Sprintf("step %d (%s)", step, desc))
		}
	}

	// A restart keeps the state: the views read the same, reading no base row.
	want := map[string][]string{}
	for _, name := range names {
		want[name] = maintained(name)
	}
	env.srv.Close()
	env.client.Close()
	env.admin.Close()
	o := Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: env.dir, Clock: env.clock, Visibility: vis}
	quiet(&o)
	env.start(t, o)
	for _, name := range names {
		if got := maintained(name); strings.Join(got, "\n") != strings.Join(want[name], "\n") {
			t.Errorf("after a restart, view %s: %q, want %q", name, got, want[name])
		}
	}
	if n := env.srv.mviews.baseRows.Load(); n != 0 {
		t.Errorf("after a restart, reading the views read %d base rows, want 0", n)
	}
	// Writes after the restart are maintained as before.
	m := bigtable.NewMutation()
	m.Set("f", "g", bigtable.Time(env.clock.Now()), []byte("g9"))
	m.Set("f", "v", bigtable.Time(env.clock.Now()), val())
	if err := env.client.Open("t").Apply(ctx, "r99", m); err != nil {
		t.Fatal(err)
	}
	check("a write after the restart")
	env.clock.Advance(2 * time.Hour) // every f cell ages out
	check("all aged out after the restart")
}
