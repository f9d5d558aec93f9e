package server

import (
	"context"
	"io"
	"testing"
	"unicode/utf8"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// FuzzSQLRPC sends PrepareQuery with arbitrary SQL and parameter types, then
// ExecuteQuery with an arbitrary request (its prepared query the one just
// made unless the input brings one), to an in-process server. No handler
// may panic; bad SQL and bad requests are INVALID_ARGUMENT (or
// FAILED_PRECONDITION for a plan the server calls stale, NOT_FOUND for an
// unknown app profile), never INTERNAL.
//
//	go test -run XXX -fuzz FuzzSQLRPC -fuzztime 60s -parallel 1 ./server
func FuzzSQLRPC(f *testing.F) {
	i64 := &btpb.Type{Kind: &btpb.Type_Int64Type{Int64Type: &btpb.Type_Int64{}}}
	arr := &btpb.Type{Kind: &btpb.Type_ArrayType{ArrayType: &btpb.Type_Array{ElementType: &btpb.Type{Kind: &btpb.Type_BytesType{BytesType: &btpb.Type_Bytes{}}}}}}
	add := func(sql string, types map[string]*btpb.Type, exec *btpb.ExecuteQueryRequest) {
		pb, _ := proto.Marshal(&btpb.PrepareQueryRequest{ParamTypes: types})
		eb, _ := proto.Marshal(exec)
		f.Add(sql, pb, eb)
	}
	add("SELECT _key, cf['q'] AS q FROM t(with_history => TRUE) WHERE _key >= 'a'", nil, &btpb.ExecuteQueryRequest{})
	add("SELECT @n + 1, @k FROM t WHERE _key IN UNNEST(@k)", map[string]*btpb.Type{"n": i64, "k": arr},
		&btpb.ExecuteQueryRequest{Params: map[string]*btpb.Value{"n": {Kind: &btpb.Value_IntValue{IntValue: 1}}, "k": {Kind: &btpb.Value_ArrayValue{ArrayValue: &btpb.ArrayValue{Values: []*btpb.Value{{Kind: &btpb.Value_BytesValue{BytesValue: []byte("a")}}, {}}}}}}})
	add("SELECT COUNT(*) FROM t", nil, &btpb.ExecuteQueryRequest{ResumeToken: []byte("ebr1\x00\x00\x00\x00\x00\x00\x00\x01")})
	add("SELECT 1", nil, &btpb.ExecuteQueryRequest{PreparedQuery: []byte("ebq1\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0a\x02xx")})
	fs := newFuzzServer(f)
	ok := map[codes.Code]bool{codes.OK: true, codes.InvalidArgument: true, codes.FailedPrecondition: true, codes.NotFound: true}
	f.Fuzz(func(t *testing.T, sql string, prepBytes, execBytes []byte) {
		ctx := context.Background()
		prep := &btpb.PrepareQueryRequest{}
		exec := &btpb.ExecuteQueryRequest{}
		if !utf8.ValidString(sql) || proto.Unmarshal(prepBytes, prep) != nil || proto.Unmarshal(execBytes, exec) != nil {
			return // not a request a client can send: proto strings are UTF-8
		}
		prep.InstanceName, prep.Query = fuzzInstance, sql
		prep.DataFormat = &btpb.PrepareQueryRequest_ProtoFormat{ProtoFormat: &btpb.ProtoFormat{}}
		resp, err := fs.data.PrepareQuery(ctx, prep)
		if p := fs.log.take(); len(p) > 0 {
			t.Fatalf("PrepareQuery(%q) panicked: %s", sql, p[0])
		}
		if !ok[status.Code(err)] {
			t.Fatalf("PrepareQuery(%q): %v", sql, err)
		}
		exec.InstanceName = fuzzInstance
		if len(exec.PreparedQuery) == 0 && resp != nil {
			exec.PreparedQuery = resp.GetPreparedQuery()
		}
		stream, err := fs.data.ExecuteQuery(ctx, exec)
		for err == nil {
			_, err = stream.Recv()
		}
		if p := fs.log.take(); len(p) > 0 {
			t.Fatalf("ExecuteQuery(%q) panicked: %s", sql, p[0])
		}
		if err != io.EOF && !ok[status.Code(err)] {
			t.Fatalf("ExecuteQuery(%q): %v", sql, err)
		}
	})
}
