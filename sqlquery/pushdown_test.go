package sqlquery_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/internal/testkit/enginetest"
	"github.com/ebbtable/ebbtable/sqlquery"
	"github.com/ebbtable/ebbtable/table"
)

// countingCatalog records what each query reads.
type countingCatalog struct {
	sqlquery.EngineCatalog
	reqs []table.ReadRequest
	rows int
}

func (c *countingCatalog) ReadRows(ctx context.Context, name string, req table.ReadRequest, fn func(cell.Row) error) error {
	c.reqs = append(c.reqs, req)
	return c.EngineCatalog.ReadRows(ctx, name, req, func(r cell.Row) error {
		c.rows++
		return fn(r)
	})
}

func TestKeyPushDown(t *testing.T) {
	eng, clk := enginetest.Open(t, table.Options{})
	if _, err := eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "f"}}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a1", "a2", "b1", "b2", "b3", "c1"} {
		if err := eng.MutateRow(inst, "t", []byte(k), []table.Mutation{{Kind: table.SetCell, Family: "f", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte(k)}}); err != nil {
			t.Fatal(err)
		}
	}
	views := map[string]string{"v": "SELECT _key, f['q'] AS q FROM t", "g": "SELECT _key, COUNT(*) AS n FROM t GROUP BY _key", "lim": "SELECT _key FROM t LIMIT 10"}
	for _, tc := range []struct {
		sql    string
		params map[string]sqlquery.Value
		ranges int // ranges in the read request; 0: whole table
		read   int // rows the engine returned
		out    int // rows in the result
	}{
		{sql: "SELECT _key FROM t WHERE _key = 'b1'", ranges: 1, read: 1, out: 1},
		{sql: "SELECT _key FROM t WHERE _key = @k", params: map[string]sqlquery.Value{"k": []byte("b2")}, ranges: 1, read: 1, out: 1},
		{sql: "SELECT _key FROM t WHERE _key IN ('a1', 'c1', 'zz')", ranges: 3, read: 2, out: 2},
		{sql: "SELECT _key FROM t WHERE _key >= 'b' AND _key < 'c' AND f['q'] IS NOT NULL", ranges: 1, read: 3, out: 3},
		{sql: "SELECT _key FROM t WHERE _key BETWEEN 'a2' AND 'b1'", ranges: 1, read: 2, out: 2},
		{sql: "SELECT _key FROM t WHERE STARTS_WITH(_key, 'b')", ranges: 1, read: 3, out: 3},
		{sql: "SELECT _key FROM t WHERE _key LIKE 'a%'", ranges: 1, read: 2, out: 2},
		{sql: "SELECT _key FROM t WHERE _key LIKE '%1'", ranges: 0, read: 6, out: 3},
		{sql: "SELECT _key FROM t WHERE _key = 'a1' OR _key = 'c1'", ranges: 2, read: 2, out: 2},
		{sql: "SELECT _key FROM t WHERE (_key >= 'b' AND _key < 'b3') OR STARTS_WITH(_key, 'c')", ranges: 2, read: 3, out: 3},
		{sql: "SELECT _key FROM t WHERE _key = 'a1' OR f['q'] = b'b2'", ranges: 0, read: 6, out: 2},
		{sql: "SELECT _key FROM t WHERE NOT (_key = 'a1' OR _key = 'c1')", ranges: 0, read: 6, out: 4},
		{sql: "SELECT q FROM v WHERE _key = 'b3'", ranges: 1, read: 1, out: 1},
		{sql: "SELECT n FROM g WHERE _key >= 'c'", ranges: 1, read: 1, out: 1},
		// A LIMIT inside the view must see every row first.
		{sql: "SELECT _key FROM lim WHERE _key = 'c1'", ranges: 0, read: 6, out: 1},
		{sql: "SELECT _key FROM t WHERE _key = 'a1' AND _key = 'b1'", ranges: -1, read: 0, out: 0},
	} {
		cat := &countingCatalog{EngineCatalog: sqlquery.EngineCatalog{Engine: eng, Instance: inst, Views: func(n string) (string, bool) { q, ok := views[n]; return q, ok }}}
		types := map[string]*sqlquery.Type{"k": sqlquery.TBytes}
		plan, err := sqlquery.Prepare(cat, tc.sql, types)
		if err != nil {
			t.Fatalf("%s: %v", tc.sql, err)
		}
		out := 0
		if err := plan.Run(context.Background(), cat, tc.params, clk.Now(), func([]sqlquery.Value) error { out++; return nil }); err != nil {
			t.Fatalf("%s: %v", tc.sql, err)
		}
		ranges := -1
		if len(cat.reqs) == 1 {
			ranges = len(cat.reqs[0].Ranges)
		}
		if ranges != tc.ranges || cat.rows != tc.read || out != tc.out {
			t.Errorf("%s: %d ranges, %d rows read, %d out; want %d, %d, %d", tc.sql, ranges, cat.rows, out, tc.ranges, tc.read, tc.out)
		}
	}
}

// RunKeys narrows a view grouped by _key to the keys asked for, as a
// materialized view read with a row set does; a view grouped otherwise
// reads everything.
func TestRunKeys(t *testing.T) {
	eng, clk := enginetest.Open(t, table.Options{})
	if _, err := eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "f"}}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		if err := eng.MutateRow(inst, "t", []byte(k), []table.Mutation{{Kind: table.SetCell, Family: "f", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		sql        string
		keyCol     int
		read, rows int
	}{
		{"SELECT _key, COUNT(f['q']) AS n FROM t GROUP BY _key", 0, 2, 2},
		{"SELECT COUNT(*) AS n, _key FROM t GROUP BY _key", 1, 2, 2},
		{"SELECT f['q'] AS q, COUNT(*) AS n FROM t GROUP BY q", -1, 4, 1},
		{"SELECT _key FROM t LIMIT 3", -1, 3, 3},
	} {
		cat := &countingCatalog{EngineCatalog: sqlquery.EngineCatalog{Engine: eng, Instance: inst}}
		plan, err := sqlquery.Prepare(cat, tc.sql, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := plan.KeyColumn(); got != tc.keyCol {
			t.Errorf("%s: KeyColumn %d, want %d", tc.sql, got, tc.keyCol)
		}
		rows := 0
		err = plan.RunKeys(context.Background(), cat, nil, clk.Now(), [][]byte{[]byte("b")}, []table.RowRange{{Start: []byte("c"), End: []byte("d"), EndClosed: false}}, func([]sqlquery.Value) error { rows++; return nil })
		if err != nil {
			t.Fatal(err)
		}
		if cat.rows != tc.read || rows != tc.rows {
			t.Errorf("%s: read %d rows, returned %d; want %d, %d", tc.sql, cat.rows, rows, tc.read, tc.rows)
		}
	}
}

// ORDER BY with LIMIT over many rows keeps the right rows (the buffer is
// cut as it goes) and is stable among equal keys.
func TestOrderByLimitBounded(t *testing.T) {
	eng, clk := enginetest.Open(t, table.Options{})
	if _, err := eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "f"}}}); err != nil {
		t.Fatal(err)
	}
	var entries []table.RowMutation
	for i := range 5000 {
		v := []byte{byte(i % 7)}
		entries = append(entries, table.RowMutation{Row: []byte(fmt.Sprintf("k%05d", i)), Mutations: []table.Mutation{{Kind: table.SetCell, Family: "f", Qualifier: []byte("q"), Timestamp: 1000, Value: v}}})
	}
	if _, err := eng.MutateRows(inst, "t", entries); err != nil {
		t.Fatal(err)
	}
	cat := sqlquery.EngineCatalog{Engine: eng, Instance: inst}
	plan, err := sqlquery.Prepare(cat, "SELECT _key, f['q'] AS q FROM t ORDER BY q DESC LIMIT 10", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := plan.Run(context.Background(), cat, nil, clk.Now(), func(r []sqlquery.Value) error {
		got = append(got, string(r[0].([]byte)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Value 6 is at i = 6, 13, 20, ...: the first ten in key order.
	var want []string
	for i := 6; len(want) < 10; i += 7 {
		want = append(want, fmt.Sprintf("k%05d", i))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
