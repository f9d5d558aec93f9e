package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func rowKeys(rows []bigtable.Row) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.Key())
	}
	return out
}

func readAll(t *testing.T, tbl *bigtable.Table, rs bigtable.RowSet, opts ...bigtable.ReadOption) []bigtable.Row {
	t.Helper()
	var rows []bigtable.Row
	err := tbl.ReadRows(context.Background(), rs, func(r bigtable.Row) bool {
		rows = append(rows, r)
		return true
	}, opts...)
	if err != nil {
		t.Fatalf("ReadRows: %v", err)
	}
	return rows
}

func set(t *testing.T, tbl *bigtable.Table, row, fam, col string, ts bigtable.Timestamp, val string) {
	t.Helper()
	m := bigtable.NewMutation()
	m.Set(fam, col, ts, []byte(val))
	if err := tbl.Apply(context.Background(), row, m); err != nil {
		t.Fatalf("Apply %s: %v", row, err)
	}
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want code %v", err, code)
	}
}

func TestReadRowsSelectsRowsInOrder(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": bigtable.NoGcPolicy()})
	for _, k := range []string{"a", "a1", "b", "b\x00", "c", "d"} {
		set(t, tbl, k, "cf", "q", 1000, "v-"+k)
	}
	cases := []struct {
		name string
		rs   bigtable.RowSet
		opts []bigtable.ReadOption
		want []string
	}{
		{"all", bigtable.InfiniteRange(""), nil, []string{"a", "a1", "b", "b\x00", "c", "d"}},
		{"prefix", bigtable.PrefixRange("a"), nil, []string{"a", "a1"}},
		{"range", bigtable.NewRange("a1", "c"), nil, []string{"a1", "b", "b\x00"}},
		{"closed range", bigtable.NewClosedRange("b", "c"), nil, []string{"b", "b\x00", "c"}},
		{"open range", bigtable.NewOpenRange("b", "d"), nil, []string{"b\x00", "c"}},
		{"row list", bigtable.RowList{"d", "a", "zz", "b"}, nil, []string{"a", "b", "d"}},
		{"overlapping ranges", bigtable.RowRangeList{bigtable.NewRange("a", "b"), bigtable.NewRange("a1", "c")}, nil, []string{"a", "a1", "b", "b\x00"}},
		{"limit", bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.LimitRows(2)}, []string{"a", "a1"}},
		{"reversed", bigtable.InfiniteRange("b"), []bigtable.ReadOption{bigtable.ReverseScan()}, []string{"d", "c", "b\x00", "b"}},
		{"reversed limit", bigtable.PrefixRange("a"), []bigtable.ReadOption{bigtable.ReverseScan(), bigtable.LimitRows(1)}, []string{"a1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := rowKeys(readAll(t, tbl, c.rs, c.opts...))
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestVersionsAndFilters(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"a": nil, "b": nil})
	for ts := 1; ts <= 3; ts++ {
		set(t, tbl, "r", "a", "x", bigtable.Timestamp(ts*1000), fmt.Sprintf("ax%d", ts))
		set(t, tbl, "r", "a", "y", bigtable.Timestamp(ts*1000), fmt.Sprintf("ay%d", ts))
		set(t, tbl, "r", "b", "x", bigtable.Timestamp(ts*1000), fmt.Sprintf("bx%d", ts))
	}
	// Overwrite at the same timestamp.
	set(t, tbl, "r", "a", "x", 3000, "ax3-new")
	row, err := tbl.ReadRow(context.Background(), "r")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(row["a"]); n != 6 {
		t.Fatalf("family a has %d cells, want 6: %v", n, row["a"])
	}
	if got := row["a"][0]; got.Column != "a:x" || got.Timestamp != 3000 || string(got.Value) != "ax3-new" {
		t.Fatalf("newest a:x = %+v", got)
	}
	cases := []struct {
		name   string
		filter bigtable.Filter
		want   string
	}{
		{"latest 1", bigtable.LatestNFilter(1), "a:x@3000=ax3-new a:y@3000=ay3 b:x@3000=bx3"},
		{"family", bigtable.ChainFilters(bigtable.FamilyFilter("b"), bigtable.LatestNFilter(2)), "b:x@3000=bx3 b:x@2000=bx2"},
		{"column", bigtable.ChainFilters(bigtable.ColumnFilter("y"), bigtable.TimestampRangeFilterMicros(2000, 3000)), "a:y@2000=ay2"},
		{"value regex", bigtable.ValueFilter("ax[12]"), "a:x@2000=ax2 a:x@1000=ax1"},
		{"cells per row", bigtable.CellsPerRowLimitFilter(2), "a:x@3000=ax3-new a:x@2000=ax2"},
		{"strip", bigtable.ChainFilters(bigtable.FamilyFilter("b"), bigtable.LatestNFilter(1), bigtable.StripValueFilter()), "b:x@3000="},
		{"interleave", bigtable.InterleaveFilters(
			bigtable.ChainFilters(bigtable.FamilyFilter("a"), bigtable.ColumnFilter("y"), bigtable.LatestNFilter(1)),
			bigtable.ChainFilters(bigtable.FamilyFilter("b"), bigtable.LatestNFilter(1))), "a:y@3000=ay3 b:x@3000=bx3"},
		{"condition", bigtable.ConditionFilter(bigtable.ValueFilter("bx1"), bigtable.ChainFilters(bigtable.FamilyFilter("b"), bigtable.LatestNFilter(1)), bigtable.BlockAllFilter()), "b:x@3000=bx3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			row, err := tbl.ReadRow(context.Background(), "r", bigtable.RowFilter(c.filter))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, fam := range []string{"a", "b"} {
				for _, it := range row[fam] {
					got = append(got, fmt.Sprintf("%s@%d=%s", it.Column, it.Timestamp, it.Value))
				}
			}
			if strings.Join(got, " ") != c.want {
				t.Fatalf("got  %s\nwant %s", strings.Join(got, " "), c.want)
			}
		})
	}
	// A bad regex is the client's fault.
	_, err = tbl.ReadRow(context.Background(), "r", bigtable.RowFilter(bigtable.ValueFilter("[")))
	wantCode(t, err, codes.InvalidArgument)
}

func TestTimestampsAndDeletes(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": nil, "other": nil})

	// Sub-millisecond precision is refused, with a message that says why.
	// (The Go client truncates before sending, so this goes through the
	// generated client.)
	raw := env.raw(t)
	setCell := func(ts int64, origin btpb.Mutation_TimestampOrigin) error {
		_, err := raw.MutateRow(ctx, &btpb.MutateRowRequest{TableName: tableName("t"), RowKey: []byte("r"), Mutations: []*btpb.Mutation{{
			TimestampOrigin: origin,
			Mutation:        &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{FamilyName: "cf", ColumnQualifier: []byte("q"), TimestampMicros: ts, Value: []byte("v")}},
		}}})
		return err
	}
	err := setCell(3023483279876543, btpb.Mutation_TIMESTAMP_ORIGIN_UNSPECIFIED)
	wantCode(t, err, codes.InvalidArgument)
	if !strings.Contains(err.Error(), "millisecond") {
		t.Fatalf("message does not explain: %v", err)
	}
	if err := setCell(3023483279876000, btpb.Mutation_USER_SPECIFIED); err != nil {
		t.Fatal(err)
	}
	// A timestamp the client library generated is truncated, not refused.
	if err := setCell(3023483279877543, btpb.Mutation_CLIENT_AUTO_GENERATED); err != nil {
		t.Fatal(err)
	}
	row, _ := tbl.ReadRow(ctx, "r", bigtable.RowFilter(bigtable.ColumnFilter("q")))
	if len(row["cf"]) != 2 || row["cf"][0].Timestamp != 3023483279877000 {
		t.Fatalf("cells %v", row["cf"])
	}

	// Server time is the fake clock's, truncated to the millisecond.
	m := bigtable.NewMutation()
	m.Set("cf", "now", bigtable.ServerTime, []byte("v"))
	if err := tbl.Apply(ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	row, _ = tbl.ReadRow(ctx, "r", bigtable.RowFilter(bigtable.ColumnFilter("now")))
	if got, want := int64(row["cf"][0].Timestamp), env.clock.Now().UnixMilli()*1000; got != want {
		t.Fatalf("server timestamp %d, want %d", got, want)
	}

	// Unknown family: NotFound, and nothing of the mutation is written.
	m = bigtable.NewMutation()
	m.Set("cf", "partial", 1000, []byte("v"))
	m.Set("nope", "q", 1000, []byte("v"))
	wantCode(t, tbl.Apply(ctx, "r", m), codes.NotFound)
	if row, _ := tbl.ReadRow(ctx, "r", bigtable.RowFilter(bigtable.ColumnFilter("partial"))); len(row) != 0 {
		t.Fatalf("half of a failed mutation was written: %v", row)
	}

	// Delete a time range of one column.
	for ts := 1; ts <= 4; ts++ {
		set(t, tbl, "d", "cf", "c", bigtable.Timestamp(ts*1000), "v")
	}
	set(t, tbl, "d", "other", "c", 1000, "v")
	m = bigtable.NewMutation()
	m.DeleteTimestampRange("cf", "c", 2000, 4000)
	if err := tbl.Apply(ctx, "d", m); err != nil {
		t.Fatal(err)
	}
	row, _ = tbl.ReadRow(ctx, "d")
	var ts []int64
	for _, it := range row["cf"] {
		ts = append(ts, int64(it.Timestamp))
	}
	if fmt.Sprint(ts) != "[4000 1000]" {
		t.Fatalf("after range delete: %v", ts)
	}
	m = bigtable.NewMutation()
	m.DeleteCellsInFamily("cf")
	tbl.Apply(ctx, "d", m)
	row, _ = tbl.ReadRow(ctx, "d")
	if len(row["cf"]) != 0 || len(row["other"]) != 1 {
		t.Fatalf("after family delete: %v", row)
	}
	// A set then a row delete in one mutation leaves nothing.
	m = bigtable.NewMutation()
	m.Set("cf", "x", 1000, []byte("v"))
	m.DeleteRow()
	tbl.Apply(ctx, "d", m)
	if row, _ := tbl.ReadRow(ctx, "d"); len(row) != 0 {
		t.Fatalf("after delete row: %v", row)
	}
}

func TestApplyBulkReportsEachEntry(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": nil})
	good := bigtable.NewMutation()
	good.Set("cf", "q", 1000, []byte("v"))
	badFam := bigtable.NewMutation()
	badFam.Set("nope", "q", 1000, []byte("v"))
	errs, err := tbl.ApplyBulk(context.Background(), []string{"r1", "r2", "r4"}, []*bigtable.Mutation{good, badFam, good})
	if err != nil {
		t.Fatal(err)
	}
	if errs == nil || errs[0] != nil || errs[2] != nil {
		t.Fatalf("errs = %v", errs)
	}
	wantCode(t, errs[1], codes.NotFound)
	// A bad timestamp, sent raw (the client library truncates its own).
	stream, err := env.raw(t).MutateRows(context.Background(), &btpb.MutateRowsRequest{TableName: tableName("t"), Entries: []*btpb.MutateRowsRequest_Entry{
		{RowKey: []byte("r3"), Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{FamilyName: "cf", ColumnQualifier: []byte("q"), TimestampMicros: 1001}}}}},
		{RowKey: []byte("r5"), Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{FamilyName: "cf", ColumnQualifier: []byte("q"), TimestampMicros: 1000}}}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if c := codes.Code(resp.Entries[0].Status.Code); c != codes.InvalidArgument || resp.Entries[1].Status.Code != 0 {
		t.Fatalf("entries %v", resp.Entries)
	}
	if got := rowKeys(readAll(t, tbl, bigtable.InfiniteRange(""))); fmt.Sprint(got) != "[r1 r4 r5]" {
		t.Fatalf("rows %v", got)
	}
}

func TestCheckAndMutate(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": nil})
	set(t, tbl, "r", "cf", "state", 1000, "open")
	yes := bigtable.NewMutation()
	yes.Set("cf", "result", 1000, []byte("matched"))
	no := bigtable.NewMutation()
	no.Set("cf", "result", 1000, []byte("not matched"))
	var matched bool
	cond := bigtable.NewCondMutation(bigtable.ValueFilter("open"), yes, no)
	if err := tbl.Apply(ctx, "r", cond, bigtable.GetCondMutationResult(&matched)); err != nil {
		t.Fatal(err)
	}
	row, _ := tbl.ReadRow(ctx, "r", bigtable.RowFilter(bigtable.ColumnFilter("result")))
	if !matched || string(row["cf"][0].Value) != "matched" {
		t.Fatalf("matched=%v row=%v", matched, row)
	}
	cond = bigtable.NewCondMutation(bigtable.ValueFilter("closed"), yes, no)
	tbl.Apply(ctx, "r", cond, bigtable.GetCondMutationResult(&matched))
	row, _ = tbl.ReadRow(ctx, "r", bigtable.RowFilter(bigtable.ColumnFilter("result")))
	if matched || string(row["cf"][0].Value) != "not matched" {
		t.Fatalf("matched=%v row=%v", matched, row)
	}
	// No predicate: matches when the row has any cell.
	cond = bigtable.NewCondMutation(nil, yes, no)
	tbl.Apply(ctx, "empty", cond, bigtable.GetCondMutationResult(&matched))
	if matched {
		t.Fatal("empty row matched a nil predicate")
	}
}

func TestReadModifyWriteConcurrentIncrementsLoseNothing(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": nil})
	const workers, each = 8, 25
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				rmw := bigtable.NewReadModifyWrite()
				rmw.Increment("cf", "n", 1)
				if _, err := tbl.ApplyReadModifyWrite(ctx, "counter", rmw); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	rmw := bigtable.NewReadModifyWrite()
	rmw.Increment("cf", "n", 0)
	rmw.AppendValue("cf", "s", []byte("ab"))
	row, err := tbl.ApplyReadModifyWrite(ctx, "counter", rmw)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	var s string
	for _, it := range row["cf"] {
		switch it.Column {
		case "cf:n":
			n = int64(binary.BigEndian.Uint64(it.Value))
		case "cf:s":
			s = string(it.Value)
		}
	}
	if n != workers*each || s != "ab" {
		t.Fatalf("n=%d s=%q", n, s)
	}
	// Incrementing a value that is not 8 bytes is refused.
	set(t, tbl, "text", "cf", "n", 1000, "abc")
	rmw = bigtable.NewReadModifyWrite()
	rmw.Increment("cf", "n", 1)
	_, err = tbl.ApplyReadModifyWrite(ctx, "text", rmw)
	wantCode(t, err, codes.FailedPrecondition)
}

// TestLargeValueRoundTrips: values over 1 MiB are split into value_size
// chunks. A 3 MiB cell reads back through the test's client (dialled with
// gRPC's default 4 MiB message limit); a
// 5 MiB cell reads back through a client dialled with the limit the library
// uses for production (the Go client refuses rows that span responses, so a
// row must fit in one message).
func TestLargeValueRoundTrips(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	tbl := env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": nil})
	for _, size := range []int{3 << 20, 5 << 20} {
		big := bytes.Repeat([]byte("0123456789abcdef"), size/16)
		m := bigtable.NewMutation()
		m.Set("cf", "big", 1000, big)
		m.Set("cf", "small", 1000, []byte("s"))
		row := fmt.Sprintf("r%d", size)
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
		var got bigtable.Row
		var err error
		if size < 4<<20 {
			got, err = tbl.ReadRow(ctx, row)
		} else {
			conn, derr := grpc.NewClient(env.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
			if derr != nil {
				t.Fatal(derr)
			}
			defer conn.Close()
			c, cerr := bigtable.NewClientWithConfig(ctx, testProject, testInstance, bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
			if cerr != nil {
				t.Fatal(cerr)
			}
			defer c.Close()
			got, err = c.Open("t").ReadRow(ctx, row)
		}
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		if len(got["cf"]) != 2 || !bytes.Equal(got["cf"][0].Value, big) || string(got["cf"][1].Value) != "s" {
			t.Fatalf("%d-byte value did not round trip: %d cells", size, len(got["cf"]))
		}
	}
}

func TestSampleRowKeys(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	conf := &bigtable.TableConf{TableID: "t", SplitKeys: []string{"m", "f"}, ColumnFamilies: map[string]bigtable.Family{"cf": {}}}
	if err := env.admin.CreateTableFromConf(context.Background(), conf); err != nil {
		t.Fatal(err)
	}
	keys, err := env.client.Open("t").SampleRowKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys) != "[f m]" {
		t.Fatalf("sample keys %q", keys)
	}
}
