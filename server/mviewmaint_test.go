package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/rowttl"
	"github.com/ebbtable/ebbtable/sqlquery"
)

// TestMaterializedViewMaintained checks, after writes, an overwrite that
// moves a row between groups, deletions, and cells leaving by native TTL,
// a max-age rule and the row deletion policy (then a GC pass, then
// DropRowRange), that the
// maintained view equals the view computed from scratch, and that reading
// it with nothing changed reads no base row.
func TestMaterializedViewMaintained(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	inst := "projects/" + testProject + "/instances/" + testInstance
	// No change stream: the engine logs changed rows for the view anyway.
	conf := &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{
		"f": {GCPolicy: bigtable.MaxAgePolicy(time.Hour)}, "ts": {}}}
	if err := env.admin.CreateTableFromConf(ctx, conf); err != nil {
		t.Fatal(err)
	}
	if _, err := rowttl.Exec(env.srv.engine, inst, "ALTER TABLE t ADD ROW DELETION POLICY (OLDER_THAN(`ts:at`, INTERVAL 1 DAY))"); err != nil {
		t.Fatal(err)
	}
	tbl := env.client.Open("t")
	const query = "SELECT f['g'] AS _key, COUNT(f['v']) AS n, MAX(f['v']) AS mx, MIN(f['v']) AS mn FROM t GROUP BY f['g']"
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv", Query: query}); err != nil {
		t.Fatal(err)
	}
	put := func(c context.Context, row, g, v string, age time.Duration) {
		t.Helper()
		m := bigtable.NewMutation()
		ts := bigtable.Time(env.clock.Now().Add(-age))
		m.Set("f", "g", ts, []byte(g))
		m.Set("f", "v", ts, []byte(v))
		if err := tbl.Apply(c, row, m); err != nil {
			t.Fatal(err)
		}
	}
	cat := env.srv.catalog(inst)
	plan, err := sqlquery.Prepare(cat, query, nil)
	if err != nil {
		t.Fatal(err)
	}
	format := func(vals []sqlquery.Value) string {
		str := func(v sqlquery.Value) string {
			if b, ok := v.([]byte); ok {
				return string(b)
			}
			return fmt.Sprint(v)
		}
		return fmt.Sprintf("%s:%s/%s/%s", str(vals[0]), str(vals[1]), str(vals[2]), str(vals[3]))
	}
	maintained := func() []string {
		t.Helper()
		var got []string
		ok, err := env.srv.maintainedRows(ctx, inst, "mv", nil, func(v []sqlquery.Value) error {
			got = append(got, format(v))
			return nil
		})
		if err != nil || !ok {
			t.Fatalf("maintainedRows: %v, %v", ok, err)
		}
		slices.Sort(got)
		return got
	}
	check := func(step string, want ...string) {
		t.Helper()
		var scratch []string
		if err := plan.Run(ctx, cat, nil, env.clock.Now(), func(v []sqlquery.Value) error {
			if v[0] != nil {
				scratch = append(scratch, format(v))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(scratch)
		got := maintained()
		if strings.Join(got, " ") != strings.Join(scratch, " ") {
			t.Errorf("%s: maintained %q, from scratch %q", step, got, scratch)
		}
		if strings.Join(scratch, " ") != strings.Join(want, " ") {
			t.Errorf("%s: from scratch %q, want %q", step, scratch, want)
		}
		// Read again with nothing changed: no base row is read.
		before := env.srv.mviews.baseRows.Load()
		maintained()
		if n := env.srv.mviews.baseRows.Load() - before; n != 0 {
			t.Errorf("%s: an idle read of the view read %d base rows", step, n)
		}
	}
	check("empty")
	put(ctx, "r1", "a", "1", 0)
	put(ctx, "r2", "a", "5", 0)
	put(ctx, "r3", "b", "7", 0)
	put(ctx, "r4", "b", "2", 30*time.Minute) // ages out of f's 1h rule 31 minutes on
	check("writes", "a:2/5/1", "b:2/7/2")

	// One write re-reads that row and its group, not the table.
	before := env.srv.mviews.baseRows.Load()
	put(ctx, "r2", "b", "9", 0) // moves from group a to b
	check("move", "a:1/1/1", "b:3/9/2")
	if n := env.srv.mviews.baseRows.Load() - before; n == 0 || n > 20 {
		t.Errorf("one write: the view read %d base rows (cells and rows), want a few", n)
	}
	if err := tbl.Apply(ctx, "r3", func() *bigtable.Mutation { m := bigtable.NewMutation(); m.DeleteRow(); return m }()); err != nil {
		t.Fatal(err)
	}
	check("row deleted", "a:1/1/1", "b:2/9/2")
	if err := tbl.Apply(ctx, "r2", func() *bigtable.Mutation { m := bigtable.NewMutation(); m.DeleteCellsInColumn("f", "v"); return m }()); err != nil {
		t.Fatal(err)
	}
	check("cell deleted", "a:1/1/1", "b:1/2/2")

	put(withTTL(ctx, "10m"), "r5", "c", "3", 0) // native TTL
	m := bigtable.NewMutation()                 // r6 falls to the row deletion policy 20 minutes on
	at := make([]byte, 8)
	binary.BigEndian.PutUint64(at, uint64(clock.Micros(env.clock.Now().Add(-24*time.Hour+20*time.Minute))))
	m.Set("ts", "at", bigtable.Time(env.clock.Now()), at)
	m.Set("f", "g", bigtable.Time(env.clock.Now()), []byte("a"))
	m.Set("f", "v", bigtable.Time(env.clock.Now()), []byte("8"))
	if err := tbl.Apply(ctx, "r6", m); err != nil {
		t.Fatal(err)
	}
	check("ttl and policy rows", "a:2/8/1", "b:1/2/2", "c:1/3/3")
	env.clock.Advance(11 * time.Minute)
	check("native TTL passed", "a:2/8/1", "b:1/2/2")
	env.clock.Advance(10 * time.Minute)
	check("row deletion policy passed", "a:1/1/1", "b:1/2/2")
	if _, err := env.srv.ttl.Run(ctx, rowttl.Selector{}); err != nil { // deletes r6
		t.Fatal(err)
	}
	check("the row deletion policy's pass", "a:1/1/1", "b:1/2/2")
	env.clock.Advance(10 * time.Minute)
	check("max age passed", "a:1/1/1", "b:0/<nil>/<nil>")
	if _, err := env.srv.collector.RunPass(ctx, collector.Selector{}); err != nil {
		t.Fatal(err)
	}
	check("after a GC pass", "a:1/1/1", "b:0/<nil>/<nil>")
	// A read naming rows gets only those rows of the maintained view.
	for _, tc := range []struct {
		rs   bigtable.RowSet
		want string
	}{{bigtable.RowList{"a"}, "a"}, {bigtable.NewRange("b", ""), "b"}, {bigtable.RowList{"zz"}, ""}} {
		var got []string
		if err := env.client.OpenMaterializedView("mv").ReadRows(ctx, tc.rs, func(r bigtable.Row) bool {
			got = append(got, r.Key())
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("ReadRows(%v) on the view: %q, want %q", tc.rs, got, tc.want)
		}
	}
	if err := env.admin.DropRowRange(ctx, "t", "r1"); err != nil {
		t.Fatal(err)
	}
	check("after DropRowRange", "b:0/<nil>/<nil>")

	// The Data API serves the maintained rows.
	var keys []string
	if err := env.client.OpenMaterializedView("mv").ReadRows(ctx, bigtable.RowRange{}, func(r bigtable.Row) bool {
		keys = append(keys, r.Key())
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != "b" {
		t.Errorf("ReadRows on the view: %q, want b", keys)
	}
}
