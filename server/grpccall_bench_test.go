package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkGRPCCall is one call over loopback gRPC, client and server in
// this process: a unary PingAndWarm, a MutateRow of one cell to a new row
// (synced), and a ReadRows of a missing row (a stream). Its allocations per call, which the client's share keeps
// constant, compare what the server's per-call handling allocates
// (interceptors, codec, buffer pool): go test -run '^$' -bench GRPCCall
// -benchmem ./server. mutaterow also reports the process's CPU per call.
func BenchmarkGRPCCall(b *testing.B) {
	clk := clock.NewFake(time.Now())
	srv, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: b.TempDir(), Clock: clk})
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
	tables := 0
	b.Run("mutaterow", func(b *testing.B) {
		// A single-row write of one SetCell to a new row (ebbbench's
		// point-writes), each synced: what ebbtable adds per MutateRow.
		// -count runs this again on the same server: a table each time.
		tables++
		name := fmt.Sprintf("w%d", tables)
		if _, err := srv.Engine().CreateTable(inst, name, table.TableSpec{Families: []table.FamilySpec{{Name: "f"}}}); err != nil {
			b.Fatal(err)
		}
		req := &btpb.MutateRowRequest{TableName: inst + "/tables/" + name, Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_SetCell_{
			SetCell: &btpb.Mutation_SetCell{FamilyName: "f", ColumnQualifier: []byte("c"), TimestampMicros: 1_000_000, Value: make([]byte, 100)}}}}}
		// No point reads come, so after a second of writes the writes no
		// longer look up that their cells are new (table.newCellLookups),
		// as in ebbbench's point-writes.
		i := 0
		write := func() {
			i++
			req.RowKey = fmt.Appendf(req.RowKey[:0], "r%09d", i)
			if _, err := c.MutateRow(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		for range 3 {
			write()
			clk.Advance(time.Second)
		}
		b.ReportAllocs()
		c0 := processCPU()
		for b.Loop() {
			i++
			req.RowKey = fmt.Appendf(req.RowKey[:0], "r%09d", i)
			if _, err := c.MutateRow(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		// The process's CPU (client, server, WAL) per call: ns/op is
		// mostly the wait for each write's own sync.
		b.ReportMetric(float64(processCPU()-c0)/float64(b.N)/1e3, "cpu-µs/op")
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
