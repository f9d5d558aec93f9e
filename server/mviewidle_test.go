package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/sqlquery"
	"github.com/ebbtable/ebbtable/table"
)

// TestMaterializedViewIdleRounds checks that a read of a maintained view
// with nothing changed since the last round runs no round (maintIdle), and
// that every read that needs one still runs it: after a write, after a
// cell's max age passes with no write, and after the state's header was
// dropped outside maintainTable (viewsBeforeIngest), which rebuilds it.
func TestMaterializedViewIdleRounds(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	inst := "projects/" + testProject + "/instances/" + testInstance
	conf := &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{
		"f": {GCPolicy: bigtable.MaxAgePolicy(time.Hour)}}}
	if err := env.admin.CreateTableFromConf(ctx, conf); err != nil {
		t.Fatal(err)
	}
	tbl := env.client.Open("t")
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv",
		Query: "SELECT f['g'] AS _key, COUNT(f['g']) AS n FROM t GROUP BY f['g']"}); err != nil {
		t.Fatal(err)
	}
	put := func(row, g string, age time.Duration) {
		t.Helper()
		m := bigtable.NewMutation()
		m.Set("f", "g", bigtable.Time(env.clock.Now().Add(-age)), []byte(g))
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	v := &env.srv.mviews
	check := func(step, want string) {
		t.Helper()
		var got []string
		ok, err := env.srv.maintainedRows(ctx, inst, "mv", nil, func(vals []sqlquery.Value) error {
			got = append(got, fmt.Sprintf("%s:%v", vals[0], vals[1]))
			return nil
		})
		if err != nil || !ok {
			t.Fatalf("%s: maintainedRows: %v, %v", step, ok, err)
		}
		slices.Sort(got)
		if g := strings.Join(got, " "); g != want {
			t.Errorf("%s: the view is %q, want %q", step, g, want)
		}
	}
	put("r1", "a", 0)
	put("r2", "a", 0)
	put("r3", "b", 30*time.Minute) // ages out of f's 1h rule 31 minutes on
	check("writes", "a:2 b:1")

	// Idle reads run no round (the background maintainer's neither).
	rounds, idle := v.rounds.Load(), v.idleRounds.Load()
	for range 5 {
		check("an idle read", "a:2 b:1")
	}
	if n := v.rounds.Load() - rounds; n != 0 {
		t.Errorf("5 idle reads ran %d maintenance rounds, want none", n)
	}
	if n := v.idleRounds.Load() - idle; n < 5 {
		t.Errorf("5 idle reads skipped %d rounds, want 5 or more", n)
	}

	// A write: the next read runs a round and sees it.
	put("r4", "b", 0)
	check("a write after idle reads", "a:2 b:2")

	// Time alone: r3's cell passes its max age, nothing is written.
	check("idle again", "a:2 b:2")
	env.clock.Advance(31 * time.Minute)
	check("max age passed", "a:2 b:1")

	// The header dropped outside maintainTable: the next read rebuilds.
	check("idle again", "a:2 b:1")
	if err := env.srv.viewsBeforeIngest(inst, "t", nil, nil); err != nil {
		t.Fatal(err)
	}
	space := table.ViewSpace(inst + "/mv")
	if h, _, err := env.srv.engine.GetViewState(space, []byte{'V'}); err != nil || h != nil {
		t.Fatalf("the header after viewsBeforeIngest: %q, %v; want none", h, err)
	}
	before := v.baseRows.Load()
	check("header dropped", "a:2 b:1")
	if h, _, err := env.srv.engine.GetViewState(space, []byte{'V'}); err != nil || h == nil {
		t.Errorf("a read after the header was dropped did not rebuild the state (header %q, %v)", h, err)
	}
	if v.baseRows.Load() == before {
		t.Errorf("a read after the header was dropped read no base row: no rebuild")
	}
}
