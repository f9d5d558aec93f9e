package server

import (
	"fmt"
	"testing"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// BenchmarkMutateRowsCodec: the codec's share of one bulk write
// (benchBulkRequest), no commit: the request in one pooled buffer,
// as gRPC reads one HTTP/2 frame, handed to the server's codec, which
// keeps its bytes; then every entry and SetCell read from them as the
// engine reads them, and the bytes given back as the handler gives them.
// One op is one request.
//
//	go test -run '^$' -bench MutateRowsCodec -benchmem ./server
func BenchmarkMutateRowsCodec(b *testing.B) {
	srv, _ := benchWriteServer(b)
	enc := benchBulkRequest()
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

// BenchmarkMutateRowsParse: the two reads of a bulk write's bytes (the
// request of BenchmarkMutateRowsCodec): the codec's check (count) and the
// engine's read of its entries and SetCells (read). One op is one request.
//
//	go test -run '^$' -bench MutateRowsParse -count 5 ./server
func BenchmarkMutateRowsParse(b *testing.B) {
	enc := benchBulkRequest()
	b.Run("count", func(b *testing.B) {
		for b.Loop() {
			if _, _, _, ok := countMutateRows(enc); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		var mu table.Mutation
		var r btpb.MutateRowsRequest
		w := stashMutateRows(enc, &r)
		for b.Loop() {
			w.Rewind()
			for {
				if _, _, ok := w.NextEntry(); !ok {
					break
				}
				for w.NextMutation(&mu) {
				}
			}
		}
	})
}

// benchBulkRequest is the encoding of a bulk write as ebbbench's writes
// workload sends it: 100 entries of one 100-byte SetCell, 17-byte row
// keys, a timestamp of today.
func benchBulkRequest() []byte {
	req := &btpb.MutateRowsRequest{TableName: tableName("bench")}
	const ts = 1_795_000_000_000_000 // 2026-11-19, in microseconds
	for i := range 100 {
		req.Entries = append(req.Entries, &btpb.MutateRowsRequest_Entry{RowKey: []byte(fmt.Sprintf("r%016x", uint64(i)*0x9e3779b97f4a7c15)),
			Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{
				FamilyName: "f", ColumnQualifier: []byte("c"), TimestampMicros: ts, Value: make([]byte, 100)}}}}})
	}
	enc, err := proto.Marshal(req)
	if err != nil {
		panic(err)
	}
	return enc
}
