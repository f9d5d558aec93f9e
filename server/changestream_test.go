package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/collector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// streamedTable creates a table with a one-day change stream through the
// official admin client.
func (env *testEnv) streamedTable(t *testing.T, name string, families map[string]bigtable.GCPolicy) *bigtable.Table {
	t.Helper()
	conf := &bigtable.TableConf{TableID: name, ColumnFamilies: map[string]bigtable.Family{}, ChangeStreamRetention: 24 * time.Hour}
	for f, p := range families {
		conf.ColumnFamilies[f] = bigtable.Family{GCPolicy: p}
	}
	if err := env.admin.CreateTableFromConf(context.Background(), conf); err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	return env.client.Open(name)
}

// readStream reads a change stream until it ends (end time) and returns the
// data changes and whether it closed with OK.
func readStream(t *testing.T, c btpb.BigtableClient, req *btpb.ReadChangeStreamRequest) ([]*btpb.ReadChangeStreamResponse_DataChange, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := c.ReadChangeStream(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []*btpb.ReadChangeStreamResponse_DataChange
	closed := false
	for {
		resp, err := st.Recv()
		if err == io.EOF {
			if !closed {
				t.Error("stream ended without CloseStream")
			}
			return out, nil
		}
		if err != nil {
			return out, err
		}
		switch r := resp.GetStreamRecord().(type) {
		case *btpb.ReadChangeStreamResponse_DataChange_:
			out = append(out, r.DataChange)
		case *btpb.ReadChangeStreamResponse_CloseStream_:
			if r.CloseStream.GetStatus().GetCode() != 0 || len(r.CloseStream.GetContinuationTokens()) != 0 {
				t.Errorf("close stream %v", r.CloseStream)
			}
			closed = true
		}
	}
}

// endTime is an end time for a read that should see every write so far: a
// second from now, with the clock then moved past it so it is closed.
func (env *testEnv) endTime() *timestamppb.Timestamp {
	env.clock.Advance(time.Second)
	end := env.clock.Now()
	env.clock.Advance(time.Millisecond)
	return timestamppb.New(end)
}

func TestChangeStreamAdminAPI(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	env.streamedTable(t, "cs", map[string]bigtable.GCPolicy{"cf": bigtable.NoGcPolicy()})
	info, err := env.admin.TableInfo(ctx, "cs")
	if err != nil || info.ChangeStreamRetention != 24*time.Hour {
		t.Fatalf("table info %+v, %v", info, err)
	}
	if err := env.admin.UpdateTableWithChangeStream(ctx, "cs", 72*time.Hour); err != nil {
		t.Fatal(err)
	}
	if info, _ = env.admin.TableInfo(ctx, "cs"); info.ChangeStreamRetention != 72*time.Hour {
		t.Errorf("retention after update %v", info.ChangeStreamRetention)
	}
	if err := env.admin.UpdateTableWithChangeStream(ctx, "cs", time.Hour); status.Code(errors.Unwrap(err)) != codes.InvalidArgument && status.Code(err) != codes.InvalidArgument {
		t.Errorf("one-hour retention: %v", err)
	}
	raw := env.raw(t)
	if err := env.admin.UpdateTableDisableChangeStream(ctx, "cs"); err != nil {
		t.Fatal(err)
	}
	if info, _ = env.admin.TableInfo(ctx, "cs"); info.ChangeStreamRetention != nil {
		t.Errorf("retention after disable %v", info.ChangeStreamRetention)
	}
	_, err = readStream(t, raw, &btpb.ReadChangeStreamRequest{TableName: tableName("cs"), EndTime: env.endTime()})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("reading a disabled stream: %v", err)
	}
}

func TestReadChangeStreamFromStartTimeTokensAndEnd(t *testing.T) {
	env := newTestEnv(t)
	ctx := context.Background()
	start := env.clock.Now()
	tbl := env.streamedTable(t, "cs", map[string]bigtable.GCPolicy{"cf": bigtable.MaxVersionsPolicy(1)})
	raw := env.raw(t)

	parts, err := raw.GenerateInitialChangeStreamPartitions(ctx, &btpb.GenerateInitialChangeStreamPartitionsRequest{TableName: tableName("cs")})
	if err != nil {
		t.Fatal(err)
	}
	p, err := parts.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if rr := p.GetPartition().GetRowRange(); len(rr.GetStartKeyClosed()) != 0 || len(rr.GetEndKeyOpen()) != 0 {
		t.Errorf("partition %v is not the whole table", p.GetPartition())
	}
	if _, err := parts.Recv(); err != io.EOF {
		t.Errorf("more than one partition: %v", err)
	}

	write := func(row string, ts int64) {
		t.Helper()
		mut := bigtable.NewMutation()
		mut.Set("cf", "q", bigtable.Timestamp(ts), []byte(row))
		if err := tbl.Apply(ctx, row, mut); err != nil {
			t.Fatal(err)
		}
	}
	base := bigtable.Time(start).TruncateToMilliseconds()
	for i := 0; i < 10; i++ {
		write(string(rune('a'+i)), int64(base)+int64(i)*1000)
	}
	del := bigtable.NewMutation()
	del.DeleteRow()
	if err := tbl.Apply(ctx, "a", del); err != nil {
		t.Fatal(err)
	}
	// Two more versions of "b": the collector removes the older one.
	write("b", int64(base)+20000)
	if _, err := env.srv.collector.RunPass(ctx, collector.Selector{}); err != nil {
		t.Fatal(err)
	}
	end := env.endTime()

	changes, err := readStream(t, raw, &btpb.ReadChangeStreamRequest{
		TableName: tableName("cs"), Partition: wholeTable(),
		StartFrom: &btpb.ReadChangeStreamRequest_StartTime{StartTime: timestamppb.New(start)}, EndTime: end,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 13 {
		t.Fatalf("got %d data changes, want 13", len(changes))
	}
	for i, dc := range changes {
		if i > 0 && !dc.GetCommitTimestamp().AsTime().After(changes[i-1].GetCommitTimestamp().AsTime()) {
			t.Errorf("change %d not after change %d", i, i-1)
		}
		if !dc.GetDone() || dc.GetToken() == "" || dc.GetEstimatedLowWatermark() == nil {
			t.Errorf("change %d: %v", i, dc)
		}
	}
	if set := changes[0].GetChunks()[0].GetMutation().GetSetCell(); string(changes[0].GetRowKey()) != "a" || changes[0].GetType() != btpb.ReadChangeStreamResponse_DataChange_USER ||
		set.GetFamilyName() != "cf" || string(set.GetValue()) != "a" || changes[0].GetSourceClusterId() == "" {
		t.Errorf("first change %v", changes[0])
	}
	if changes[10].GetChunks()[0].GetMutation().GetDeleteFromRow() == nil {
		t.Errorf("delete row recorded as %v", changes[10])
	}
	gc := changes[12]
	if gc.GetType() != btpb.ReadChangeStreamResponse_DataChange_GARBAGE_COLLECTION || string(gc.GetRowKey()) != "b" || gc.GetSourceClusterId() != "" {
		t.Errorf("gc change %v", gc)
	}
	if dfc := gc.GetChunks()[0].GetMutation().GetDeleteFromColumn(); dfc.GetTimeRange().GetStartTimestampMicros() != int64(base)+1000 {
		t.Errorf("gc deleted %v, want the old version of b", dfc)
	}

	// Resume after the fifth change while more writes land: the two reads
	// together hold every change exactly once.
	for i := 0; i < 7; i++ {
		write(string(rune('k'+i)), int64(base)+int64(i)*1000)
	}
	end = env.endTime()
	rest, err := readStream(t, raw, &btpb.ReadChangeStreamRequest{
		TableName: tableName("cs"), Partition: wholeTable(), EndTime: end,
		StartFrom: &btpb.ReadChangeStreamRequest_ContinuationTokens{ContinuationTokens: &btpb.StreamContinuationTokens{
			Tokens: []*btpb.StreamContinuationToken{{Partition: wholeTable(), Token: changes[4].GetToken()}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, dc := range append(changes[:5:5], rest...) {
		seen[dc.GetToken()]++
	}
	if len(rest) != 13-5+7 || len(seen) != 20 {
		t.Errorf("resumed read got %d changes (%d distinct overall), want %d and 20", len(rest), len(seen), 13-5+7)
	}
	for tok, n := range seen {
		if n != 1 {
			t.Errorf("change %s delivered %d times", tok, n)
		}
	}

	// Errors: a bad token, a future start, a start past retention.
	_, err = readStream(t, raw, &btpb.ReadChangeStreamRequest{TableName: tableName("cs"),
		StartFrom: &btpb.ReadChangeStreamRequest_ContinuationTokens{ContinuationTokens: &btpb.StreamContinuationTokens{
			Tokens: []*btpb.StreamContinuationToken{{Partition: wholeTable(), Token: "nope"}}}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad token: %v", err)
	}
	_, err = readStream(t, raw, &btpb.ReadChangeStreamRequest{TableName: tableName("cs"),
		StartFrom: &btpb.ReadChangeStreamRequest_StartTime{StartTime: timestamppb.New(env.clock.Now().Add(time.Hour))}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("future start: %v", err)
	}
	env.clock.Advance(25 * time.Hour)
	_, err = readStream(t, raw, &btpb.ReadChangeStreamRequest{TableName: tableName("cs"),
		StartFrom: &btpb.ReadChangeStreamRequest_StartTime{StartTime: timestamppb.New(start)}})
	if status.Code(err) != codes.OutOfRange {
		t.Errorf("start before retention: %v", err)
	}
}

func TestReadChangeStreamHeartbeatsAndTailing(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tbl := env.streamedTable(t, "cs", map[string]bigtable.GCPolicy{"cf": bigtable.NoGcPolicy()})
	raw := env.raw(t)
	st, err := raw.ReadChangeStream(ctx, &btpb.ReadChangeStreamRequest{
		TableName: tableName("cs"), Partition: wholeTable(),
		StartFrom:         &btpb.ReadChangeStreamRequest_StartTime{StartTime: timestamppb.New(env.clock.Now())},
		HeartbeatDuration: durationpb.New(time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Time moves on the fake clock while the test waits for messages.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				env.clock.Advance(100 * time.Millisecond)
			}
		}
	}()
	next := func() *btpb.ReadChangeStreamResponse {
		t.Helper()
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	hb := next().GetHeartbeat()
	if hb == nil || hb.GetContinuationToken().GetToken() == "" || hb.GetEstimatedLowWatermark() == nil {
		t.Fatalf("want a heartbeat first, got %v", hb)
	}
	mut := bigtable.NewMutation()
	mut.Set("cf", "q", bigtable.ServerTime, []byte("live"))
	if err := tbl.Apply(ctx, "tail", mut); err != nil {
		t.Fatal(err)
	}
	for {
		resp := next()
		if dc := resp.GetDataChange(); dc != nil {
			if string(dc.GetRowKey()) != "tail" {
				t.Errorf("tailed %v", dc)
			}
			if !dc.GetCommitTimestamp().AsTime().After(hb.GetEstimatedLowWatermark().AsTime()) {
				t.Errorf("change at %v not after the earlier low watermark %v", dc.GetCommitTimestamp().AsTime(), hb.GetEstimatedLowWatermark().AsTime())
			}
			break
		}
	}
	// Resuming from the first heartbeat's token finds the write.
	ctx2, cancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel2()
	st2, err := raw.ReadChangeStream(ctx2, &btpb.ReadChangeStreamRequest{TableName: tableName("cs"),
		StartFrom: &btpb.ReadChangeStreamRequest_ContinuationTokens{ContinuationTokens: &btpb.StreamContinuationTokens{
			Tokens: []*btpb.StreamContinuationToken{hb.GetContinuationToken()}}}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := st2.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if dc := resp.GetDataChange(); dc != nil {
			if string(dc.GetRowKey()) != "tail" {
				t.Errorf("resumed at %v", dc)
			}
			break
		}
	}
}

func TestReadChangeStreamChunksLargeValues(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	start := env.clock.Now()
	tbl := env.streamedTable(t, "big", map[string]bigtable.GCPolicy{"cf": bigtable.NoGcPolicy()})
	big := make([]byte, 2*maxChunkValue+12345)
	for i := range big {
		big[i] = byte(i * 7)
	}
	mut := bigtable.NewMutation()
	mut.Set("cf", "big", 1000, big)
	mut.Set("cf", "small", 1000, []byte("s"))
	if err := tbl.Apply(ctx, "r", mut); err != nil {
		t.Fatal(err)
	}
	msgs, err := readStream(t, env.raw(t), &btpb.ReadChangeStreamRequest{TableName: tableName("big"), EndTime: env.endTime(),
		StartFrom: &btpb.ReadChangeStreamRequest_StartTime{StartTime: timestamppb.New(start)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) < 2 || string(msgs[0].GetRowKey()) != "r" || msgs[0].GetDone() {
		t.Fatalf("want a multi-message change, got %d messages", len(msgs))
	}
	var value []byte
	var others []string
	for i, dc := range msgs {
		if i > 0 && (dc.GetType() != btpb.ReadChangeStreamResponse_DataChange_CONTINUATION || len(dc.GetRowKey()) != 0) {
			t.Errorf("message %d: type %v row %q", i, dc.GetType(), dc.GetRowKey())
		}
		if dc.GetDone() != (i == len(msgs)-1) || (dc.GetToken() != "") != (i == len(msgs)-1) {
			t.Errorf("message %d: done %v token %q", i, dc.GetDone(), dc.GetToken())
		}
		for _, c := range dc.GetChunks() {
			set := c.GetMutation().GetSetCell()
			if ci := c.GetChunkInfo(); ci != nil {
				if int(ci.GetChunkedValueOffset()) != len(value) || int(ci.GetChunkedValueSize()) != len(big) {
					t.Errorf("chunk info %v after %d bytes", ci, len(value))
				}
				value = append(value, set.GetValue()...)
				continue
			}
			others = append(others, string(set.GetColumnQualifier()))
		}
	}
	if !bytes.Equal(value, big) || len(others) != 1 || others[0] != "small" {
		t.Errorf("reassembled %d of %d bytes, other mods %v", len(value), len(big), others)
	}
}

func TestTailingStreamEndsWhenServerCloses(t *testing.T) {
	env := newTestEnv(t)
	env.streamedTable(t, "cs", map[string]bigtable.GCPolicy{"cf": bigtable.NoGcPolicy()})
	st, err := env.raw(t).ReadChangeStream(context.Background(), &btpb.ReadChangeStreamRequest{TableName: tableName("cs")})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		for {
			if _, err := st.Recv(); err != nil {
				errc <- err
				return
			}
		}
	}()
	start := time.Now()
	if err := env.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v with a tailing stream open", d)
	}
	if err := <-errc; status.Code(err) != codes.Unavailable {
		t.Errorf("tailing stream ended with %v, want Unavailable", err)
	}
}

func TestUpdateTableChangeStreamMasksRaw(t *testing.T) {
	env := newTestEnv(t)
	env.streamedTable(t, "cs", nil)
	conn, err := grpc.NewClient(env.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin := adminpb.NewBigtableTableAdminClient(conn)
	ctx := context.Background()
	update := func(path string, cfg *adminpb.ChangeStreamConfig) (*adminpb.Table, error) {
		t.Helper()
		op, err := admin.UpdateTable(ctx, &adminpb.UpdateTableRequest{
			Table:      &adminpb.Table{Name: tableName("cs"), ChangeStreamConfig: cfg},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{path}},
		})
		if err != nil {
			return nil, err
		}
		if !op.GetDone() {
			t.Fatalf("operation %s not done", op.GetName())
		}
		return admin.GetTable(ctx, &adminpb.GetTableRequest{Name: tableName("cs")})
	}
	tb, err := update("change_stream_config.retention_period", &adminpb.ChangeStreamConfig{RetentionPeriod: durationpb.New(7 * 24 * time.Hour)})
	if err != nil || tb.GetChangeStreamConfig().GetRetentionPeriod().AsDuration() != 7*24*time.Hour {
		t.Fatalf("7-day retention: %v %v", tb, err)
	}
	if _, err := update("change_stream_config", &adminpb.ChangeStreamConfig{RetentionPeriod: durationpb.New(8 * 24 * time.Hour)}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("8-day retention: %v", err)
	}
	// A zero (cleared) retention turns the stream off, like an empty config.
	if tb, err = update("change_stream_config.retention_period", &adminpb.ChangeStreamConfig{RetentionPeriod: durationpb.New(0)}); err != nil || tb.GetChangeStreamConfig() != nil {
		t.Errorf("zero retention: %v %v", tb.GetChangeStreamConfig(), err)
	}
	if tb, err = update("change_stream_config", &adminpb.ChangeStreamConfig{RetentionPeriod: durationpb.New(24 * time.Hour)}); err != nil || tb.GetChangeStreamConfig() == nil {
		t.Errorf("re-enable: %v %v", tb, err)
	}
	if tb, err = update("change_stream_config", nil); err != nil || tb.GetChangeStreamConfig() != nil {
		t.Errorf("empty config: %v %v", tb.GetChangeStreamConfig(), err)
	}
}
