package server

import (
	"context"
	"testing"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
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
