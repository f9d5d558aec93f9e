package server

import (
	"context"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestJoinRefusalReleasesRequest: a unary call refused while this cluster
// copies the instance's data (--join) gives back its request's bytes: the
// codec counted them in flight before the interceptor refused the call,
// and none stay counted, nor does the codec's note of the request.
func TestJoinRefusalReleasesRequest(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	env.createTable(t, "t", map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()})
	conn, err := grpc.NewClient(env.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := btpb.NewBigtableClient(conn)
	req := &btpb.MutateRowRequest{TableName: "projects/" + testProject + "/instances/" + testInstance + "/tables/t", RowKey: []byte("r"),
		Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{FamilyName: "f", ColumnQualifier: []byte("c"), TimestampMicros: 1000, Value: []byte("v")}}}}}
	env.srv.replJoinPending.Store(true)
	for range 3 {
		if _, err := c.MutateRow(context.Background(), req); status.Code(err) != codes.Unavailable {
			t.Fatalf("MutateRow while joining: %v, want UNAVAILABLE", err)
		}
	}
	if n := env.srv.sec.inflight.Load(); n != 0 {
		t.Errorf("%d request bytes still counted in flight after refused calls", n)
	}
	env.srv.sec.meters.mu.Lock()
	left := len(env.srv.sec.meters.m)
	env.srv.sec.meters.mu.Unlock()
	if left != 0 {
		t.Errorf("%d requests' meters left behind", left)
	}
	env.srv.replJoinPending.Store(false)
	if _, err := c.MutateRow(context.Background(), req); err != nil {
		t.Fatalf("MutateRow once joined: %v", err)
	}
}

// TestInterceptorsRecoverPanics: a handler's panic, unary or streaming,
// answers INTERNAL naming the method instead of crashing the process, and
// the request's bytes are no longer counted in flight nor, a single-row
// write's kept by the codec, held.
func TestInterceptorsRecoverPanics(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	const method = "/google.bigtable.v2.Bigtable/MutateRow"
	req := &btpb.MutateRowRequest{TableName: "projects/" + testProject + "/instances/" + testInstance + "/tables/t", RowKey: []byte("r"),
		Mutations: []*btpb.Mutation{setCellMutation("cf", []byte("q"), []byte("v"), 1000)}}
	// The request's bytes kept by the codec, which the panicking handler
	// never took: the call's end drops them.
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	w := stashMutateRow(b, &btpb.MutateRowRequest{})
	if w == nil {
		t.Fatal("the request would not be kept as bytes")
	}
	env.srv.sec.wire.put(req, w)
	_, err = env.srv.unaryInterceptor()(context.Background(), req, &grpc.UnaryServerInfo{FullMethod: method},
		func(context.Context, any) (any, error) { panic("boom") })
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), method) {
		t.Errorf("unary handler panicked: %v, want INTERNAL naming %s", err, method)
	}
	const smethod = "/google.bigtable.v2.Bigtable/ReadRows"
	err = env.srv.streamInterceptor()(nil, fakeStream{}, &grpc.StreamServerInfo{FullMethod: smethod, IsServerStream: true},
		func(any, grpc.ServerStream) error { panic("boom") })
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), smethod) {
		t.Errorf("stream handler panicked: %v, want INTERNAL naming %s", err, smethod)
	}
	if n := env.srv.sec.inflight.Load(); n != 0 {
		t.Errorf("%d request bytes still counted in flight", n)
	}
	if n := env.srv.sec.wire.len(); n != 0 {
		t.Errorf("%d requests' bytes still held after the handler panicked", n)
	}
}

// fakeStream is a server stream with a background context and nothing to
// receive.
type fakeStream struct{ grpc.ServerStream }

func (fakeStream) Context() context.Context { return context.Background() }
