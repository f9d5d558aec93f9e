package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// operations keeps the long-running operations this server has started and
// serves google.longrunning.Operations, so clients' Wait works.
type operations struct {
	longrunningpb.UnimplementedOperationsServer
	mu  sync.Mutex
	ops map[string]*longrunningpb.Operation
	seq atomic.Uint64
}

func newOperations() *operations {
	return &operations{ops: map[string]*longrunningpb.Operation{}}
}

// done records an operation that has already finished with resp.
func (o *operations) done(resource string, resp, meta proto.Message) (*longrunningpb.Operation, error) {
	r, err := anypb.New(resp)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "ebbtable: pack operation response: %v", err)
	}
	op := &longrunningpb.Operation{
		Name:   fmt.Sprintf("%s/operations/%d", resource, o.seq.Add(1)),
		Done:   true,
		Result: &longrunningpb.Operation_Response{Response: r},
	}
	if meta != nil {
		if op.Metadata, err = anypb.New(meta); err != nil {
			return nil, status.Errorf(codes.Internal, "ebbtable: pack operation metadata: %v", err)
		}
	}
	o.mu.Lock()
	o.ops[op.Name] = op
	o.mu.Unlock()
	return op, nil
}

// GetOperation returns an operation's latest state.
func (o *operations) GetOperation(ctx context.Context, req *longrunningpb.GetOperationRequest) (*longrunningpb.Operation, error) {
	o.mu.Lock()
	op, ok := o.ops[req.GetName()]
	o.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: operation %q not found", req.GetName())
	}
	return op, nil
}

// DeleteOperation forgets an operation.
func (o *operations) DeleteOperation(ctx context.Context, req *longrunningpb.DeleteOperationRequest) (*emptypb.Empty, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.ops[req.GetName()]; !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: operation %q not found", req.GetName())
	}
	delete(o.ops, req.GetName())
	return &emptypb.Empty{}, nil
}
