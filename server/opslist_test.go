package server

import (
	"context"
	"testing"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// ListOperations lists this server's operations under a name prefix
// (Bigtable's "operations/" form or the bare name), in name order, by
// pages, with the ones kept elsewhere (cluster mode) answering for their
// names; filters are refused.
func TestListOperations(t *testing.T) {
	o := newOperations()
	for _, r := range []string{"projects/p/instances/i/tables/b", "projects/p/instances/i/tables/a", "projects/p/instances/j/tables/c", "projects/p/instances/i2/tables/d"} {
		if _, err := o.done(r, &emptypb.Empty{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	remote := &longrunningpb.Operation{Name: "projects/p/instances/i/tables/a/operations/restore-x"}
	o.setRemoteList(func(_ context.Context, prefix string) ([]*longrunningpb.Operation, error) {
		return []*longrunningpb.Operation{remote}, nil
	})
	ctx := context.Background()
	var names []string
	tok := ""
	for {
		resp, err := o.ListOperations(ctx, &longrunningpb.ListOperationsRequest{Name: "operations/projects/p/instances/i", PageSize: 2, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range resp.Operations {
			names = append(names, op.Name)
		}
		if tok = resp.NextPageToken; tok == "" {
			break
		}
	}
	want := []string{"projects/p/instances/i/tables/a/operations/2", "projects/p/instances/i/tables/a/operations/restore-x", "projects/p/instances/i/tables/b/operations/1"}
	if len(names) != len(want) {
		t.Fatalf("listed %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("listed %v, want %v", names, want)
		}
	}
	if resp, err := o.ListOperations(ctx, &longrunningpb.ListOperationsRequest{Name: "projects/p/instances/j"}); err != nil || len(resp.Operations) != 1 {
		t.Errorf("instance j: %v %v", resp, err)
	}
	if _, err := o.ListOperations(ctx, &longrunningpb.ListOperationsRequest{Filter: "done=true"}); status.Code(err) != codes.Unimplemented {
		t.Errorf("a filter: %v", err)
	}
}
