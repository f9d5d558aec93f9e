package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

// The approximate aggregates through the official client, directly and in
// a materialized view, which is computed when read (not maintained): a
// write shows in the next read. A bad count is INVALID_ARGUMENT.
func TestSQLApproxAggregates(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, withAnyViewQuery) // Cloud Bigtable refuses APPROX_* in a materialized view
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	put := func(row, fruit string, n int64) {
		t.Helper()
		m := bigtable.NewMutation()
		m.Set("f", "fruit", 1000, []byte(fruit))
		m.Set("f", "n", 1000, binary.BigEndian.AppendUint64(nil, uint64(n)))
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	for i, f := range []string{"pear", "apple", "pear", "kiwi", "apple", "pear"} {
		put(fmt.Sprintf("r%d", i), f, int64(i+1))
	}
	const query = "SELECT APPROX_TOP_COUNT(CAST(f['fruit'] AS STRING), 2) AS top, APPROX_QUANTILES(TO_INT64(f['n']), 2) AS q FROM t"
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv", Query: query}); err != nil {
		t.Fatal(err)
	}
	if env.srv.planMaint(sqlInstance, "mv", query) != nil {
		t.Error("a view with APPROX_TOP_COUNT is maintained incrementally; want computed when read")
	}
	run := func(q string) (string, error) {
		t.Helper()
		ps, err := env.client.PrepareStatement(ctx, q, nil)
		if err != nil {
			t.Fatalf("PrepareStatement(%q): %v", q, err)
		}
		bs, _ := ps.Bind(nil)
		var got string
		err = bs.Execute(ctx, func(r bigtable.ResultRow) bool {
			var top, qs any
			if err := r.GetByName("top", &top); err != nil {
				t.Fatal(err)
			}
			if err := r.GetByName("q", &qs); err != nil {
				t.Fatal(err)
			}
			got += fmt.Sprint(approxFormat(t, top, qs))
			return true
		})
		return got, err
	}
	for _, q := range []string{query, "SELECT top, q FROM mv"} {
		got, err := run(q)
		if err != nil {
			t.Fatal(err)
		}
		if want := "pear:3 apple:2 | 1 3 6"; got != want {
			t.Errorf("%s: %s, want %s", q, got, want)
		}
	}
	put("r9", "kiwi", 100)
	put("r8", "kiwi", 100)
	got, err := run("SELECT top, q FROM mv")
	if err != nil {
		t.Fatal(err)
	}
	if want := "kiwi:3 pear:3 | 1 4 100"; got != want {
		t.Errorf("after writes: %s, want %s", got, want)
	}
	if _, err := run("SELECT APPROX_TOP_COUNT(f['fruit'], 0) AS top, 1 AS q FROM t"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a zero count: %v, want INVALID_ARGUMENT", err)
	}
}

// approxFormat renders an ARRAY<STRUCT<value STRING, count INT64>> and an
// ARRAY<INT64> as the client decodes them.
func approxFormat(t *testing.T, top, qs any) string {
	t.Helper()
	out := ""
	ss, ok := top.([]bigtable.Struct)
	if !ok {
		t.Fatalf("top decoded as %T", top)
	}
	for _, s := range ss {
		var v string
		var n int64
		if err := s.GetByName("value", &v); err != nil {
			t.Fatal(err)
		}
		if err := s.GetByName("count", &n); err != nil {
			t.Fatal(err)
		}
		out += fmt.Sprintf("%s:%d ", v, n)
	}
	out += "|"
	ns, ok := qs.([]*int64)
	if !ok {
		t.Fatalf("q decoded as %T", qs)
	}
	for _, n := range ns {
		out += fmt.Sprintf(" %d", *n)
	}
	return out
}
