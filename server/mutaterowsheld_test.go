package server

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// TestMutateRowsHeldCountsCapacity: a bulk write kept in gRPC's received
// buffer counts in flight what it holds — the buffer's capacity from the
// request on, a pooled 4 KiB for a request of 2.1 KB — not the request's
// length, and gives it back once when its call ends (nothing in flight
// after). Under a bound that takes the request's length but not the
// buffer's capacity, the request is copied instead: its length is
// counted and the buffer goes back at once.
func TestMutateRowsHeldCountsCapacity(t *testing.T) {
	t.Parallel()
	req := &btpb.MutateRowsRequest{TableName: tableName("t"), Entries: []*btpb.MutateRowsRequest_Entry{{RowKey: []byte("r"),
		Mutations: []*btpb.Mutation{setCellMutation("cf", []byte("q"), bytes.Repeat([]byte("v"), 2<<10), 1000)}}}}
	enc, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		bound int64 // --max-inflight-bytes; 0: the default
		held  bool
	}{{"held", 0, true}, {"copied", 3000, false}} {
		t.Run(c.name, func(t *testing.T) {
			pool := &poisonPool{out: map[*[]byte]bool{}}
			knobs := &testKnobs{}
			knobs.bufferPool.set(pool)
			env := newTestEnv(t, func(o *Options) { o.knobs = knobs; o.Security.MaxInflightBytes = c.bound })
			env.createTable(t, "t", map[string]bigtable.GCPolicy{"cf": nil})
			conn := plainConn(t, env.srv.Addr())
			ctx, cancel := context.WithCancel(context.Background())
			st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/google.bigtable.v2.Bigtable/MutateRows")
			if err != nil {
				t.Fatal(err)
			}
			if err := st.SendMsg(req); err != nil {
				t.Fatal(err)
			}
			// The codec took the request; the call waits for the end of
			// its requests, which does not come.
			waitFor(t, "the request taken", func() bool { return env.srv.sec.wire.len() == 1 })
			// The server's buffer the request lies in, and where in it.
			var in *[]byte
			at := -1
			pool.mu.Lock()
			for b := range pool.out {
				if i := bytes.Index(*b, enc); i >= 0 {
					in, at = b, i
				}
			}
			pool.mu.Unlock()
			want := int64(len(enc))
			if c.held {
				if in == nil {
					t.Fatal("no buffer of the server's holds the request")
				}
				if want = int64(cap(*in) - at); want <= int64(len(enc)) {
					t.Fatalf("the request's buffer: %d bytes from the request on, the request %d: the test tests nothing", want, len(enc))
				}
			} else if in != nil {
				t.Fatalf("a buffer of %d bytes still holds the request under a bound of %d", cap(*in), c.bound)
			}
			if got := env.srv.sec.inflight.Load(); got != want {
				t.Errorf("%d bytes in flight for a %d-byte request, want %d", got, len(enc), want)
			}
			cancel()
			eventually(t, "nothing in flight after the call", func() (bool, string) {
				n := env.srv.sec.inflight.Load()
				return n == 0 && env.srv.sec.wire.len() == 0, fmt.Sprintf("%d bytes in flight, %d requests held", n, env.srv.sec.wire.len())
			})
		})
	}
}
