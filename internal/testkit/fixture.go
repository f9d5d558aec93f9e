package testkit

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// The fixture is a table written through several mutation kinds (sets with
// several versions, a row deletion, a column deletion, a read-modify-write
// last) for tests that a server keeps what it acknowledged: across a crash,
// a stop, a restart, a backup.

// BaseTS is a millisecond-granular timestamp for explicit writes.
var BaseTS = bigtable.Time(time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC))

// MsAfter is ts plus ms milliseconds.
func MsAfter(ts bigtable.Timestamp, ms int) bigtable.Timestamp {
	return ts + bigtable.Timestamp(ms*1000)
}

// WriteFixture creates table "persist" and writes rows through several
// mutation kinds. It returns the rows a full read must then return (the
// server-stamped counter row is left out; callers compare it separately).
func WriteFixture(t testing.TB, client *bigtable.Client, admin *bigtable.AdminClient) map[string]bigtable.Row {
	t.Helper()
	ctx := context.Background()
	conf := &bigtable.TableConf{TableID: "persist", ColumnFamilies: map[string]bigtable.Family{
		"a": {},
		"b": {GCPolicy: bigtable.MaxVersionsPolicy(5)},
	}}
	if err := admin.CreateTableFromConf(ctx, conf); err != nil {
		t.Fatal(err)
	}
	tbl := client.Open("persist")

	want := map[string]bigtable.Row{}
	var keys []string
	var muts []*bigtable.Mutation
	for i := range 50 {
		key := fmt.Sprintf("row%03d", i)
		m := bigtable.NewMutation()
		ts := MsAfter(BaseTS, i)
		m.Set("a", "q", ts, []byte(fmt.Sprintf("v-%d", i)))
		row := bigtable.Row{"a": {{Row: key, Column: "a:q", Timestamp: ts, Value: []byte(fmt.Sprintf("v-%d", i))}}}
		if i < 10 {
			// Three versions, newest first as reads return them.
			for j := 2; j >= 0; j-- {
				vts := MsAfter(BaseTS, j)
				v := []byte(fmt.Sprintf("b%d.%d", i, j))
				m.Set("b", "v", vts, v)
				row["b"] = append(row["b"], bigtable.ReadItem{Row: key, Column: "b:v", Timestamp: vts, Value: v})
			}
		}
		keys, muts = append(keys, key), append(muts, m)
		want[key] = row
	}
	// One Apply per row: ApplyBulk is covered by the server's tests.
	for i, key := range keys {
		if err := tbl.Apply(ctx, key, muts[i]); err != nil {
			t.Fatalf("Apply %s: %v", key, err)
		}
	}

	// Deletions must persist as well as writes.
	del := bigtable.NewMutation()
	del.DeleteRow()
	if err := tbl.Apply(ctx, "row049", del); err != nil {
		t.Fatal(err)
	}
	delete(want, "row049")
	delCol := bigtable.NewMutation()
	delCol.DeleteCellsInColumn("a", "q")
	if err := tbl.Apply(ctx, "row000", delCol); err != nil {
		t.Fatal(err)
	}
	delete(want["row000"], "a")

	// A read-modify-write, last: the write just before the crash.
	for range 2 {
		rmw := bigtable.NewReadModifyWrite()
		rmw.Increment("a", "n", 5)
		if _, err := tbl.ApplyReadModifyWrite(ctx, "ctr", rmw); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// ReadFixture reads every row of WriteFixture's table "persist".
func ReadFixture(t testing.TB, client *bigtable.Client) []bigtable.Row {
	t.Helper()
	var rows []bigtable.Row
	err := client.Open("persist").ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		rows = append(rows, r)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// CheckFixture compares a full read with the fixture.
func CheckFixture(t testing.TB, rows []bigtable.Row, want map[string]bigtable.Row) {
	t.Helper()
	got := map[string]bigtable.Row{}
	for _, r := range rows {
		got[r.Key()] = r
	}
	ctr, ok := got["ctr"]
	if !ok {
		t.Errorf("counter row missing")
	} else {
		// Each increment writes a new version at server time; the newest
		// holds the sum.
		if len(ctr["a"]) == 0 || ctr["a"][0].Column != "a:n" || len(ctr["a"][0].Value) != 8 || binary.BigEndian.Uint64(ctr["a"][0].Value) != 10 {
			t.Errorf("counter row = %v, want newest a:n = 10 (8 bytes, big-endian)", ctr)
		}
		delete(got, "ctr")
	}
	if !reflect.DeepEqual(got, want) {
		for _, k := range sortedKeys(want, got) {
			if !reflect.DeepEqual(got[k], want[k]) {
				t.Errorf("row %q:\n got %v\nwant %v", k, got[k], want[k])
			}
		}
	}
}

func sortedKeys(ms ...map[string]bigtable.Row) []string {
	var keys []string
	for _, m := range ms {
		for k := range m {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// CheckFixtureSchema checks that the fixture table and its families are
// there, alone.
func CheckFixtureSchema(t testing.TB, admin *bigtable.AdminClient) {
	t.Helper()
	ctx := context.Background()
	tables, err := admin.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tables, []string{"persist"}) {
		t.Errorf("tables = %q, want [persist]", tables)
	}
	info, err := admin.TableInfo(ctx, "persist")
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]string{}
	for _, f := range info.FamilyInfos {
		policies[f.Name] = f.GCPolicy
	}
	want := map[string]string{"a": "<never>", "b": "versions() > 5"}
	if !reflect.DeepEqual(policies, want) {
		t.Errorf("families and GC policies = %v, want %v", policies, want)
	}
}
