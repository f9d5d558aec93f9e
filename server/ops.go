package server

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// remote, in cluster mode, answers for the operations kept in etcd
	// (clusterrestoreop.go); ok false for the others.
	remote       func(ctx context.Context, name string) (op *longrunningpb.Operation, ok bool, err error)
	deleteRemote func(ctx context.Context, name string) (ok bool, err error)
	// listRemote lists the operations kept in etcd whose names start
	// with a prefix (cluster mode).
	listRemote func(ctx context.Context, prefix string) ([]*longrunningpb.Operation, error)
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

// pending records an operation that finishes later; finish completes it.
// GetOperation reports it as not done until then.
func (o *operations) pending(resource string, meta proto.Message) (*pendingOp, error) {
	return o.pendingNamed(fmt.Sprintf("%s/operations/%d", resource, o.seq.Add(1)), meta)
}

// pendingNamed is pending with the operation's name given.
func (o *operations) pendingNamed(name string, meta proto.Message) (*pendingOp, error) {
	op := &longrunningpb.Operation{Name: name}
	if meta != nil {
		var err error
		if op.Metadata, err = anypb.New(meta); err != nil {
			return nil, status.Errorf(codes.Internal, "ebbtable: pack operation metadata: %v", err)
		}
	}
	o.mu.Lock()
	o.ops[op.Name] = op
	o.mu.Unlock()
	return &pendingOp{o: o, name: op.Name, done: make(chan struct{})}, nil
}

// pendingOp is an operation still running.
type pendingOp struct {
	o    *operations
	name string
	done chan struct{}
}

// finish completes the operation with resp, or with err (a status error)
// if it is not nil; meta, if not nil, replaces the metadata. Operations
// are replaced, never modified, so readers may hold the old value.
func (p *pendingOp) finish(resp proto.Message, meta proto.Message, err error) {
	defer close(p.done)
	next := &longrunningpb.Operation{Name: p.name, Done: true}
	if err == nil {
		r, perr := anypb.New(resp)
		if perr != nil {
			err = status.Errorf(codes.Internal, "ebbtable: pack operation response: %v", perr)
		} else {
			next.Result = &longrunningpb.Operation_Response{Response: r}
		}
	}
	if err != nil {
		next.Result = &longrunningpb.Operation_Error{Error: status.Convert(err).Proto()}
	}
	p.o.mu.Lock()
	defer p.o.mu.Unlock()
	old, ok := p.o.ops[p.name]
	if !ok {
		return // deleted meanwhile
	}
	next.Metadata = old.Metadata
	if meta != nil {
		if m, merr := anypb.New(meta); merr == nil {
			next.Metadata = m
		}
	}
	p.o.ops[p.name] = next
}

// wait waits up to d for the operation to finish and returns its state.
func (p *pendingOp) wait(d time.Duration) *longrunningpb.Operation {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	}
	p.o.mu.Lock()
	defer p.o.mu.Unlock()
	if op, ok := p.o.ops[p.name]; ok {
		return op
	}
	return &longrunningpb.Operation{Name: p.name}
}

// setRemote sets where the operations kept elsewhere are read and
// deleted (cluster mode).
func (o *operations) setRemote(get func(context.Context, string) (*longrunningpb.Operation, bool, error), del func(context.Context, string) (bool, error)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.remote, o.deleteRemote = get, del
}

// GetOperation returns an operation's latest state.
func (o *operations) GetOperation(ctx context.Context, req *longrunningpb.GetOperationRequest) (*longrunningpb.Operation, error) {
	o.mu.Lock()
	remote := o.remote
	o.mu.Unlock()
	if remote != nil {
		if op, ok, err := remote(ctx, req.GetName()); err != nil || ok {
			return op, err
		}
	}
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
	deleteRemote := o.deleteRemote
	o.mu.Unlock()
	remote := false
	if deleteRemote != nil {
		ok, err := deleteRemote(ctx, req.GetName())
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: %v", err)
		}
		remote = ok
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.ops[req.GetName()]; !ok && remote {
		return &emptypb.Empty{}, nil
	} else if !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: operation %q not found", req.GetName())
	}
	delete(o.ops, req.GetName())
	return &emptypb.Empty{}, nil
}

// setRemoteList sets where the operations kept elsewhere are listed
// (cluster mode).
func (o *operations) setRemoteList(list func(context.Context, string) ([]*longrunningpb.Operation, error)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.listRemote = list
}

// ListOperations lists the operations whose names start with the request's
// name (without Bigtable's "operations/" prefix; empty: all), in name
// order: this server's and, in cluster mode, those kept in etcd (which
// answer for their names). Filters are not supported.
func (o *operations) ListOperations(ctx context.Context, req *longrunningpb.ListOperationsRequest) (*longrunningpb.ListOperationsResponse, error) {
	if strings.TrimSpace(req.GetFilter()) != "" {
		return nil, status.Errorf(codes.Unimplemented, "ebbtable: ListOperations filters are not supported (got %q); list all and filter on the client", req.GetFilter())
	}
	prefix := strings.TrimPrefix(req.GetName(), "operations/")
	o.mu.Lock()
	listRemote := o.listRemote
	byName := map[string]*longrunningpb.Operation{}
	for name, op := range o.ops {
		if opUnder(name, prefix) {
			byName[name] = op
		}
	}
	o.mu.Unlock()
	if listRemote != nil {
		remote, err := listRemote(ctx, prefix)
		if err != nil {
			return nil, err
		}
		for _, op := range remote {
			if opUnder(op.GetName(), prefix) {
				byName[op.GetName()] = op
			}
		}
	}
	list := make([]*longrunningpb.Operation, 0, len(byName))
	for _, op := range byName {
		list = append(list, op)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].GetName() < list[j].GetName() })
	start, end, next, err := page(req.GetPageToken(), req.GetPageSize(), len(list))
	if err != nil {
		return nil, err
	}
	return &longrunningpb.ListOperationsResponse{Operations: list[start:end], NextPageToken: next}, nil
}

// opUnder reports whether resource name is prefix or under it ("" or a
// prefix ending in "/" matches as a plain prefix).
func opUnder(name, prefix string) bool {
	if prefix == "" || strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(name, prefix)
	}
	return name == prefix || strings.HasPrefix(name, prefix+"/")
}
