package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// BenchmarkPointReadServer is ebbbench's point reads in this process: a
// table of 200,000 rows of one 100-byte cell, read one random row a call.
// "handler" calls the ReadRows handler with the request the official
// client's ReadRow sends (one row key, rows_limit 1) and a stream that
// takes the response: ebbtable's own handling and the engine's read,
// without gRPC. "grpc" is ReadRow through the official client over
// loopback, client and server in this process (its allocations and CPU
// include the client's, which stay the same between builds).
//
//	go test -run '^$' -bench PointReadServer -benchmem ./server
//
// cpu-µs/op is the process's CPU time a read.
func BenchmarkPointReadServer(b *testing.B) {
	srv := startServer(b, Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: b.TempDir(), FullMemtable: true})
	const rows = 200_000
	inst := "projects/" + testProject + "/instances/" + testInstance
	eng := srv.Engine()
	if _, err := eng.CreateTable(inst, "bench", table.TableSpec{Families: []table.FamilySpec{{Name: "f", GC: gcrule.MustParse("never")}}}); err != nil {
		b.Fatal(err)
	}
	key := func(i int) []byte { return []byte(fmt.Sprintf("user%012d", i)) }
	now := clock.MillisTruncated(clock.Real{}.Now())
	for r := 0; r < rows; r += 100 {
		batch := make([]table.RowMutation, 0, 100)
		for i := r; i < r+100; i++ {
			batch = append(batch, table.RowMutation{Row: key(i), Mutations: []table.Mutation{{Kind: table.SetCell, Family: "f", Qualifier: []byte("c"), Timestamp: now, Value: make([]byte, 100)}}})
		}
		if _, err := eng.MutateRows(inst, "bench", batch); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([][]byte, 1<<16)
	for i := range order {
		order[i] = key(rng.IntN(rows))
	}
	b.Run("handler", func(b *testing.B) {
		d := &dataServer{s: srv}
		// The context of a call whose headers hold none of ebbtable's, as
		// the tap marks it.
		ctx := markPlainCall(metadata.NewIncomingContext(context.Background(), metadata.MD{}), metadata.MD{})
		st := &takeReadRows{ctx: ctx}
		req := &btpb.ReadRowsRequest{TableName: tableName("bench"), Rows: &btpb.RowSet{RowKeys: [][]byte{nil}}, RowsLimit: 1}
		b.ReportAllocs()
		cpu0 := processCPU()
		i := 0
		for b.Loop() {
			req.Rows.RowKeys[0] = order[i%len(order)]
			i++
			st.n = 0
			if err := d.ReadRows(req, st); err != nil || st.n != 1 {
				b.Fatalf("%d responses: %v", st.n, err)
			}
		}
		b.ReportMetric(float64(processCPU()-cpu0)/float64(i)/1e3, "cpu-µs/op")
	})
	b.Run("grpc", func(b *testing.B) {
		client, _ := testkit.Clients(b, srv.Addr(), testProject, testInstance, "")
		tbl := client.Open("bench")
		ctx := context.Background()
		b.ReportAllocs()
		cpu0 := processCPU()
		i := 0
		for b.Loop() {
			k := order[i%len(order)]
			i++
			row, err := tbl.ReadRow(ctx, string(k))
			if err != nil || len(row["f"]) != 1 {
				b.Fatalf("read %v: %v", row, err)
			}
		}
		b.ReportMetric(float64(processCPU()-cpu0)/float64(i)/1e3, "cpu-µs/op")
	})
}

// takeReadRows is a ReadRows stream that counts the responses sent.
type takeReadRows struct {
	grpc.ServerStream
	ctx context.Context
	n   int
}

func (s *takeReadRows) Context() context.Context { return s.ctx }
func (s *takeReadRows) SendMsg(m any) error {
	if _, ok := m.(*wireMessage); !ok {
		return fmt.Errorf("sent a %T, not a wire message", m)
	}
	s.n++
	return nil
}
func (s *takeReadRows) Send(*btpb.ReadRowsResponse) error { s.n++; return nil }
