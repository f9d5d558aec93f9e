package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/internal/testkit/servertest"
)

// dump lists every cell of table name as env's client reads it, sorted.
func dump(t *testing.T, env *servertest.Env, name string) string {
	t.Helper()
	var lines []string
	err := env.Client.Open(name).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for _, items := range r {
			for _, it := range items {
				lines = append(lines, fmt.Sprintf("%s %s %d %s", it.Row, it.Column, it.Timestamp, it.Value))
			}
		}
		return true
	})
	if err != nil {
		return "error: " + err.Error()
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestThreeReplicasConverge: three clusters joined in a chain (c joins b,
// which joined a) are one instance: a table made on a reaches the others,
// writes on each reach all, the same cell written on all three settles to
// one value everywhere, and a row deleted on c is gone everywhere.
func TestThreeReplicasConverge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs := servertest.Cluster(t, []string{"a", "b", "c"})
	a := cs[0]
	a.CreateTable("t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	for _, e := range cs[1:] {
		testkit.Eventually(t, "the table on every cluster", 20*time.Second, func() (bool, string) {
			tables, err := e.Admin.Tables(ctx)
			return err == nil && len(tables) == 1, fmt.Sprint(tables, err)
		})
	}
	set := func(e *servertest.Env, row, val string, ts int64) {
		t.Helper()
		m := bigtable.NewMutation()
		m.Set("f", "c", bigtable.Timestamp(ts*1000), []byte(val))
		if err := e.Client.Open("t").Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	for i, e := range cs {
		set(e, fmt.Sprintf("from-%d", i), "v", 1)
		set(e, "same", fmt.Sprint(i), 2)
	}
	del := bigtable.NewMutation()
	del.DeleteRow()
	set(cs[2], "gone", "v", 1)
	testkit.Eventually(t, "the row to delete on a", 20*time.Second, func() (bool, string) {
		return strings.Contains(dump(t, a, "t"), "gone "), dump(t, a, "t")
	})
	if err := cs[2].Client.Open("t").Apply(ctx, "gone", del); err != nil {
		t.Fatal(err)
	}
	var first string
	testkit.Eventually(t, "convergence", 20*time.Second, func() (bool, string) {
		first = dump(t, a, "t")
		for _, e := range cs[1:] {
			if d := dump(t, e, "t"); d != first {
				return false, fmt.Sprintf("\na:\n%s\nother:\n%s", first, d)
			}
		}
		return true, ""
	})
	for i := range cs {
		if !strings.Contains(first, fmt.Sprintf("from-%d f:c 1000 v", i)) {
			t.Errorf("write made on cluster %d missing:\n%s", i, first)
		}
	}
	if strings.Count(first, "same f:c 2000 ") != 1 {
		t.Errorf("the cell written on all three did not settle to one value:\n%s", first)
	}
	if strings.Contains(first, "gone ") {
		t.Errorf("the row deleted on c is still there:\n%s", first)
	}
}
