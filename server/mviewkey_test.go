package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/sqlquery"
)

// Int64.OrderedCodeBytes: known encodings, lengths growing away from
// zero, and bytewise order equal to numeric order.
func TestOrderedInt64(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    int64
		want []byte
	}{
		{0, []byte{0x80}}, {1, []byte{0x81}}, {63, []byte{0xbf}}, {-1, []byte{0x7f}}, {-64, []byte{0x40}},
		{64, []byte{0xc0, 0x40}}, {-65, []byte{0x3f, 0xbf}}, {8191, []byte{0xdf, 0xff}}, {8192, []byte{0xe0, 0x20, 0x00}},
	} {
		if got := appendOrderedInt64(nil, c.v); !bytes.Equal(got, c.want) {
			t.Errorf("%d: % x, want % x", c.v, got, c.want)
		}
	}
	if n := len(appendOrderedInt64(nil, math.MaxInt64)); n != 10 {
		t.Errorf("MaxInt64: %d bytes, want 10", n)
	}
	if n := len(appendOrderedInt64(nil, math.MinInt64)); n != 10 {
		t.Errorf("MinInt64: %d bytes, want 10", n)
	}
	r := rand.New(rand.NewPCG(1, 2))
	vals := []int64{math.MinInt64, math.MaxInt64, 0, -1, 1}
	for range 5000 {
		v := int64(r.Uint64()) >> r.IntN(64)
		vals = append(vals, v, -v)
	}
	slices.Sort(vals)
	for i := 1; i < len(vals); i++ {
		a, b := appendOrderedInt64(nil, vals[i-1]), appendOrderedInt64(nil, vals[i])
		if c := bytes.Compare(a, b); (vals[i-1] < vals[i]) != (c < 0) || (vals[i-1] == vals[i]) != (c == 0) {
			t.Fatalf("%d (% x) vs %d (% x): compare %d", vals[i-1], a, vals[i], b, c)
		}
	}
}

// Struct.OrderedCodeBytes as the proto's examples give it.
func TestViewKeyStructEncoding(t *testing.T) {
	k := viewRowKey{cols: []int{0, 1, 2}}
	for _, c := range []struct {
		row  []any
		want string
	}{
		{[]any{"", "", ""}, "\x00\x00"},
		{[]any{"", "B", ""}, "\x00\x00\x00\x01B"},
		{[]any{"A", "", ""}, "A"},
		{[]any{"A", "", "C"}, "A\x00\x01\x00\x00\x00\x01C"},
		{[]any{[]byte("a\x00b"), int64(1), "c"}, "a\x00\xffb\x00\x01\x81\x00\x01c"},
	} {
		var row []sqlquery.Value
		for _, v := range c.row {
			row = append(row, v)
		}
		if got := string(k.encode(row)); got != c.want {
			t.Errorf("%q: %q, want %q", c.row, got, c.want)
		}
	}
	if got := k.encode([]sqlquery.Value{"a", nil, "c"}); got != nil {
		t.Errorf("a NULL key column: %q, want no key", got)
	}
}

// ReadRows through the official client reads materialized views whose row
// key is not a BYTES or STRING _key: an INT64 GROUP BY key, a compound
// GROUP BY key and a secondary index (ORDER BY email, _key). Rows come in
// key order; a row set of encoded keys or prefixes selects rows.
func TestMaterializedViewReadRowsEncodedKeys(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	put := func(row, region, email string, n int64) {
		t.Helper()
		m := bigtable.NewMutation()
		m.Set("f", "r", 1000, []byte(region))
		m.Set("f", "e", 1000, []byte(email))
		m.Set("f", "n", 1000, binary.BigEndian.AppendUint64(nil, uint64(n)))
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	put("r1", "eu", "b@x", 5)
	put("r2", "us", "a@x", -3)
	put("r3", "eu", "c@x", 5)
	put("r4", "eu", "a@x", 300)
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	for id, q := range map[string]string{
		"byn":      "SELECT TO_INT64(f['n']) AS n, COUNT(*) AS c FROM t GROUP BY n",
		"byregion": "SELECT CAST(f['r'] AS STRING) AS region, TO_INT64(f['n']) AS n, COUNT(*) AS c FROM t GROUP BY region, n",
		"byemail":  "SELECT f['e'] AS email, _key, f['r'] AS region FROM t ORDER BY email, _key",
	} {
		if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: id, Query: q}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	read := func(view string, rs bigtable.RowSet) []string {
		t.Helper()
		var got []string
		err := env.client.OpenMaterializedView(view).ReadRows(ctx, rs, func(r bigtable.Row) bool {
			s := fmt.Sprintf("%q", r.Key())
			for _, it := range r["default"] {
				if it.Column == "default:c" {
					s += fmt.Sprintf(" c=%d", binary.BigEndian.Uint64(it.Value))
				}
				if it.Column == "default:region" {
					s += " region=" + string(it.Value)
				}
			}
			got = append(got, s)
			return true
		})
		if err != nil {
			t.Fatalf("%s: %v", view, err)
		}
		return got
	}
	n := func(v int64) string { return string(appendOrderedInt64(nil, v)) }
	check := func(what string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s:\n got %q\nwant %q", what, got, want)
		}
	}
	check("INT64 key", read("byn", bigtable.RowRange{}),
		fmt.Sprintf("%q c=1", n(-3)), fmt.Sprintf("%q c=2", n(5)), fmt.Sprintf("%q c=1", n(300)))
	check("INT64 key, one row", read("byn", bigtable.SingleRow(n(5))), fmt.Sprintf("%q c=2", n(5)))
	check("compound key", read("byregion", bigtable.RowRange{}),
		fmt.Sprintf("%q c=2", "eu\x00\x01"+n(5)), fmt.Sprintf("%q c=1", "eu\x00\x01"+n(300)), fmt.Sprintf("%q c=1", "us\x00\x01"+n(-3)))
	check("compound key, a region's prefix", read("byregion", bigtable.PrefixRange("us\x00\x01")), fmt.Sprintf("%q c=1", "us\x00\x01"+n(-3)))
	check("secondary index", read("byemail", bigtable.PrefixRange("a@x\x00\x01")),
		fmt.Sprintf("%q region=us", "a@x\x00\x01r2"), fmt.Sprintf("%q region=eu", "a@x\x00\x01r4"))
	// SQL reads the same views by their columns.
	got, err := sqlRows(t, env.client, "SELECT region, n, c FROM byregion")
	if err != nil || !slices.Equal(got, []string{"eu|5|2", "eu|300|1", "us|-3|1"}) {
		t.Errorf("SQL: %q, %v", got, err)
	}
}
