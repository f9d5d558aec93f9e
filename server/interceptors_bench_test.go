package server

import (
	"context"
	"testing"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// BenchmarkUnaryWriteOverhead: what the server does for a single-row write
// around its engine call, in process: the codec reads the request's bytes
// (counted in flight, kept beside the request), the unary interceptor
// admits and checks the call, and a handler takes the kept bytes as
// MutateRow does and answers, the answer encoded by the codec. Eight
// goroutines at once, as ebbbench's writers, on the server's shared
// stash and meters.
//
//	go test -run '^$' -bench UnaryWriteOverhead -benchmem ./server
func BenchmarkUnaryWriteOverhead(b *testing.B) {
	srv := startServer(b, Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: b.TempDir()})
	codec := newMeteredCodec(srv.sec)
	intercept := srv.unaryInterceptor()
	enc, err := proto.Marshal(&btpb.MutateRowRequest{TableName: tableName("bench"), RowKey: []byte("row000001"),
		Mutations: []*btpb.Mutation{setCellMutation("f", []byte("c"), make([]byte, 100), 1000)}})
	if err != nil {
		b.Fatal(err)
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/google.bigtable.v2.Bigtable/MutateRow"}
	handler := func(_ context.Context, req any) (any, error) {
		if srv.sec.wire.take(req) == nil {
			b.Error("the request's bytes were not kept")
		}
		return &btpb.MutateRowResponse{}, nil
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4) // 8 goroutines on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var req btpb.MutateRowRequest
			if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(enc)}, &req); err != nil {
				b.Error(err)
				return
			}
			resp, err := intercept(ctx, &req, info, handler)
			if err != nil {
				b.Error(err)
				return
			}
			out, err := codec.Marshal(resp)
			if err != nil {
				b.Error(err)
				return
			}
			out.Free()
		}
	})
}
