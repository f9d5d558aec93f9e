package server

import (
	"context"
	"fmt"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// More schema changes through the cluster's schema log (clusteradmin.go):
// UpdateTable, the authorized views' create, update and delete, and
// UndeleteTable. Each is appended to the log and applied by every node
// through its own Table Admin code, in log order, so every node ends with
// the same settings and views; the caller gets the answer of the node it
// called. What a change makes up on the spot (an authorized view's etag)
// is derived from the entry's sequence number, so it is the same on every
// node.
//
// DeleteTable keeps the table's directory in etcd (deleted/TABLE) beside
// the log entry; UndeleteTable brings it back in the same transaction as
// its entry, and every node undeletes its own part of the table. A change
// that fails on the calling node undoes what its entry did to the
// directory (a delete refused by deletion protection puts it back).

// schemaSeqKey carries the sequence number of the schema log entry being
// applied.
type schemaSeqKey struct{}

func withSchemaSeq(ctx context.Context, seq uint64) context.Context {
	return context.WithValue(ctx, schemaSeqKey{}, seq)
}

// newEtag is a fresh etag: from the clock on a node alone, from the schema
// log entry being applied in a cluster (the same on every node).
func (s *Server) newEtag(ctx context.Context) string {
	if seq, ok := ctx.Value(schemaSeqKey{}).(uint64); ok {
		return fmt.Sprintf("s%d", seq)
	}
	return fmt.Sprintf("%d", s.opts.Clock.Now().UnixNano())
}

func (a *clusterAdmin) UpdateTable(ctx context.Context, req *adminpb.UpdateTableRequest) (*longrunningpb.Operation, error) {
	ref, err := parseTable(req.GetTable().GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if len(req.GetUpdateMask().GetPaths()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: update_mask must name at least one field")
	}
	return proposeOp(a.c.propose(ctx, "UpdateTable", ref, req, clusteretcd.DirOp{}))
}

func (a *clusterAdmin) CreateAuthorizedView(ctx context.Context, req *adminpb.CreateAuthorizedViewRequest) (*longrunningpb.Operation, error) {
	ref, _, err := parseAuthView(req.GetParent() + "/authorizedViews/" + req.GetAuthorizedViewId())
	if err != nil {
		return nil, toStatus(err)
	}
	return proposeOp(a.c.propose(ctx, "CreateAuthorizedView", ref, req, clusteretcd.DirOp{}))
}

func (a *clusterAdmin) UpdateAuthorizedView(ctx context.Context, req *adminpb.UpdateAuthorizedViewRequest) (*longrunningpb.Operation, error) {
	ref, _, err := parseAuthView(req.GetAuthorizedView().GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return proposeOp(a.c.propose(ctx, "UpdateAuthorizedView", ref, req, clusteretcd.DirOp{}))
}

func (a *clusterAdmin) DeleteAuthorizedView(ctx context.Context, req *adminpb.DeleteAuthorizedViewRequest) (*emptypb.Empty, error) {
	ref, _, err := parseAuthView(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if _, err := a.c.propose(ctx, "DeleteAuthorizedView", ref, req, clusteretcd.DirOp{}); err != nil {
		return nil, err
	}
	// Its policy, once, by this node (forgetClusterIAM, clusteriam.go).
	if err := a.s.dropClusterIAM(req.GetName()); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func (a *clusterAdmin) UndeleteTable(ctx context.Context, req *adminpb.UndeleteTableRequest) (*longrunningpb.Operation, error) {
	ref, err := parseTable(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if _, err := a.s.engine.Table(ref.instance, ref.table); err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: table %s exists; delete it first", ref.table)
	}
	return proposeOp(a.c.propose(ctx, "UndeleteTable", ref, req, clusteretcd.DirOp{Undrop: true}))
}

func proposeOp(m proto.Message, err error) (*longrunningpb.Operation, error) {
	if err != nil {
		return nil, err
	}
	return m.(*longrunningpb.Operation), nil
}

// keepDeletedFor is how long etcd keeps a deleted table's directory for
// an undelete: the undelete retention (each node keeps its part of the
// table's data that long), and a minute at least, so a delete refused
// (deletion protection) can put the directory back.
func (c *clusterMember) keepDeletedFor() time.Duration {
	return max(c.s.opts.UndeleteRetention, c.s.knobs().minKeepDeleted.or(minKeepDeleted))
}

// minKeepDeleted is keepDeletedFor's floor (tests lower it: testKnobs).
const minKeepDeleted = time.Minute

// undoDirOp undoes what a change's entry did to its table's directory
// when the change failed on this node (and so, applied in the same order
// to the same schema, on every node).
func (c *clusterMember) undoDirOp(ctx context.Context, ref tableRef, e clusteretcd.SchemaEntry, op clusteretcd.DirOp) {
	ctx = context.WithoutCancel(ctx)
	var undo clusteretcd.DirOp
	switch {
	case op.Create != nil:
		// The table was not created anywhere: drop its directory.
		if d, ok := c.m.Directory(ref.name()); !ok || d.TableID != e.TableID {
			return
		}
		undo = clusteretcd.DirOp{Drop: true}
	case op.Drop && op.Keep:
		// Not deleted (protected): the table keeps its tablets.
		if _, err := c.s.engine.Table(ref.instance, ref.table); err != nil {
			return
		}
		undo = clusteretcd.DirOp{Undrop: true}
	case op.Undrop:
		// Not undeleted: keep the directory for a later try.
		if d, ok := c.m.Directory(ref.name()); !ok || d.TableID != e.TableID {
			return
		}
		if _, err := c.s.engine.Table(ref.instance, ref.table); err == nil {
			return
		}
		undo = clusteretcd.DirOp{Drop: true, Keep: true, KeepFor: c.keepDeletedFor()}
	default:
		return
	}
	if _, err := c.m.AppendEntry(ctx, clusteretcd.SchemaEntry{Method: "ForgetTable", Table: ref.name(), Origin: c.opts.NodeID}, undo); err != nil {
		c.s.log.Warn("undo the directory change of a failed schema change", "table", ref.name(), "method", e.Method, "err", err)
	}
}

// applyMore applies the schema changes of this file.
func (c *clusterMember) applyMore(ctx context.Context, e clusteretcd.SchemaEntry) applyResult {
	a := &adminServer{s: c.s}
	decode := func(m proto.Message) error { return proto.Unmarshal(e.Request, m) }
	var resp proto.Message
	var err error
	switch e.Method {
	case "UpdateTable":
		var req adminpb.UpdateTableRequest
		if err = decode(&req); err == nil {
			resp, err = a.UpdateTable(ctx, &req)
		}
	case "CreateAuthorizedView":
		var req adminpb.CreateAuthorizedViewRequest
		if err = decode(&req); err == nil {
			resp, err = a.CreateAuthorizedView(ctx, &req)
		}
	case "UpdateAuthorizedView":
		var req adminpb.UpdateAuthorizedViewRequest
		if err = decode(&req); err == nil {
			resp, err = a.UpdateAuthorizedView(ctx, &req)
		}
	case "DeleteAuthorizedView":
		var req adminpb.DeleteAuthorizedViewRequest
		if err = decode(&req); err == nil {
			resp, err = a.DeleteAuthorizedView(ctx, &req)
		}
	case "UndeleteTable":
		var req adminpb.UndeleteTableRequest
		if err = decode(&req); err == nil {
			resp, err = a.UndeleteTable(ctx, &req)
		}
	default:
		if r, ok := c.applyView(ctx, e); ok { // clusterviews.go
			return r
		}
		if r, ok := c.applyReplSchema(e); ok { // clusterpull.go
			return r
		}
		err = status.Errorf(codes.Unimplemented, "ebbtable: unknown schema change %q", e.Method)
	}
	return applyResult{resp: resp, err: err}
}
