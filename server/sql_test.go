package server

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

const sqlInstance = "projects/" + testProject + "/instances/" + testInstance

func prepareRaw(t *testing.T, c btpb.BigtableClient, q string, types map[string]*btpb.Type) *btpb.PrepareQueryResponse {
	t.Helper()
	resp, err := c.PrepareQuery(context.Background(), &btpb.PrepareQueryRequest{InstanceName: sqlInstance, Query: q,
		DataFormat: &btpb.PrepareQueryRequest_ProtoFormat{ProtoFormat: &btpb.ProtoFormat{}}, ParamTypes: types})
	if err != nil {
		t.Fatalf("PrepareQuery(%q): %v", q, err)
	}
	return resp
}

// execResult is what one ExecuteQuery stream delivered, checked as the
// client checks it.
type execResult struct {
	values []*btpb.Value
	tokens [][]byte // after each batch
	rows   []int    // values delivered at each token
	pieces int
	resets int
}

func executeRaw(t *testing.T, c btpb.BigtableClient, req *btpb.ExecuteQueryRequest) (*execResult, error) {
	t.Helper()
	stream, err := c.ExecuteQuery(context.Background(), req)
	if err != nil {
		return nil, err
	}
	res := &execResult{}
	var batch []byte
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			if len(batch) != 0 {
				t.Fatal("stream ended inside a batch")
			}
			return res, nil
		}
		if err != nil {
			return res, err
		}
		prs := resp.GetResults()
		if prs == nil {
			t.Fatalf("unexpected response %v on the prepared path", resp)
		}
		if prs.GetReset_() {
			res.resets++
			batch = nil
		}
		if b := prs.GetProtoRowsBatch(); b != nil {
			batch = append(batch, b.GetBatchData()...)
			res.pieces++
		}
		if prs.BatchChecksum != nil {
			if got := crc32.Checksum(batch, crc32.MakeTable(crc32.Castagnoli)); got != prs.GetBatchChecksum() {
				t.Fatalf("batch checksum %x, want %x", prs.GetBatchChecksum(), got)
			}
			rows := &btpb.ProtoRows{}
			if err := proto.Unmarshal(batch, rows); err != nil {
				t.Fatal(err)
			}
			res.values = append(res.values, rows.GetValues()...)
			batch = nil
		}
		if prs.ResumeToken != nil {
			if len(batch) != 0 {
				t.Fatal("resume token inside a batch")
			}
			res.tokens = append(res.tokens, prs.GetResumeToken())
			res.rows = append(res.rows, len(res.values))
		}
	}
}

func preconditionType(err error) string {
	for _, d := range status.Convert(err).Details() {
		if pf, ok := d.(*errdetails.PreconditionFailure); ok && len(pf.GetViolations()) > 0 {
			return pf.GetViolations()[0].GetType()
		}
	}
	return ""
}

// A prepared query expires after its time and when the schema changes
// under it; the official client then prepares again by itself.
func TestSQLPreparedQueryExpiry(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	mut := bigtable.NewMutation()
	mut.Set("f", "q", 1000, []byte("v"))
	if err := tbl.Apply(ctx, "r1", mut); err != nil {
		t.Fatal(err)
	}
	raw := env.raw(t)
	prep := prepareRaw(t, raw, "SELECT * FROM t", nil)
	if got, want := prep.GetValidUntil().AsTime(), env.clock.Now().Add(preparedTTL); !got.Equal(want) {
		t.Errorf("valid_until %v, want %v", got, want)
	}
	exec := &btpb.ExecuteQueryRequest{InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery()}
	if res, err := executeRaw(t, raw, exec); err != nil || len(res.values) != 2 {
		t.Fatalf("execute: %v, %d values", err, len(res.values))
	}
	// A schema change: the result's columns change, so the plan is stale.
	if err := env.admin.CreateColumnFamily(ctx, "t", "g"); err != nil {
		t.Fatal(err)
	}
	_, err := executeRaw(t, raw, exec)
	if status.Code(err) != codes.FailedPrecondition || preconditionType(err) != "PREPARED_QUERY_EXPIRED" {
		t.Fatalf("after a schema change: %v, want FAILED_PRECONDITION PREPARED_QUERY_EXPIRED", err)
	}
	// Time: a fresh plan works until valid_until, then expires.
	prep = prepareRaw(t, raw, "SELECT _key FROM t WHERE _key = 'r1'", nil)
	exec.PreparedQuery = prep.GetPreparedQuery()
	env.clock.Advance(preparedTTL - time.Second)
	if _, err := executeRaw(t, raw, exec); err != nil {
		t.Fatalf("before valid_until: %v", err)
	}
	env.clock.Advance(time.Second)
	if _, err := executeRaw(t, raw, exec); preconditionType(err) != "PREPARED_QUERY_EXPIRED" {
		t.Fatalf("at valid_until: %v, want PREPARED_QUERY_EXPIRED", err)
	}
	// The official client re-prepares on expiry and gets its rows.
	ps, err := env.client.PrepareStatement(ctx, "SELECT _key FROM t", nil)
	if err != nil {
		t.Fatal(err)
	}
	env.clock.Advance(2 * preparedTTL)
	bs, err := ps.Bind(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := bs.Execute(ctx, func(bigtable.ResultRow) bool { n++; return true }); err != nil || n != 1 {
		t.Fatalf("official client after expiry: %v, %d rows", err, n)
	}
	// A dropped table: the plan no longer plans.
	prep = prepareRaw(t, raw, "SELECT _key FROM t", nil)
	if err := env.admin.DeleteTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	exec.PreparedQuery = prep.GetPreparedQuery()
	if _, err := executeRaw(t, raw, exec); preconditionType(err) != "PREPARED_QUERY_EXPIRED" {
		t.Fatalf("after the table is gone: %v, want PREPARED_QUERY_EXPIRED", err)
	}
}

// Bad SQL and bad requests are INVALID_ARGUMENT; a syntax error names its
// line and column.
func TestSQLInvalid(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	raw := env.raw(t)
	ctx := context.Background()
	for q, want := range map[string]string{
		"SELECT _key FROM t WHERE":          "1:25: syntax error",
		"SELECT _key\nFROM t\nWHERE nope":   "3:7: unrecognized name: nope",
		"SELECT _key FROM missing":          "1:18: table or view not found: missing",
		"SELECT @x":                         "1:8: query parameter @x has no declared type",
		"INSERT INTO t (_key) VALUES ('a')": "syntax error",
	} {
		_, err := raw.PrepareQuery(ctx, &btpb.PrepareQueryRequest{InstanceName: sqlInstance, Query: q,
			DataFormat: &btpb.PrepareQueryRequest_ProtoFormat{ProtoFormat: &btpb.ProtoFormat{}}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("PrepareQuery(%q): %v, want INVALID_ARGUMENT containing %q", q, err, want)
		}
	}
	prep := prepareRaw(t, raw, "SELECT @n AS n", map[string]*btpb.Type{"n": {Kind: &btpb.Type_Int64Type{Int64Type: &btpb.Type_Int64{}}}})
	for name, req := range map[string]*btpb.ExecuteQueryRequest{
		"both queries":      {InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery(), Query: "SELECT 1"},
		"neither query":     {InstanceName: sqlInstance},
		"foreign token":     {InstanceName: sqlInstance, PreparedQuery: []byte("nope")},
		"undeclared param":  {InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery(), Params: map[string]*btpb.Value{"m": {}}},
		"mistyped param":    {InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery(), Params: map[string]*btpb.Value{"n": {Kind: &btpb.Value_StringValue{StringValue: "x"}}}},
		"bad resume token":  {InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery(), ResumeToken: []byte("x")},
		"data format given": {InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery(), DataFormat: &btpb.ExecuteQueryRequest_ProtoFormat{ProtoFormat: &btpb.ProtoFormat{}}},
	} {
		if _, err := executeRaw(t, raw, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
	// An untyped parameter value is NULL of the prepared type.
	res, err := executeRaw(t, raw, &btpb.ExecuteQueryRequest{InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery(), Params: map[string]*btpb.Value{"n": {}}})
	if err != nil || len(res.values) != 1 || res.values[0].GetKind() != nil {
		t.Fatalf("NULL parameter: %v, %v", err, res)
	}
}

// Results arrive as checksummed batches split in pieces; a retry from any
// resume token neither repeats nor skips a row, and an empty result still
// ends with a token.
func TestSQLBatchesAndResume(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, smallSQLBatches)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	const rows = 24
	big := bytes.Repeat([]byte("x"), 1600) // six rows to a batch of five pieces, as 200 KiB at the real sizes
	var keys []string
	var muts []*bigtable.Mutation
	for i := range rows {
		m := bigtable.NewMutation()
		m.Set("f", "q", 1000, big)
		keys = append(keys, fmt.Sprintf("r%03d", i))
		muts = append(muts, m)
	}
	if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
		t.Fatal(err, errs)
	}
	raw := env.raw(t)
	prep := prepareRaw(t, raw, "SELECT _key, f['q'] AS q FROM t", nil)
	req := &btpb.ExecuteQueryRequest{InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery()}
	full, err := executeRaw(t, raw, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(full.values) != 2*rows || len(full.tokens) < 3 || full.pieces <= len(full.tokens) || full.resets != 1 {
		t.Fatalf("%d values, %d tokens, %d pieces, %d resets: want %d values in several batches of several pieces, one reset", len(full.values), len(full.tokens), full.pieces, full.resets, 2*rows)
	}
	for i, tok := range full.tokens[:len(full.tokens)-1] {
		req.ResumeToken = tok
		rest, err := executeRaw(t, raw, req)
		if err != nil {
			t.Fatal(err)
		}
		got := append(append([]*btpb.Value{}, full.values[:full.rows[i]]...), rest.values...)
		if len(got) != len(full.values) {
			t.Fatalf("resume after batch %d: %d values, want %d", i, len(got), len(full.values))
		}
		for j := 0; j < len(got); j += 2 {
			if !bytes.Equal(got[j].GetBytesValue(), []byte(keys[j/2])) {
				t.Fatalf("resume after batch %d: row %d is %q, want %q", i, j/2, got[j].GetBytesValue(), keys[j/2])
			}
		}
	}
	// The last token: nothing more, and the token again.
	req.ResumeToken = full.tokens[len(full.tokens)-1]
	if rest, err := executeRaw(t, raw, req); err != nil || len(rest.values) != 0 || len(rest.tokens) != 1 {
		t.Fatalf("retry with the last token: %v, %+v", err, rest)
	}
	prep = prepareRaw(t, raw, "SELECT _key FROM t WHERE _key = 'none'", nil)
	empty, err := executeRaw(t, raw, &btpb.ExecuteQueryRequest{InstanceName: sqlInstance, PreparedQuery: prep.GetPreparedQuery()})
	if err != nil || len(empty.values) != 0 || len(empty.tokens) != 1 {
		t.Fatalf("empty result: %v, %+v", err, empty)
	}
}

// SQL reads what ReadRows reads: a GC-eligible version and an expired
// TTL cell are hidden from both.
func TestSQLSeesWhatReadRowsSees(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.MaxVersionsPolicy(1), "a": bigtable.MaxAgePolicy(time.Hour)})
	now := env.clock.Now()
	m := bigtable.NewMutation()
	m.Set("f", "q", bigtable.Time(now.Add(-time.Minute)), []byte("old"))
	m.Set("f", "q", bigtable.Time(now), []byte("new"))
	m.Set("a", "q", bigtable.Time(now.Add(-30*time.Minute)), []byte("aging"))
	if err := tbl.Apply(ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	count := func() (sqlCells, readCells int) {
		ps, err := env.client.PrepareStatement(ctx, "SELECT f, a FROM t(with_history => TRUE)", nil)
		if err != nil {
			t.Fatal(err)
		}
		bs, _ := ps.Bind(nil)
		err = bs.Execute(ctx, func(r bigtable.ResultRow) bool {
			for _, col := range []string{"f", "a"} {
				var m map[string][]bigtable.Struct
				if err := r.GetByName(col, &m); err != nil {
					t.Fatal(err)
				}
				for _, cells := range m {
					sqlCells += len(cells)
				}
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := tbl.ReadRows(ctx, bigtable.RowRange{}, func(r bigtable.Row) bool {
			for _, items := range r {
				readCells += len(items)
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if s, r := count(); s != 2 || r != 2 {
		t.Fatalf("SQL sees %d cells, ReadRows %d; want 2 and 2", s, r)
	}
	env.clock.Advance(time.Hour)
	if s, r := count(); s != 1 || r != 1 {
		t.Fatalf("after an hour SQL sees %d cells, ReadRows %d; want 1 and 1", s, r)
	}
}

// Logical views: created through the instance admin API, queried by
// name; a protected view cannot be deleted.
func TestSQLLogicalView(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	for _, k := range []string{"a", "b"} {
		m := bigtable.NewMutation()
		m.Set("f", "q", 1000, []byte("v-"+k))
		if err := tbl.Apply(ctx, k, m); err != nil {
			t.Fatal(err)
		}
	}
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	if err := iac.CreateLogicalView(ctx, testInstance, &bigtable.LogicalViewInfo{LogicalViewID: "lv", Query: "SELECT _key, CAST(f['q'] AS STRING) AS q FROM t", DeletionProtection: bigtable.Protected}); err != nil {
		t.Fatal(err)
	}
	if err := iac.CreateLogicalView(ctx, testInstance, &bigtable.LogicalViewInfo{LogicalViewID: "bad", Query: "SELECT nope FROM t"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a view over a bad query: %v, want INVALID_ARGUMENT", err)
	}
	ps, err := env.client.PrepareStatement(ctx, "SELECT q FROM lv WHERE _key = 'b'", nil)
	if err != nil {
		t.Fatal(err)
	}
	bs, _ := ps.Bind(nil)
	var got []string
	if err := bs.Execute(ctx, func(r bigtable.ResultRow) bool {
		var s string
		if err := r.GetByName("q", &s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "v-b" {
		t.Fatalf("through the view: %q, want [v-b]", got)
	}
	if err := iac.DeleteLogicalView(ctx, testInstance, "lv"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("deleting a protected view: %v, want FAILED_PRECONDITION", err)
	}
}

// The deprecated query field: metadata first, then the rows; parameters
// carry their types.
func TestSQLDeprecatedQueryField(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	raw := env.raw(t)
	stream, err := raw.ExecuteQuery(context.Background(), &btpb.ExecuteQueryRequest{InstanceName: sqlInstance, Query: "SELECT @n + 1 AS m",
		DataFormat: &btpb.ExecuteQueryRequest_ProtoFormat{ProtoFormat: &btpb.ProtoFormat{}},
		Params:     map[string]*btpb.Value{"n": {Type: &btpb.Type{Kind: &btpb.Type_Int64Type{Int64Type: &btpb.Type_Int64{}}}, Kind: &btpb.Value_IntValue{IntValue: 41}}}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || first.GetMetadata().GetProtoSchema().GetColumns()[0].GetName() != "m" {
		t.Fatalf("first response %v, %v: want metadata with column m", first, err)
	}
	second, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	rows := &btpb.ProtoRows{}
	if err := proto.Unmarshal(second.GetResults().GetProtoRowsBatch().GetBatchData(), rows); err != nil || len(rows.GetValues()) != 1 || rows.GetValues()[0].GetIntValue() != 42 {
		t.Fatalf("rows %v, %v: want [42]", rows, err)
	}
}

// A materialized view read with ReadRows: the computed rows, a row set,
// a filter, a limit; computed when read, so a cell past its TTL is gone
// from the view at once.
func TestSQLMaterializedViewReadRows(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.MaxAgePolicy(time.Hour)})
	now := env.clock.Now()
	for i, k := range []string{"a", "b", "c"} {
		m := bigtable.NewMutation()
		m.Set("f", "q", bigtable.Time(now.Add(-time.Duration(i*25)*time.Minute)), []byte("v"))
		m.Set("f", "r", bigtable.Time(now), []byte("w"))
		if err := tbl.Apply(ctx, k, m); err != nil {
			t.Fatal(err)
		}
	}
	iac := testkit.InstanceAdmin(t, env.srv.Addr(), testProject)
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv",
		Query: "SELECT _key, COUNT(f['q']) AS `agg.n`, MAX(f['r']) AS last FROM t GROUP BY _key"}); err != nil {
		t.Fatal(err)
	}
	mv := env.client.OpenMaterializedView("mv")
	read := func(rs bigtable.RowSet, opts ...bigtable.ReadOption) []string {
		var got []string
		if err := mv.ReadRows(ctx, rs, func(r bigtable.Row) bool {
			for _, items := range r {
				for _, it := range items {
					got = append(got, fmt.Sprintf("%s/%s=%x", it.Row, it.Column, it.Value))
				}
			}
			return true
		}, opts...); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got) // Row is a map of families
		return got
	}
	want := func(what string, got []string, want ...string) {
		t.Helper()
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: %q, want %q", what, got, want)
		}
	}
	want("row b", read(bigtable.RowList{"b"}), "b/agg:n=0000000000000001", "b/default:=", "b/default:last=77")
	want("range [b, c] limited to 1", read(bigtable.NewClosedRange("b", "c"), bigtable.LimitRows(1)), "b/agg:n=0000000000000001", "b/default:=", "b/default:last=77")
	want("family filter", read(bigtable.RowRange{}, bigtable.RowFilter(bigtable.FamilyFilter("agg"))),
		"a/agg:n=0000000000000001", "b/agg:n=0000000000000001", "c/agg:n=0000000000000001")
	// c's f:q is 50 minutes old: eleven minutes on, the family's max age
	// hides it, from the table and from the view alike.
	env.clock.Advance(11 * time.Minute)
	want("row c after its cell aged out", read(bigtable.RowList{"c"}), "c/agg:n=0000000000000000", "c/default:=", "c/default:last=77")
	if _, err := mv.SampleRowKeys(ctx); err != nil {
		t.Fatal(err)
	}
}
