package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
)

// ARRAY_AGG with IGNORE NULLS, ORDER BY and LIMIT through the official
// client, directly and in a materialized view (computed when read, not
// maintained): a write shows in the next read.
func TestSQLArrayAggModifiers(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, withAnyViewQuery) // Cloud Bigtable refuses ARRAY_AGG in a materialized view
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	put := func(row, g string, n int64) {
		t.Helper()
		m := bigtable.NewMutation()
		m.Set("f", "g", 1000, []byte(g))
		if n >= 0 {
			m.Set("f", "n", 1000, binary.BigEndian.AppendUint64(nil, uint64(n)))
		}
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range []int64{5, -1, 7, 1, 9, 3} {
		put(fmt.Sprintf("r%d", i), string(rune('a'+i%2)), n)
	}
	const query = "SELECT f['g'] AS _key, ARRAY_AGG(TO_INT64(f['n']) IGNORE NULLS ORDER BY TO_INT64(f['n']) DESC LIMIT 2) AS top FROM t GROUP BY f['g']"
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv", Query: query}); err != nil {
		t.Fatal(err)
	}
	if env.srv.planMaint(sqlInstance, "mv", query) != nil {
		t.Error("a view with ARRAY_AGG(... ORDER BY ... LIMIT) is maintained; want computed when read")
	}
	read := func(q string) []string {
		t.Helper()
		ps, err := env.client.PrepareStatement(ctx, q, nil)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := ps.Bind(nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		if err := bs.Execute(ctx, func(r bigtable.ResultRow) bool {
			var k []byte
			var top []*int64
			if err := r.GetByName("_key", &k); err != nil {
				t.Fatal(err)
			}
			if err := r.GetByName("top", &top); err != nil {
				t.Fatal(err)
			}
			s := string(k) + ":"
			for _, v := range top {
				s += fmt.Sprint(" ", *v)
			}
			got = append(got, s)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, q := range []string{query, "SELECT * FROM mv"} {
		if got, want := read(q), []string{"a: 9 7", "b: 3 1"}; !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", q, got, want)
		}
	}
	put("r9", "b", 4)
	if got, want := read("SELECT * FROM mv"), []string{"a: 9 7", "b: 4 3"}; !slices.Equal(got, want) {
		t.Errorf("after a write: %q, want %q", got, want)
	}
}
