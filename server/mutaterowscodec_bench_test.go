package server

import (
	"fmt"
	"testing"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// BenchmarkMutateRowsCodec: the codec's share of one bulk write (100 rows
// of one 100-byte SetCell), no commit: the request in one pooled buffer,
// as gRPC reads one HTTP/2 frame, handed to the server's codec, which
// keeps its bytes; then every entry and SetCell read from them as the
// engine reads them, and the bytes given back as the handler gives them.
// One op is one request.
//
//	go test -run '^$' -bench MutateRowsCodec -benchmem ./server
func BenchmarkMutateRowsCodec(b *testing.B) {
	srv, _ := benchWriteServer(b)
	req := &btpb.MutateRowsRequest{TableName: tableName("bench")}
	for i := range 100 {
		req.Entries = append(req.Entries, &btpb.MutateRowsRequest_Entry{RowKey: []byte(fmt.Sprintf("row%06d", i)),
			Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{
				FamilyName: "f", ColumnQualifier: []byte("c"), TimestampMicros: 1000, Value: make([]byte, 100)}}}}})
	}
	enc, _ := proto.Marshal(req)
	codec := newMeteredCodec(srv.sec)
	pool := &dirtyPool{}
	var mu table.Mutation
	b.ReportAllocs()
	for b.Loop() {
		data := mem.BufferSlice{mem.Copy(enc, pool)}
		var r btpb.MutateRowsRequest
		if err := codec.Unmarshal(data, &r); err != nil {
			b.Fatal(err)
		}
		data.Free() // gRPC's, once the codec returns
		m, _ := srv.sec.meters.take(&r)
		srv.sec.inflight.Add(-m.n)
		w := srv.sec.wire.take(&r)
		if w == nil {
			b.Fatal("the codec did not keep the request's bytes")
		}
		w.Rewind()
		n := 0
		for {
			if _, _, ok := w.NextEntry(); !ok {
				break
			}
			for w.NextMutation(&mu) {
				n += len(mu.Value)
			}
		}
		if n != 100*100 {
			b.Fatalf("read %d bytes of values", n)
		}
		w.release()
	}
}
