package server

import (
	"context"
	"testing"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/clock"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkGRPCCall is one call over loopback gRPC, client and server in
// this process: a unary PingAndWarm, and a ReadRows of a missing row (a
// stream). Its allocations per call, which the client's share keeps
// constant, compare what the server's per-call handling allocates
// (interceptors, codec, buffer pool): go test -run '^$' -bench GRPCCall
// -benchmem ./server
func BenchmarkGRPCCall(b *testing.B) {
	srv, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: b.TempDir(), Clock: clock.NewFake(time.Now())})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	c := btpb.NewBigtableClient(conn)
	inst := "projects/" + testProject + "/instances/" + testInstance
	ctx := context.Background()
	b.Run("unary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.PingAndWarm(ctx, &btpb.PingAndWarmRequest{Name: inst}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		req := &btpb.ReadRowsRequest{TableName: inst + "/tables/missing", Rows: &btpb.RowSet{RowKeys: [][]byte{[]byte("r")}}}
		for b.Loop() {
			s, err := c.ReadRows(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := s.Recv(); err != nil {
					break
				}
			}
		}
	})
}
