package sqlquery_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/sqlquery"
	"github.com/ebbtable/ebbtable/table"
)

// FuzzQuery feeds arbitrary text to the query entry point (Prepare, then
// Run over a small table): it must never panic, and whatever it refuses
// it refuses as invalid (INVALID_ARGUMENT on the wire).
//
//	go test -run XXX -fuzz FuzzQuery -fuzztime 60s ./sqlquery
func FuzzQuery(f *testing.F) {
	for _, s := range []string{
		"SELECT * FROM t",
		"SELECT _key, f['a'] AS a FROM t(with_history => TRUE, latest_n => 2) WHERE _key BETWEEN 'a' AND 'z'",
		"SELECT CAST(f['n'] AS INT64) + 1 AS n, COUNT(*) FROM t GROUP BY 1 ORDER BY 2 DESC LIMIT 3",
		"SELECT * FROM UNPACK((SELECT _key, f FROM t(with_history => TRUE)))",
		"SELECT SUBSTR('abc', -5, 2), TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL 1 HOUR), [1,2][SAFE_OFFSET(9)]",
		"SELECT @p FROM v WHERE _key IN UNNEST(@a)",
		"SELECT LEFT(_key, 1), FORMAT('%-5d|%'.2f|%T', @p, 1234.5, f), FORMAT_TIMESTAMP('%F %E3S %Ez', CURRENT_TIMESTAMP(), '+05:30') FROM t",
		"SELECT PARSE_TIMESTAMP('%Y-%m-%d %I:%M %p %z', '2024-06-01 03:04 PM +0100'), PARSE_DATE('%b %e %y', 'Jun  1 24')",
		"SELECT JSON_VALUE('{\"a\":[1,{\"b\":2}]}', '$.a[1].b'), TO_JSON_STRING(f), APPROX_COUNT_DISTINCT(_key) FROM t",
		"SELECT APPROX_QUANTILES(DISTINCT TO_INT64(f['q']), @n), APPROX_TOP_COUNT(_key, 2), APPROX_TOP_SUM(f['q'], 1.5, 3) FROM t",
		"SELECT f['g'] AS g, ARRAY_AGG(TO_INT64(f['n']) IGNORE NULLS ORDER BY _key DESC LIMIT 2), STRING_AGG(DISTINCT f['a'] ORDER BY f['a'] LIMIT @p) FROM t GROUP BY g",
		"SELECT _key, f['n'] FROM t ORDER BY f['n'] DESC, _key LIMIT 2",
		"SELECT a, COUNT(*) FROM v GROUP BY a",
		"SELECT _key, _timestamp FROM UNPACK((SELECT _key, f['a'] AS a FROM t(with_history => TRUE))) LIMIT 4",
		"SELECT",
		"SELECT f['a'] AS a, _key, COUNT(*) AS n FROM t GROUP BY a, _key",
		"SELECT f['a'] AS a, _key FROM t ORDER BY a, _key",
	} {
		f.Add(s)
	}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	eng, err := table.Open(table.Options{Dir: f.TempDir(), Clock: clk})
	if err != nil {
		f.Fatal(err)
	}
	defer eng.Close()
	if _, err := eng.CreateTable(inst, "t", table.TableSpec{Families: []table.FamilySpec{{Name: "f"}}}); err != nil {
		f.Fatal(err)
	}
	for i, k := range []string{"a", "b", "c"} {
		for _, q := range []string{"a", "n"} {
			if err := eng.MutateRow(inst, "t", []byte(k), []table.Mutation{{Kind: table.SetCell, Family: "f", Qualifier: []byte(q), Timestamp: int64(1000 * (i + 1)), Value: []byte{0, 0, 0, 0, 0, 0, 0, byte(i)}}}); err != nil {
				f.Fatal(err)
			}
		}
	}
	cat := sqlquery.EngineCatalog{Engine: eng, Instance: inst, Views: func(n string) (string, bool) {
		if n == "v" {
			return "SELECT _key, f['a'] AS a FROM t", true
		}
		return "", false
	}}
	types := map[string]*sqlquery.Type{"p": sqlquery.TInt64, "a": sqlquery.ArrayOf(sqlquery.TBytes)}
	params := map[string]sqlquery.Value{"p": int64(7), "a": sqlquery.Array{[]byte("a"), nil}}
	f.Fuzz(func(t *testing.T, sql string) {
		plan, err := sqlquery.Prepare(cat, sql, types)
		if err != nil {
			if !errors.Is(err, sqlquery.ErrInvalid) {
				t.Fatalf("Prepare(%q): %v is not ErrInvalid", sql, err)
			}
			return
		}
		// The materialized view rules answer every query that plans:
		// its row key, or an ErrInvalid.
		if key, err := plan.MaterializedKey(sql); err != nil && !errors.Is(err, sqlquery.ErrInvalid) {
			t.Fatalf("MaterializedKey(%q): %v is not ErrInvalid", sql, err)
		} else if err == nil && len(key) == 0 {
			t.Fatalf("MaterializedKey(%q): an accepted view without a row key", sql)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n := 0
		err = plan.Run(ctx, cat, params, clk.Now(), func([]sqlquery.Value) error { n++; return nil })
		if err != nil && !errors.Is(err, sqlquery.ErrInvalid) {
			t.Fatalf("Run(%q): %v is not ErrInvalid", sql, err)
		}
		if err != nil || !plan.Positioned() {
			return
		}
		// Resumed from the position after any row, with nothing changed,
		// the query gives exactly the rows after it.
		var rows []string
		var tokens [][]byte
		if err := plan.RunFrom(ctx, cat, params, clk.Now(), nil, func(at *sqlquery.Position, row []sqlquery.Value) error {
			rows = append(rows, fmt.Sprint(sqlquery.Format(sqlquery.Struct(row))))
			tokens = append(tokens, at.Encode())
			return nil
		}); err != nil {
			t.Fatalf("RunFrom(%q): %v, where Run succeeded", sql, err)
		}
		for i, tok := range tokens {
			from, err := sqlquery.DecodePosition(tok)
			if err != nil {
				t.Fatal(err)
			}
			var rest []string
			if err := plan.RunFrom(ctx, cat, params, clk.Now(), from, func(_ *sqlquery.Position, row []sqlquery.Value) error {
				rest = append(rest, fmt.Sprint(sqlquery.Format(sqlquery.Struct(row))))
				return nil
			}); err != nil {
				t.Fatalf("RunFrom(%q) after row %d: %v", sql, i, err)
			}
			if !slices.Equal(rest, rows[i+1:]) {
				t.Fatalf("%q resumed after row %d: %q, want %q", sql, i, rest, rows[i+1:])
			}
		}
	})
}
