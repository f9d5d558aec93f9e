package server

import (
	"context"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Logical and materialized view definitions in cluster mode. A view
// change sent to any node (create, update, delete) is appended to the
// cluster's schema log, as a table's schema changes are (clusteradmin.go),
// and every node applies it through its own Instance Admin code, so every
// node knows every view and answers queries and reads of it. The entry's
// "table" is the view's name under its instance (no table is named with a
// slash); it has no directory operation.

// applyingView marks the context of a view change applied from the
// schema log: it runs here and is not proposed again.
type applyingView struct{}

// proposeView appends a view change to the schema log in cluster mode and
// returns its result here; ok is false outside a cluster, when the change
// is being applied from the log, or when name does not parse (the local
// code then answers, with its error).
func (s *Server) proposeView(ctx context.Context, method, coll, name string, req proto.Message) (resp proto.Message, ok bool, err error) {
	if s.cluster == nil || ctx.Value(applyingView{}) != nil {
		return nil, false, nil
	}
	inst, id, perr := splitChild(name, coll)
	if perr != nil || validViewID(id) != nil {
		return nil, false, nil
	}
	if _, perr := parseInstance(inst); perr != nil {
		return nil, false, nil
	}
	resp, err = s.cluster.propose(ctx, method, tableRef{instance: inst, table: coll + "/" + id}, req, clusteretcd.DirOp{})
	return resp, true, err
}

// viewOp and viewEmpty give a proposed change's result its RPC's type.
func viewOp(m proto.Message, err error) (*longrunningpb.Operation, error) {
	if err != nil {
		return nil, err
	}
	return m.(*longrunningpb.Operation), nil
}

func viewEmpty(m proto.Message, err error) (*emptypb.Empty, error) {
	if err != nil {
		return nil, err
	}
	return m.(*emptypb.Empty), nil
}

// applyView applies a view change from the schema log; ok is false for
// another method.
func (c *clusterMember) applyView(ctx context.Context, e clusteretcd.SchemaEntry) (applyResult, bool) {
	a := &instanceServer{s: c.s}
	ctx = context.WithValue(ctx, applyingView{}, true)
	var resp proto.Message
	var err error
	decode := func(m proto.Message) bool {
		err = proto.Unmarshal(e.Request, m)
		return err == nil
	}
	switch e.Method {
	case "CreateLogicalView":
		if req := new(adminpb.CreateLogicalViewRequest); decode(req) {
			resp, err = a.CreateLogicalView(ctx, req)
		}
	case "UpdateLogicalView":
		if req := new(adminpb.UpdateLogicalViewRequest); decode(req) {
			resp, err = a.UpdateLogicalView(ctx, req)
		}
	case "DeleteLogicalView":
		if req := new(adminpb.DeleteLogicalViewRequest); decode(req) {
			resp, err = a.DeleteLogicalView(ctx, req)
		}
	case "CreateMaterializedView":
		if req := new(adminpb.CreateMaterializedViewRequest); decode(req) {
			resp, err = a.CreateMaterializedView(ctx, req)
		}
	case "UpdateMaterializedView":
		if req := new(adminpb.UpdateMaterializedViewRequest); decode(req) {
			resp, err = a.UpdateMaterializedView(ctx, req)
		}
	case "DeleteMaterializedView":
		if req := new(adminpb.DeleteMaterializedViewRequest); decode(req) {
			resp, err = a.DeleteMaterializedView(ctx, req)
		}
	default:
		return applyResult{}, false
	}
	return applyResult{resp: resp, err: err}, true
}
