package sqlquery_test

import (
	"context"
	"slices"
	"testing"

	"github.com/ebbtable/ebbtable/internal/testkit/enginetest"
	"github.com/ebbtable/ebbtable/sqlquery"
	"github.com/ebbtable/ebbtable/table"
)

// Only results with one row per table row in key order have a row-key
// position; RunAfter restarts them after a key, reading only the rows
// after it.
func TestResumable(t *testing.T) {
	eng, clk := enginetest.Open(t, table.Options{})
	if _, err := eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "f"}}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a1", "a2", "b1", "b2", "c1"} {
		if err := eng.MutateRow(inst, "t", []byte(k), []table.Mutation{{Kind: table.SetCell, Family: "f", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte(k)}}); err != nil {
			t.Fatal(err)
		}
	}
	views := map[string]string{"v": "SELECT _key, f['q'] AS q FROM t"}
	cat := &countingCatalog{EngineCatalog: sqlquery.EngineCatalog{Engine: eng, Instance: inst, Views: func(n string) (string, bool) {
		q, ok := views[n]
		return q, ok
	}}}
	for sql, want := range map[string]bool{
		"SELECT _key FROM t":                              true,
		"SELECT f['q'] AS q FROM t WHERE _key >= 'a2'":    true,
		"SELECT _key FROM t ORDER BY _key":                false,
		"SELECT _key FROM t LIMIT 3":                      false,
		"SELECT _key, COUNT(*) AS n FROM t GROUP BY _key": false,
		"SELECT COUNT(*) AS n FROM t":                     false,
		"SELECT q FROM v":                                 false,
	} {
		plan, err := sqlquery.Prepare(cat, sql, nil)
		if err != nil {
			t.Fatal(sql, err)
		}
		if got := plan.Resumable(); got != want {
			t.Errorf("%s: Resumable() = %v, want %v", sql, got, want)
		}
		if !want {
			if err := plan.RunAfter(context.Background(), cat, nil, clk.Now(), []byte("a"), func([]byte, []sqlquery.Value) error { return nil }); err == nil {
				t.Errorf("%s: RunAfter on a plan that is not resumable succeeded", sql)
			}
		}
	}
	plan, err := sqlquery.Prepare(cat, "SELECT f['q'] AS q FROM t WHERE _key < 'c'", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		after string
		want  []string
	}{{"", []string{"a1", "a2", "b1", "b2"}}, {"a2", []string{"b1", "b2"}}, {"a3", []string{"b1", "b2"}}, {"b2", nil}} {
		var after []byte
		if tc.after != "" {
			after = []byte(tc.after)
		}
		cat.rows = 0
		var keys []string
		err := plan.RunAfter(context.Background(), cat, nil, clk.Now(), after, func(key []byte, row []sqlquery.Value) error {
			if string(row[0].([]byte)) != string(key) {
				t.Errorf("row %q reported with key %q", row[0], key)
			}
			keys = append(keys, string(key))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(keys, tc.want) || cat.rows != len(tc.want) {
			t.Errorf("after %q: keys %q (%d read), want %q", tc.after, keys, cat.rows, tc.want)
		}
	}
}
