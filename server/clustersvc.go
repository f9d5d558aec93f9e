package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	tablets "github.com/ebbtable/ebbtable/cluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The Cluster service, ebbtable.cluster.v1.Cluster: the operations of
// cluster mode (nodes list, node drain, tablets list/split/move) and the
// target's half of a move (IngestSpan). Its messages are the typed Go
// structs below, carried as JSON inside a google.protobuf.BytesValue (the
// server's codec is protobuf's), so the service needs no generated code.
// Every method needs the admin role.

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

// NodeInfo is one node in ListNodes.
type NodeInfo struct {
	ID       string `json:"id"`
	Addr     string `json:"addr,omitempty"`
	Live     bool   `json:"live"`
	Draining bool   `json:"draining,omitempty"`
	Tablets  int    `json:"tablets"`
}

// ListNodesRequest asks for the cluster's nodes.
type ListNodesRequest struct{}

// ListNodesResponse lists live nodes and nodes that own tablets but are
// not live (dead, or restarting).
type ListNodesResponse struct {
	Nodes []NodeInfo `json:"nodes"`
}

// DrainNodeRequest moves every tablet off Node and marks it draining.
// Force, for a node that is not live, gives its tablets to live nodes
// without its data.
type DrainNodeRequest struct {
	Node  string `json:"node"`
	Force bool   `json:"force,omitempty"`
}

// DrainNodeResponse lists the moves made.
type DrainNodeResponse struct {
	Moves []string `json:"moves"`
}

// TabletInfo is one tablet in ListTablets.
type TabletInfo struct {
	ID    uint64 `json:"id"`
	Start []byte `json:"start"`
	End   []byte `json:"end"`
	Owner string `json:"owner"`
	Live  bool   `json:"live"`
}

// ListTabletsRequest names a table (projects/P/instances/I/tables/T).
type ListTabletsRequest struct {
	Table string `json:"table"`
}

// ListTabletsResponse is the table's directory.
type ListTabletsResponse struct {
	TableID  uint64       `json:"table_id"`
	Revision int64        `json:"revision"`
	Tablets  []TabletInfo `json:"tablets"`
}

// SplitTabletRequest splits the tablet holding Key at Key.
type SplitTabletRequest struct {
	Table string `json:"table"`
	Key   []byte `json:"key"`
}

// MergeTabletRequest merges a tablet with its right neighbour (same owner).
type MergeTabletRequest struct {
	Table  string `json:"table"`
	Tablet uint64 `json:"tablet"`
}

// MoveTabletRequest moves a tablet to node To.
type MoveTabletRequest struct {
	Table  string `json:"table"`
	Tablet uint64 `json:"tablet"`
	To     string `json:"to"`
}

// MoveTabletResponse reports the move: bytes shipped from the source to
// the target, of them local upper-level bytes and keys, and shared SSTs
// passed by reference.
type MoveTabletResponse struct {
	From       string `json:"from"`
	To         string `json:"to"`
	Bytes      int64  `json:"bytes"`
	LocalBytes int64  `json:"local_bytes"`
	LocalKeys  int64  `json:"local_keys"`
	SharedSSTs int64  `json:"shared_ssts"`
	Millis     int64  `json:"millis"`
}

// IngestSpanRequest is a move's export, sent by the source to the target.
type IngestSpanRequest struct {
	Table  string `json:"table"`
	Tablet uint64 `json:"tablet"`
	Export []byte `json:"export"`
}

// Empty is an empty answer.
type Empty struct{}

// clusterService serves the Cluster service.
type clusterService struct{ c *clusterMember }

func (s *clusterService) ListNodes(ctx context.Context, _ *ListNodesRequest) (*ListNodesResponse, error) {
	dirs := s.c.m.Directories()
	load := tablets.Load(dirs)
	out := &ListNodesResponse{}
	seen := map[string]bool{}
	for _, n := range s.c.m.Nodes() {
		seen[n.ID] = true
		out.Nodes = append(out.Nodes, NodeInfo{ID: n.ID, Addr: n.Addr, Live: true, Draining: n.Draining, Tablets: load[n.ID]})
	}
	for id, k := range load {
		if !seen[id] {
			out.Nodes = append(out.Nodes, NodeInfo{ID: id, Tablets: k})
		}
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].ID < out.Nodes[j].ID })
	return out, nil
}

func (s *clusterService) DrainNode(ctx context.Context, req *DrainNodeRequest) (*DrainNodeResponse, error) {
	c := s.c
	if req.Node == "" {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: name the node to drain")
	}
	if _, live := c.m.Node(req.Node); !live {
		if !req.Force {
			return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: node %s is not live: its tablets come back with it when it restarts with its disk; --force gives them to live nodes, losing what only its disk holds", req.Node)
		}
		moves, err := c.forceReassign(ctx, req.Node)
		out := &DrainNodeResponse{}
		for _, m := range moves {
			out.Moves = append(out.Moves, m.String()+" (reassigned, data not moved)")
		}
		return out, err
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
	out := &DrainNodeResponse{}
	for _, mv := range plan {
		if _, err := s.MoveTablet(ctx, &MoveTabletRequest{Table: mv.Table, Tablet: mv.Tablet, To: mv.To}); err != nil {
			return out, fmt.Errorf("ebbtable: drain %s stopped at %s: %w", req.Node, mv, err)
		}
		out.Moves = append(out.Moves, mv.String())
	}
	return out, nil
}

func (s *clusterService) ListTablets(ctx context.Context, req *ListTabletsRequest) (*ListTabletsResponse, error) {
	d, _, err := s.c.dirOf(req.Table)
	if err != nil {
		return nil, err
	}
	out := &ListTabletsResponse{TableID: d.TableID, Revision: d.Revision}
	for _, t := range d.Tablets {
		_, live := s.c.m.Node(t.Owner)
		out.Tablets = append(out.Tablets, TabletInfo{ID: t.ID, Start: t.Start, End: t.End, Owner: t.Owner, Live: live})
	}
	return out, nil
}

func (s *clusterService) SplitTablet(ctx context.Context, req *SplitTabletRequest) (*ListTabletsResponse, error) {
	if _, err := s.c.splitTablet(ctx, req.Table, req.Key); err != nil {
		return nil, err
	}
	return s.ListTablets(ctx, &ListTabletsRequest{Table: req.Table})
}

func (s *clusterService) MergeTablet(ctx context.Context, req *MergeTabletRequest) (*ListTabletsResponse, error) {
	if _, err := s.c.mergeTablet(ctx, req.Table, req.Tablet); err != nil {
		return nil, err
	}
	return s.ListTablets(ctx, &ListTabletsRequest{Table: req.Table})
}

// MoveTablet runs the move on the tablet's owner: here, or passed to it.
func (s *clusterService) MoveTablet(ctx context.Context, req *MoveTabletRequest) (*MoveTabletResponse, error) {
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
		return newClusterClient(cc).MoveTablet(clusterForward(ctx), req)
	}
	r, err := s.c.moveTablet(ctx, req.Table, req.Tablet, req.To)
	if err != nil {
		return nil, err
	}
	return &MoveTabletResponse{From: r.From, To: r.To, Bytes: r.Bytes, LocalBytes: r.LocalBytes, LocalKeys: r.LocalKeys,
		SharedSSTs: r.SharedSSTs, Millis: r.Took.Milliseconds()}, nil
}

func (s *clusterService) IngestSpan(ctx context.Context, req *IngestSpanRequest) (*Empty, error) {
	if err := s.c.ingestSpan(ctx, req.Export); err != nil {
		return nil, err
	}
	return &Empty{}, nil
}

// clusterMethod adapts a typed handler to the gRPC service description:
// the request and the answer travel as JSON in a BytesValue.
func clusterMethod[Req, Resp any](name string, f func(*clusterService, context.Context, *Req) (*Resp, error)) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.BytesValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, r any) (any, error) {
			req := new(Req)
			if err := json.Unmarshal(r.(*wrapperspb.BytesValue).GetValue(), req); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "ebbtable: %s request: %v", name, err)
			}
			resp, err := f(srv.(*clusterService), ctx, req)
			if err != nil {
				return nil, err
			}
			b, err := json.Marshal(resp)
			if err != nil {
				return nil, status.Errorf(codes.Internal, "ebbtable: %s answer: %v", name, err)
			}
			return wrapperspb.Bytes(b), nil
		}
		if icpt == nil {
			return h(ctx, in)
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + ClusterService + "/" + name}, h)
	}}
}

var clusterDesc = grpc.ServiceDesc{
	ServiceName: ClusterService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		clusterMethod("ListNodes", (*clusterService).ListNodes),
		clusterMethod("DrainNode", (*clusterService).DrainNode),
		clusterMethod("ListTablets", (*clusterService).ListTablets),
		clusterMethod("SplitTablet", (*clusterService).SplitTablet),
		clusterMethod("MergeTablet", (*clusterService).MergeTablet),
		clusterMethod("MoveTablet", (*clusterService).MoveTablet),
		clusterMethod("IngestSpan", (*clusterService).IngestSpan),
	},
}

// ClusterClient calls the Cluster service.
type ClusterClient struct{ cc grpc.ClientConnInterface }

// NewClusterClient returns a client of the Cluster service on cc.
func NewClusterClient(cc grpc.ClientConnInterface) *ClusterClient { return &ClusterClient{cc: cc} }

func newClusterClient(cc grpc.ClientConnInterface) *ClusterClient { return NewClusterClient(cc) }

func clusterCall[Resp any](c *ClusterClient, ctx context.Context, method string, req any) (*Resp, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	in := new(wrapperspb.BytesValue)
	if err := c.cc.Invoke(ctx, "/"+ClusterService+"/"+method, wrapperspb.Bytes(b), in); err != nil {
		return nil, err
	}
	out := new(Resp)
	if err := json.Unmarshal(in.GetValue(), out); err != nil {
		return nil, fmt.Errorf("ebbtable: %s answer: %w", method, err)
	}
	return out, nil
}

// ListNodes lists the cluster's nodes.
func (c *ClusterClient) ListNodes(ctx context.Context, req *ListNodesRequest) (*ListNodesResponse, error) {
	return clusterCall[ListNodesResponse](c, ctx, "ListNodes", req)
}

// DrainNode moves every tablet off a node.
func (c *ClusterClient) DrainNode(ctx context.Context, req *DrainNodeRequest) (*DrainNodeResponse, error) {
	return clusterCall[DrainNodeResponse](c, ctx, "DrainNode", req)
}

// ListTablets lists a table's tablets.
func (c *ClusterClient) ListTablets(ctx context.Context, req *ListTabletsRequest) (*ListTabletsResponse, error) {
	return clusterCall[ListTabletsResponse](c, ctx, "ListTablets", req)
}

// SplitTablet splits a tablet at a key.
func (c *ClusterClient) SplitTablet(ctx context.Context, req *SplitTabletRequest) (*ListTabletsResponse, error) {
	return clusterCall[ListTabletsResponse](c, ctx, "SplitTablet", req)
}

// MergeTablet merges a tablet with its right neighbour.
func (c *ClusterClient) MergeTablet(ctx context.Context, req *MergeTabletRequest) (*ListTabletsResponse, error) {
	return clusterCall[ListTabletsResponse](c, ctx, "MergeTablet", req)
}

// MoveTablet moves a tablet to a node.
func (c *ClusterClient) MoveTablet(ctx context.Context, req *MoveTabletRequest) (*MoveTabletResponse, error) {
	return clusterCall[MoveTabletResponse](c, ctx, "MoveTablet", req)
}

// IngestSpan hands a move's export to the target.
func (c *ClusterClient) IngestSpan(ctx context.Context, req *IngestSpanRequest) (*Empty, error) {
	return clusterCall[Empty](c, ctx, "IngestSpan", req)
}
