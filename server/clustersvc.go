package server

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The Cluster service, ebbtable.cluster.v1.Cluster: the operations of
// cluster mode (nodes list, node drain, tablets list/split/move) and the
// target's half of a move (IngestSpan). Its messages and service
// descriptor are package clusterpb, generated from
// proto/ebbtable/cluster/v1/cluster.proto; the cli package and the other
// nodes are its clients. Every method needs the admin role.

// ClusterService is the service's full name.
const ClusterService = "ebbtable.cluster.v1.Cluster"

func clusterForwarded(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, metaClusterOp)) > 0
}

func clusterForward(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, metaClusterOp, "1")
}

// metaClusterOp marks a Cluster call one node passed to another (the
// tablet's owner), which must not pass it on again.
const metaClusterOp = "x-ebbtable-cluster-op"

// clusterService serves the Cluster service.
type clusterService struct {
	clusterpb.UnimplementedClusterServer
	c *clusterMember
}

func (s *clusterService) ListNodes(ctx context.Context, _ *clusterpb.ListNodesRequest) (*clusterpb.ListNodesResponse, error) {
	dirs := s.c.m.Directories()
	load := tablets.Load(dirs)
	out := &clusterpb.ListNodesResponse{}
	seen := map[string]bool{}
	for _, n := range s.c.m.Nodes() {
		seen[n.ID] = true
		out.Nodes = append(out.Nodes, &clusterpb.Node{Id: n.ID, Addr: n.Addr, Live: true, Draining: n.Draining, Tablets: int64(load[n.ID])})
	}
	for id, k := range load {
		if !seen[id] {
			out.Nodes = append(out.Nodes, &clusterpb.Node{Id: id, Tablets: int64(k)})
		}
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Id < out.Nodes[j].Id })
	return out, nil
}

func (s *clusterService) DrainNode(ctx context.Context, req *clusterpb.DrainNodeRequest) (*clusterpb.DrainNodeResponse, error) {
	c := s.c
	if req.Node == "" {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: name the node to drain")
	}
	if _, live := c.m.Node(req.Node); !live {
		if !req.Force {
			return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: node %s is not live: its tablets come back with it when it restarts with its disk; --force gives them to live nodes, losing what only its disk holds", req.Node)
		}
		moves, err := c.forceReassign(ctx, req.Node)
		out := &clusterpb.DrainNodeResponse{}
		for _, m := range moves {
			out.Moves = append(out.Moves, m.String()+" (reassigned, data not moved)")
		}
		if err != nil {
			return nil, drainStatus(req.Node, out, len(moves), err)
		}
		// Given up: the schema log no longer keeps entries for it.
		if err := c.m.ForgetProgress(ctx, req.Node); err != nil {
			return nil, status.Errorf(codes.Unavailable, "%v", err)
		}
		return out, nil
	}
	if err := c.m.SetDraining(ctx, req.Node, true); err != nil {
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	// Wait until this node sees the mark, so placement avoids the node.
	c.m.WaitFor(ctx, func() bool { n, _ := c.m.Node(req.Node); return n.Draining })
	plan, err := tablets.PlanDrain(req.Node, c.m.Nodes(), c.m.Directories())
	if err != nil {
		return nil, clusterStatus(err)
	}
	return drainReport(req.Node, plan, func(mv tablets.Move) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err := s.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: mv.Table, Tablet: mv.Tablet, To: mv.To})
		return err
	})
}

// drainReport makes each move of a drain plan, going on past one that
// fails. If any failed, the drain fails with the first failure's code and
// a status detail listing the moves made and the tablets left (with why):
// nothing is lost of what was done, and the drain run again plans from the
// directory as it is, so it goes on where this one stopped.
func drainReport(node string, plan []tablets.Move, move func(tablets.Move) error) (*clusterpb.DrainNodeResponse, error) {
	out := &clusterpb.DrainNodeResponse{}
	var first error
	for _, mv := range plan {
		if err := move(mv); err != nil {
			out.Left = append(out.Left, fmt.Sprintf("%s: %v", mv, err))
			if first == nil {
				first = err
			}
			continue
		}
		out.Moves = append(out.Moves, mv.String())
	}
	if first == nil {
		return out, nil
	}
	return nil, drainStatus(node, out, len(plan), first)
}

// drainStatus is the error of a drain that left tablets on the node, with
// out as a detail.
func drainStatus(node string, out *clusterpb.DrainNodeResponse, planned int, first error) error {
	code := status.Code(first)
	if code == codes.Unknown || code == codes.OK {
		code = codes.Aborted
	}
	st := status.Newf(code, "ebbtable: drain %s: %d of %d tablets moved, %d left (first: %v); run the drain again to go on",
		node, len(out.Moves), planned, len(out.Left), first)
	if d, err := st.WithDetails(out); err == nil {
		st = d
	}
	return st.Err()
}

// ListTablets reads the directory from etcd itself, not this node's
// cache: a change another node made (the moves of a drain run on the
// tablets' owner) reaches the cache only through the watch, so a listing
// right after the change could show the tablets where they were.
func (s *clusterService) ListTablets(ctx context.Context, req *clusterpb.ListTabletsRequest) (*clusterpb.ListTabletsResponse, error) {
	ref, err := parseTable(req.Table)
	if err != nil {
		return nil, toStatus(err)
	}
	d, ok, err := s.c.m.ReadDirectory(ctx, ref.name())
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: table %s has no tablets in this cluster", ref.table)
	}
	out := &clusterpb.ListTabletsResponse{TableId: d.TableID, Revision: d.Revision}
	for _, t := range d.Tablets {
		_, live := s.c.m.Node(t.Owner)
		out.Tablets = append(out.Tablets, &clusterpb.Tablet{Id: t.ID, Start: t.Start, End: t.End, Owner: t.Owner, Live: live})
	}
	return out, nil
}

func (s *clusterService) SplitTablet(ctx context.Context, req *clusterpb.SplitTabletRequest) (*clusterpb.ListTabletsResponse, error) {
	if _, err := s.c.splitTablet(ctx, req.Table, req.Key); err != nil {
		return nil, err
	}
	return s.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: req.Table})
}

func (s *clusterService) MergeTablet(ctx context.Context, req *clusterpb.MergeTabletRequest) (*clusterpb.ListTabletsResponse, error) {
	if _, err := s.c.mergeTablet(ctx, req.Table, req.Tablet); err != nil {
		return nil, err
	}
	return s.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: req.Table})
}

// MoveTablet runs the move on the tablet's owner: here, or passed to it.
func (s *clusterService) MoveTablet(ctx context.Context, req *clusterpb.MoveTabletRequest) (*clusterpb.MoveTabletResponse, error) {
	if clusterForwarded(ctx) {
		s.c.catchUpTo(ctx, forwardedOpRev(ctx))
		return s.moveTablet(ctx, req)
	}
	resp, err := s.moveTablet(ctx, req)
	if status.Code(err) != codes.Aborted {
		return resp, err
	}
	// This node's view of the directory was stale (the owner it passed
	// the move to, or this node, no longer owns the tablet) or a change
	// raced the flip: read the directory from etcd itself and pass the
	// move on once more.
	if _, _, rerr := s.c.m.ReadDirectory(ctx, tableNameOf(req.Table)); rerr != nil {
		return resp, err
	}
	return s.moveTablet(ctx, req)
}

// tableNameOf is a table's resource name as the directory keys it.
func tableNameOf(name string) string {
	if ref, err := parseTable(name); err == nil {
		return ref.name()
	}
	return name
}

// moveTablet runs a move here if this node owns the tablet by its view of
// the directory, else passes it to the owner (once: a passed-on move is
// not passed on again).
func (s *clusterService) moveTablet(ctx context.Context, req *clusterpb.MoveTabletRequest) (*clusterpb.MoveTabletResponse, error) {
	d, ref, err := s.c.dirOf(req.Table)
	if err != nil {
		return nil, err
	}
	t, _, ok := d.Find(req.Tablet)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: table %s has no tablet %d", ref.table, req.Tablet)
	}
	if req.To == "" {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: name the node to move to (--to)")
	}
	if _, ok := s.c.m.Node(req.To); !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: node %s is not live", req.To)
	}
	if t.Owner != s.c.opts.NodeID {
		if clusterForwarded(ctx) {
			return nil, status.Errorf(codes.Aborted, "ebbtable: %s is not owned here any more; retry", t)
		}
		n, ok := s.c.m.Node(t.Owner)
		if !ok {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: %s: its node is down; wait for it, or drain it with --force", t)
		}
		cc, err := s.c.conn(n.Addr)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: node %s: %v", n.ID, err)
		}
		// The receiver catches up with the revision this node routed by.
		fctx := metadata.AppendToOutgoingContext(ctx, metaClusterOp, strconv.FormatInt(d.Revision, 10))
		return clusterpb.NewClusterClient(cc).MoveTablet(fctx, req)
	}
	r, err := s.c.moveTablet(ctx, req.Table, req.Tablet, req.To)
	if err != nil {
		return nil, err
	}
	return &clusterpb.MoveTabletResponse{From: r.From, To: r.To, Bytes: r.Bytes, LocalBytes: r.LocalBytes, LocalKeys: r.LocalKeys,
		SharedSsts: r.SharedSSTs, Millis: r.Took.Milliseconds()}, nil
}

// forwardedOpRev is the directory revision a passed-on Cluster call was
// routed by (0 if it carries none).
func forwardedOpRev(ctx context.Context) int64 {
	for _, v := range metadata.ValueFromIncomingContext(ctx, metaClusterOp) {
		if r, err := strconv.ParseInt(v, 10, 64); err == nil && r > 1 {
			return r
		}
	}
	return 0
}

func (s *clusterService) IngestSpan(ctx context.Context, req *clusterpb.IngestSpanRequest) (*clusterpb.IngestSpanResponse, error) {
	if f := commitFloor(ctx); f > 0 {
		s.c.s.engine.ObserveCommit(f) // clusterrepl.go
	}
	if err := s.c.ingestSpan(ctx, req.Export); err != nil {
		return nil, err
	}
	if err := s.c.ingestTombstones(req); err != nil { // clusterpull.go
		return nil, err
	}
	return &clusterpb.IngestSpanResponse{}, nil
}
