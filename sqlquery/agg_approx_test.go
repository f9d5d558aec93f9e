package sqlquery_test

import (
	"errors"
	"testing"

	"github.com/ebbtable/ebbtable/internal/testkit/enginetest"
	"github.com/ebbtable/ebbtable/sqlquery"
	"github.com/ebbtable/ebbtable/table"
)

// The approximate aggregates are computed when read: a grouped query using
// one is not maintained incrementally, while the same query without it is.
func TestApproxNotIncremental(t *testing.T) {
	eng, _ := enginetest.Open(t, table.Options{})
	if _, err := eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "f"}}}); err != nil {
		t.Fatal(err)
	}
	cat := sqlquery.EngineCatalog{Engine: eng, Instance: inst}
	for _, tc := range []struct {
		sql  string
		incr bool
	}{
		{"SELECT f['q'] AS q, COUNT(*) AS n FROM t GROUP BY q", true},
		{"SELECT f['q'] AS q, APPROX_QUANTILES(TO_INT64(f['v']), 4) AS qs FROM t GROUP BY q", false},
		{"SELECT APPROX_TOP_COUNT(f['q'], 3) AS top FROM t", false},
		{"SELECT f['q'] AS q, COUNT(*) AS n, APPROX_TOP_SUM(_key, TO_INT64(f['v']), 3) AS top FROM t GROUP BY q", false},
	} {
		plan, err := sqlquery.Prepare(cat, tc.sql, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.sql, err)
		}
		_, err = plan.Incremental()
		if tc.incr && err != nil {
			t.Errorf("%s: %v", tc.sql, err)
		}
		if !tc.incr && !errors.Is(err, sqlquery.ErrNotIncremental) {
			t.Errorf("%s: Incremental gave %v, want ErrNotIncremental", tc.sql, err)
		}
	}
}
