package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/storage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// panicLog is a slog handler that remembers every "panic in handler"
// record: the recover interceptors turn a handler's panic into Internal and
// log it, and the fuzz target must see the panic, not the status.
type panicLog struct {
	mu     sync.Mutex
	panics []string
}

func (h *panicLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *panicLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *panicLog) WithGroup(string) slog.Handler            { return h }
func (h *panicLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "panic in handler") {
		return nil
	}
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	h.panics = append(h.panics, b.String())
	h.mu.Unlock()
	return nil
}

func (h *panicLog) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.panics
	h.panics = nil
	return p
}

// fuzzServer is one in-process server for a whole fuzz run, with a table
// "t" (families cf: max 3 versions, agg: int64 sum) holding a few rows.
type fuzzServer struct {
	srv   *Server
	log   *panicLog
	data  btpb.BigtableClient
	admin adminpb.BigtableTableAdminClient
	n     int
}

const fuzzInstance = "projects/" + testProject + "/instances/" + testInstance

func newFuzzServer(f *testing.F) *fuzzServer {
	pl := &panicLog{}
	o := Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: f.TempDir(),
		Clock: clock.NewFake(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)), Logger: slog.New(pl)}
	srv, err := New(o)
	if err != nil {
		f.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		f.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		conn.Close()
		srv.Close()
	})
	fs := &fuzzServer{srv: srv, log: pl, data: btpb.NewBigtableClient(conn), admin: adminpb.NewBigtableTableAdminClient(conn)}
	ctx := context.Background()
	if _, err := fs.admin.CreateTable(ctx, fuzzTableRequest("t")); err != nil {
		f.Fatal(err)
	}
	for _, row := range []string{"a", "b", "row\x00\xff"} {
		if _, err := fs.data.MutateRow(ctx, &btpb.MutateRowRequest{TableName: tableName("t"), RowKey: []byte(row), Mutations: []*btpb.Mutation{
			{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{FamilyName: "cf", ColumnQualifier: []byte("q"), TimestampMicros: 1000, Value: []byte("v1")}}},
			{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{FamilyName: "cf", ColumnQualifier: []byte("q"), TimestampMicros: 2000, Value: []byte("v2")}}},
			{Mutation: &btpb.Mutation_AddToCell_{AddToCell: &btpb.Mutation_AddToCell{FamilyName: "agg", ColumnQualifier: &btpb.Value{Kind: &btpb.Value_RawValue{RawValue: []byte("n")}},
				Timestamp: &btpb.Value{Kind: &btpb.Value_RawTimestampMicros{RawTimestampMicros: 0}}, Input: &btpb.Value{Kind: &btpb.Value_IntValue{IntValue: 5}}}}},
		}}); err != nil {
			f.Fatal(err)
		}
	}
	if p := pl.take(); len(p) > 0 {
		f.Fatalf("setting up: %v", p)
	}
	return fs
}

// fuzzTableRequest creates a table like "t".
func fuzzTableRequest(id string) *adminpb.CreateTableRequest {
	i64 := &adminpb.Type{Kind: &adminpb.Type_Int64Type{Int64Type: &adminpb.Type_Int64{}}}
	return &adminpb.CreateTableRequest{Parent: fuzzInstance, TableId: id, Table: &adminpb.Table{ColumnFamilies: map[string]*adminpb.ColumnFamily{
		"cf":  {GcRule: &adminpb.GcRule{Rule: &adminpb.GcRule_MaxNumVersions{MaxNumVersions: 3}}},
		"agg": {ValueType: &adminpb.Type{Kind: &adminpb.Type_AggregateType{AggregateType: &adminpb.Type_Aggregate{InputType: i64, Aggregator: &adminpb.Type_Aggregate_Sum_{Sum: &adminpb.Type_Aggregate_Sum{}}}}}},
	}}}
}

// digest hashes what a request could change: the catalog (table names and
// schemas) and every stored key and value of every table.
func (fs *fuzzServer) digest(t *testing.T) [32]byte {
	t.Helper()
	h := sha256.New()
	e := fs.srv.Engine()
	for _, m := range e.Tables("") {
		fmt.Fprintf(h, "table %s %s next %d dropped %v splits %q\n", m.Instance, m.Name, m.NextFamilyID, m.DroppedFamilies, m.Splits)
		for _, fam := range m.Families {
			fmt.Fprintf(h, "  family %d %s %s %x %s\n", fam.ID, fam.Name, fam.GC.String(), fam.ValueType, fam.Aggregate)
		}
		it, err := e.RawIter(storage.TablePrefix(m.ID), storage.TableEnd(m.ID))
		if err != nil {
			t.Fatal(err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			v, err := it.Value()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(h, "%x=%x\n", it.Key(), v)
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return [32]byte(h.Sum(nil))
}

// fuzzMetaValues are values for the TTL request metadata.
var fuzzMetaValues = []string{"1ms", "2d", "0s", "-1s", "0.5ms", "3000000d", "90s", "true",
	"1767225600000000", "1", "0", "253402300799999999", "1970-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z", "9999-12-31T23:00:00-05:00", "2026-11-23T00:00:01Z"}

// allowedCodes are the documented outcomes of a request; Internal,
// Unknown, Unavailable, DataLoss or a deadline are failures.
var allowedCodes = map[codes.Code]bool{
	codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true, codes.FailedPrecondition: true,
	codes.OutOfRange: true, codes.AlreadyExists: true, codes.ResourceExhausted: true, codes.Unimplemented: true,
	codes.PermissionDenied: true,
}

// The request kinds, chosen by the first byte of the input.
const (
	reqMutateRow = iota
	reqMutateRows
	reqReadRows
	reqCheckAndMutate
	reqReadModifyWrite
	reqModifyColumnFamilies
	reqCreateTable
	reqDropRowRange
	reqKinds
)

var reqNames = [reqKinds]string{"MutateRow", "MutateRows", "ReadRows", "CheckAndMutateRow", "ReadModifyWriteRow", "ModifyColumnFamilies", "CreateTable", "DropRowRange"}

// FuzzRequests sends request messages built from the fuzzer's bytes to one
// in-process server: the first byte picks the RPC, the second whether the
// request's table name is replaced by a real table's (bit 0) and which
// cell-TTL request metadata it carries (bits 1-7), the rest is
// proto.Unmarshal'ed into the request. Pass: no handler panics (the
// recover interceptor's log is watched), every status is a documented one,
// and a refused request changes nothing (catalog and stored cells compare
// equal before and after). Schema changes (ModifyColumnFamilies,
// DropRowRange, CreateTable) run against a scratch table made for the input
// and deleted after it, so inputs stay independent; data requests use "t".
//
//	go test -run XXX -fuzz FuzzRequests -fuzztime 60s -parallel 1 ./server
func FuzzRequests(f *testing.F) {
	add := func(kind int, fix bool, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		flags := byte(0)
		if fix {
			flags = 1
		}
		f.Add(append([]byte{byte(kind), flags}, b...))
		if kind == reqMutateRow || kind == reqReadModifyWrite || kind == reqReadRows {
			for _, meta := range []byte{1<<1 | 0<<3, 2<<1 | 12<<3, 2<<1 | 14<<3, 3<<1 | 7<<3} {
				f.Add(append([]byte{byte(kind), flags | meta}, b...))
			}
		}
	}
	set := func(fam, q string, ts int64, v string) *btpb.Mutation {
		return &btpb.Mutation{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{FamilyName: fam, ColumnQualifier: []byte(q), TimestampMicros: ts, Value: []byte(v)}}}
	}
	add(reqMutateRow, true, &btpb.MutateRowRequest{RowKey: []byte("a"), Mutations: []*btpb.Mutation{set("cf", "q", 3000, "x")}})
	add(reqMutateRow, true, &btpb.MutateRowRequest{RowKey: []byte("a"), Mutations: []*btpb.Mutation{set("cf", "q", 3000, "x"), set("nope", "q", 1000, "y")}})
	add(reqMutateRow, true, &btpb.MutateRowRequest{RowKey: []byte("a"), Mutations: []*btpb.Mutation{set("cf", "q", 1, "x")}})
	add(reqMutateRow, true, &btpb.MutateRowRequest{RowKey: []byte("b"), Mutations: []*btpb.Mutation{
		{Mutation: &btpb.Mutation_DeleteFromColumn_{DeleteFromColumn: &btpb.Mutation_DeleteFromColumn{FamilyName: "cf", ColumnQualifier: []byte("q"),
			TimeRange: &btpb.TimestampRange{StartTimestampMicros: 5000, EndTimestampMicros: 1000}}}}}})
	add(reqMutateRow, false, &btpb.MutateRowRequest{TableName: "projects/x/instances/y/tables/", RowKey: []byte("a")})
	add(reqMutateRows, true, &btpb.MutateRowsRequest{Entries: []*btpb.MutateRowsRequest_Entry{
		{RowKey: []byte("a"), Mutations: []*btpb.Mutation{set("cf", "q", 4000, "z")}}, {RowKey: nil, Mutations: []*btpb.Mutation{set("cf", "q", 4000, "z")}}}})
	add(reqReadRows, true, &btpb.ReadRowsRequest{Filter: &btpb.RowFilter{Filter: &btpb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: 1}}})
	add(reqReadRows, true, &btpb.ReadRowsRequest{Rows: &btpb.RowSet{RowRanges: []*btpb.RowRange{{
		StartKey: &btpb.RowRange_StartKeyClosed{StartKeyClosed: []byte("b")}, EndKey: &btpb.RowRange_EndKeyOpen{EndKeyOpen: []byte("a")}}}}, RowsLimit: -1, Reversed: true})
	add(reqCheckAndMutate, true, &btpb.CheckAndMutateRowRequest{RowKey: []byte("a"),
		PredicateFilter: &btpb.RowFilter{Filter: &btpb.RowFilter_ValueRegexFilter{ValueRegexFilter: []byte("v.*")}},
		TrueMutations:   []*btpb.Mutation{set("cf", "p", 5000, "t")}, FalseMutations: []*btpb.Mutation{set("zz", "p", 5000, "f")}})
	add(reqReadModifyWrite, true, &btpb.ReadModifyWriteRowRequest{RowKey: []byte("a"), Rules: []*btpb.ReadModifyWriteRule{
		{FamilyName: "cf", ColumnQualifier: []byte("q"), Rule: &btpb.ReadModifyWriteRule_IncrementAmount{IncrementAmount: 1}},
		{FamilyName: "cf", ColumnQualifier: []byte("s"), Rule: &btpb.ReadModifyWriteRule_AppendValue{AppendValue: []byte("!")}}}})
	add(reqModifyColumnFamilies, true, &adminpb.ModifyColumnFamiliesRequest{Modifications: []*adminpb.ModifyColumnFamiliesRequest_Modification{
		{Id: "new", Mod: &adminpb.ModifyColumnFamiliesRequest_Modification_Create{Create: &adminpb.ColumnFamily{GcRule: &adminpb.GcRule{Rule: &adminpb.GcRule_MaxAge{MaxAge: durationpb.New(time.Hour)}}}}},
		{Id: "cf", Mod: &adminpb.ModifyColumnFamiliesRequest_Modification_Drop{Drop: true}},
		{Id: "agg", Mod: &adminpb.ModifyColumnFamiliesRequest_Modification_Update{Update: &adminpb.ColumnFamily{GcRule: &adminpb.GcRule{Rule: &adminpb.GcRule_MaxNumVersions{MaxNumVersions: -1}}}}}}})
	add(reqCreateTable, true, &adminpb.CreateTableRequest{TableId: "x", Table: &adminpb.Table{ColumnFamilies: map[string]*adminpb.ColumnFamily{"f": {}}},
		InitialSplits: []*adminpb.CreateTableRequest_Split{{Key: []byte("m")}, {Key: []byte("m")}}})
	add(reqDropRowRange, true, &adminpb.DropRowRangeRequest{Target: &adminpb.DropRowRangeRequest_RowKeyPrefix{RowKeyPrefix: []byte("r")}})
	add(reqDropRowRange, true, &adminpb.DropRowRangeRequest{Target: &adminpb.DropRowRangeRequest_DeleteAllDataFromTable{DeleteAllDataFromTable: false}})
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 2 {
			return
		}
		kind, flags, body := int(in[0])%reqKinds, in[1], in[2:]
		fs.n++
		scratch := fmt.Sprintf("s%d", fs.n)
		if kind == reqModifyColumnFamilies || kind == reqDropRowRange {
			if _, err := fs.admin.CreateTable(context.Background(), fuzzTableRequest(scratch)); err != nil {
				t.Fatal(err)
			}
			fs.copyRows(t, scratch)
		}
		target := "t"
		if kind == reqModifyColumnFamilies || kind == reqDropRowRange {
			target = scratch
		}
		before := fs.digest(t)
		code, refused, desc, err := fs.send(kind, flags, body, target, scratch)
		if err != nil {
			return // the body does not unmarshal into the request
		}
		if p := fs.log.take(); len(p) > 0 {
			t.Fatalf("%s %s: the handler panicked: %s", reqNames[kind], desc, p[0][:min(len(p[0]), 4000)])
		}
		if !allowedCodes[code] {
			t.Fatalf("%s %s: status %v", reqNames[kind], desc, refused)
		}
		if refused != nil {
			if after := fs.digest(t); after != before {
				t.Fatalf("%s %s was refused (%v) but changed the database", reqNames[kind], desc, refused)
			}
		}
		for _, id := range []string{scratch, "x"} {
			_, err := fs.admin.DeleteTable(context.Background(), &adminpb.DeleteTableRequest{Name: tableName(id)})
			if err != nil && status.Code(err) != codes.NotFound {
				t.Fatalf("cleaning up table %s: %v", id, err)
			}
		}
		if kind == reqCreateTable {
			// A table the request created under another name.
			for _, m := range fs.srv.Engine().Tables("") {
				if m.Name != "t" {
					if _, err := fs.admin.DeleteTable(context.Background(), &adminpb.DeleteTableRequest{Name: m.Instance + "/tables/" + m.Name}); err != nil {
						t.Fatalf("cleaning up table %s/%s: %v", m.Instance, m.Name, err)
					}
				}
			}
		}
	})
}

// copyRows gives a scratch table the rows "a" and "b" with cells in both
// families.
func (fs *fuzzServer) copyRows(t *testing.T, id string) {
	t.Helper()
	for _, row := range []string{"a", "r1"} {
		if _, err := fs.data.MutateRow(context.Background(), &btpb.MutateRowRequest{TableName: tableName(id), RowKey: []byte(row), Mutations: []*btpb.Mutation{
			{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{FamilyName: "cf", ColumnQualifier: []byte("q"), TimestampMicros: 1000, Value: []byte("v")}}},
		}}); err != nil {
			t.Fatal(err)
		}
	}
}

// send unmarshals body into the request kind picks, fixes its names as
// asked, sends it and returns the status code and the error (nil when the
// request was carried out; for MutateRows, when any entry was). err is set
// only when body does not unmarshal.
func (fs *fuzzServer) send(kind int, flags byte, body []byte, target, scratch string) (code codes.Code, refused error, desc string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fix := flags&1 != 0
	// Bits 1-2 attach the cell TTL metadata, bits 3-7 pick its value.
	if key := [4]string{"", MetaCellTTL, MetaCellExpireAt, MetaShowExpiry}[flags>>1&3]; key != "" {
		v := fuzzMetaValues[int(flags>>3)%len(fuzzMetaValues)]
		ctx = metadata.AppendToOutgoingContext(ctx, key, v)
		defer func() { desc = key + ": " + v + " " + desc }()
	}
	name := tableName(target)
	var rpcErr error
	switch kind {
	case reqMutateRow:
		var req btpb.MutateRowRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			return 0, nil, "", err
		}
		if fix {
			req.TableName = name
		}
		desc = req.String()
		_, rpcErr = fs.data.MutateRow(ctx, &req)
	case reqMutateRows:
		var req btpb.MutateRowsRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			return 0, nil, "", err
		}
		if fix {
			req.TableName = name
		}
		desc = req.String()
		stream, err := fs.data.MutateRows(ctx, &req)
		if err != nil {
			rpcErr = err
			break
		}
		anyOK := false
		for {
			resp, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				rpcErr = err
				break
			}
			for _, e := range resp.GetEntries() {
				c := codes.Code(e.GetStatus().GetCode())
				if !allowedCodes[c] {
					return c, fmt.Errorf("entry %d: %v %s", e.GetIndex(), c, e.GetStatus().GetMessage()), desc, nil
				}
				if c == codes.OK {
					anyOK = true
				}
			}
		}
		if rpcErr == nil && !anyOK {
			rpcErr = errors.New("every entry refused") // then nothing may change
			return codes.OK, rpcErr, desc, nil
		}
	case reqReadRows:
		var req btpb.ReadRowsRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			return 0, nil, "", err
		}
		if fix {
			req.TableName = name
		}
		desc = req.String()
		stream, err := fs.data.ReadRows(ctx, &req)
		if err != nil {
			rpcErr = err
			break
		}
		for {
			if _, err := stream.Recv(); err != nil {
				if err != io.EOF {
					rpcErr = err
				}
				break
			}
		}
	case reqCheckAndMutate:
		var req btpb.CheckAndMutateRowRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			return 0, nil, "", err
		}
		if fix {
			req.TableName = name
		}
		desc = req.String()
		_, rpcErr = fs.data.CheckAndMutateRow(ctx, &req)
	case reqReadModifyWrite:
		var req btpb.ReadModifyWriteRowRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			return 0, nil, "", err
		}
		if fix {
			req.TableName = name
		}
		desc = req.String()
		_, rpcErr = fs.data.ReadModifyWriteRow(ctx, &req)
	case reqModifyColumnFamilies:
		var req adminpb.ModifyColumnFamiliesRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			return 0, nil, "", err
		}
		if fix {
			req.Name = name
		}
		desc = req.String()
		_, rpcErr = fs.admin.ModifyColumnFamilies(ctx, &req)
	case reqCreateTable:
		var req adminpb.CreateTableRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			return 0, nil, "", err
		}
		if fix {
			req.Parent = fuzzInstance
		}
		desc = req.String()
		_, rpcErr = fs.admin.CreateTable(ctx, &req)
	case reqDropRowRange:
		var req adminpb.DropRowRangeRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			return 0, nil, "", err
		}
		if fix {
			req.Name = name
		}
		desc = req.String()
		_, rpcErr = fs.admin.DropRowRange(ctx, &req)
	}
	if len(desc) > 2000 {
		desc = desc[:2000] + "…"
	}
	return status.Code(rpcErr), rpcErr, desc, nil
}
