package server

import (
	"context"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
)

// A view's plan is kept while the schema it was planned with stands, and
// planned again when a family of its table, or a view it reads, changes:
// a plan over a family since deleted is not served.
func TestViewPlanFollowsSchema(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	prepares := func() int {
		c := &env.srv.mviews.plans
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.prepares
	}
	const query = "SELECT f['g'] AS _key, COUNT(*) AS n FROM t GROUP BY f['g']"
	mv := env.srv.planMaint(sqlInstance, "mv", query)
	if mv == nil {
		t.Fatal("the view is not maintained")
	}
	if again := env.srv.planMaint(sqlInstance, "mv", query); again == nil || again.plan != mv.plan || prepares() != 1 {
		t.Fatalf("planned again (%d plans made) with the schema unchanged", prepares())
	}

	if err := env.admin.CreateColumnFamily(ctx, "t", "h"); err != nil {
		t.Fatal(err)
	}
	again := env.srv.planMaint(sqlInstance, "mv", query)
	if again == nil || again.plan == mv.plan {
		t.Fatal("a family added: the kept plan was served")
	}
	if err := env.admin.DeleteColumnFamily(ctx, "t", "f"); err != nil {
		t.Fatal(err)
	}
	if p := env.srv.planMaint(sqlInstance, "mv", query); p != nil {
		t.Fatal("the view's family is gone, yet it was planned (a stale plan)")
	}

	// A query through a logical view follows the view's query.
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	if err := iac.CreateLogicalView(ctx, testInstance, &bigtable.LogicalViewInfo{LogicalViewID: "lv", Query: "SELECT _key FROM t"}); err != nil {
		t.Fatal(err)
	}
	cols := func() int {
		t.Helper()
		vp, err := env.srv.viewPlan(sqlInstance, "SELECT * FROM lv", 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(vp.plan.Columns)
	}
	if n := cols(); n != 1 {
		t.Fatalf("%d columns through the view, want 1", n)
	}
	if err := iac.UpdateLogicalView(ctx, testInstance, bigtable.LogicalViewInfo{LogicalViewID: "lv", Query: "SELECT _key, h FROM t"}); err != nil {
		t.Fatal(err)
	}
	if n := cols(); n != 2 {
		t.Fatalf("%d columns through the changed view, want 2 (a stale plan)", n)
	}
}

// BenchmarkViewPlan: planning a maintained view's query for the index
// (planMaintCover) with its plan kept, against preparing it every time.
//
//	go test -run '^$' -bench ViewPlan ./server
func BenchmarkViewPlan(b *testing.B) {
	env := newBenchEnv(b)
	conf := &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{"f": {}}}
	if err := env.admin.CreateTableFromConf(context.Background(), conf); err != nil {
		b.Fatal(err)
	}
	const query = "SELECT f['g'] AS _key, COUNT(f['v']) AS n, MAX(f['v']) AS mx FROM t GROUP BY f['g']"
	b.Run("kept", func(b *testing.B) {
		for b.Loop() {
			if env.srv.planMaint(sqlInstance, "v", query) == nil {
				b.Fatal("not maintained")
			}
		}
	})
	b.Run("prepared", func(b *testing.B) {
		for b.Loop() {
			env.srv.mviews.plans = viewPlans{}
			if env.srv.planMaint(sqlInstance, "v", query) == nil {
				b.Fatal("not maintained")
			}
		}
	})
}
