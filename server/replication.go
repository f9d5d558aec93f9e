package server

import (
	"context"
	"errors"
	"math"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Replication between clusters (docs/replication.md): the EbbAdmin side.
// The policy is package replication (s.repl): each cluster pulls from each
// peer the user records that originated there (EbbAdmin/Pull, a long poll
// over every table's change stream) and applies them with
// table.Engine.ApplyReplicated. A cluster joins with EbbAdmin/Join, copies
// the seed's data (EbbAdmin/Snapshot) before it serves, then says
// EbbAdmin/Ready. This file keeps the handlers of those calls, the
// replication status and link calls, and the dialling; replpeer.go the
// gRPC replication.Peer and the encoding of pulls and snapshots.

// Method names of the replication RPCs (EbbAdminService).
const (
	MethodJoin     = ebbadminpb.EbbAdmin_Join_FullMethodName
	MethodReady    = ebbadminpb.EbbAdmin_Ready_FullMethodName
	MethodPull     = ebbadminpb.EbbAdmin_Pull_FullMethodName
	MethodSnapshot = ebbadminpb.EbbAdmin_Snapshot_FullMethodName
	MethodStatus   = ebbadminpb.EbbAdmin_ReplicationStatus_FullMethodName
	MethodLink     = ebbadminpb.EbbAdmin_ReplicationLink_FullMethodName
)

// stopCtx is a context cancelled when the server stops.
func (s *Server) stopCtx(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// peerClient is an EbbAdmin client of a registered peer, over the peer
// set's shared connection.
func (s *Server) peerClient(id string) (ebbadminpb.EbbAdminClient, error) {
	conn, err := s.peers.conn(id)
	if err != nil {
		return nil, err
	}
	return ebbadminpb.NewEbbAdminClient(conn), nil
}

// clusterStates is GetTable's replication view: this cluster is READY; a
// peer still copying the data is INITIALIZING, one that has not answered
// lately UNPLANNED_MAINTENANCE, the others READY.
func (s *Server) clusterStates() map[string]*adminpb.Table_ClusterState {
	out := map[string]*adminpb.Table_ClusterState{s.opts.ClusterID: {ReplicationState: adminpb.Table_ClusterState_READY}}
	for _, p := range s.peers.list() {
		st := adminpb.Table_ClusterState_READY
		switch {
		case !p.Ready:
			st = adminpb.Table_ClusterState_INITIALIZING
		case !s.peers.healthy(p.ID):
			st = adminpb.Table_ClusterState_UNPLANNED_MAINTENANCE
		}
		out[p.ID] = &adminpb.Table_ClusterState{ReplicationState: st}
	}
	return out
}

// ---- the RPCs a peer calls ----

// pull answers a peer's long poll (replication.Replicator.Answer; the
// encoding is in replpeer.go).
func (a *ebbAdmin) Pull(ctx context.Context, in *ebbadminpb.PullRequest) (*ebbadminpb.PullResponse, error) {
	s := a.s
	caller := in.GetCluster()
	if caller == "" || caller == s.opts.ClusterID {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: pull needs the calling cluster's id (got %q)", caller)
	}
	p, ok := s.peers.get(caller)
	if !ok && s.cluster != nil {
		// It may have joined through another node of this cluster.
		if err := s.syncClusterPeers(ctx); err != nil {
			return nil, toStatus(err)
		}
		p, ok = s.peers.get(caller)
	}
	if !ok {
		// A cluster pulls only after joining; one this process forgot
		// (deleted) must join again.
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: cluster %q has not joined cluster %q", caller, s.opts.ClusterID)
	}
	local := s.cluster != nil && replLocal(ctx)
	if s.cluster != nil {
		// A cluster of several nodes never calls its peers (it does not
		// pull): a pull, or this node's part of one, is how each node hears
		// from them (GC leader, health).
		s.peers.contact(caller, nil)
	}
	if addr := in.GetAddr(); addr != "" && addr != p.Addr && !local {
		// The peer restarted on another address.
		p.Addr = addr
		if err := s.peers.add(p); err != nil {
			return nil, toStatus(err)
		}
	}
	req, err := decodePullRequest(in)
	if err != nil {
		return nil, toStatus(err)
	}
	var out *replication.PullResponse
	if s.cluster != nil && !local {
		out, err = s.clusterAnswer(ctx, req) // clusterrepl.go
	} else {
		out, err = s.repl.Answer(ctx, req)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return encodePullResponse(out), nil
}

// Join registers a cluster joining through this one. The joining cluster
// then copies this one's data (Snapshot) and says Ready.
func (a *ebbAdmin) Join(ctx context.Context, in *ebbadminpb.JoinRequest) (*ebbadminpb.JoinResponse, error) {
	s := a.s
	id, addr := in.GetCluster(), in.GetAddr()
	if id == "" || addr == "" {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: join needs the joining cluster's id and address")
	}
	if err := s.sec.allowPeer(addr); err != nil {
		return nil, err
	}
	if id == s.opts.ClusterID {
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: cluster id %q is this cluster's own; give the joining process another --cluster-id", id)
	}
	out, err := s.repl.Admit(replication.JoinRequest{Cluster: id, Addr: addr})
	if err != nil {
		return nil, toStatus(err)
	}
	return &ebbadminpb.JoinResponse{Cluster: out.Cluster, Addr: out.Addr, Peers: peersPB(out.Peers)}, nil
}

// Ready marks a joined cluster as having copied the data.
func (a *ebbAdmin) Ready(ctx context.Context, in *ebbadminpb.ReadyRequest) (*ebbadminpb.ReadyResponse, error) {
	if err := a.s.repl.MarkReady(in.GetCluster()); err != nil {
		if errors.Is(err, replication.ErrNotJoined) {
			return nil, status.Errorf(codes.NotFound, "ebbtable: cluster %q has not joined", in.GetCluster())
		}
		return nil, toStatus(err)
	}
	return &ebbadminpb.ReadyResponse{}, nil
}

// Snapshot streams a consistent copy of every table to a joining cluster
// (snapshotMessage in replpeer.go).
func (a *ebbAdmin) Snapshot(_ *ebbadminpb.SnapshotRequest, stream grpc.ServerStreamingServer[ebbadminpb.SnapshotMessage]) error {
	if s := a.s; s.cluster != nil { // clusterrepl.go
		if replLocal(stream.Context()) {
			return s.localSnapshot(stream.Context(), stream.Send)
		}
		return toStatus(s.clusterSnapshot(stream.Context(), stream.Send))
	}
	err := a.s.repl.Snapshot(func(it replication.SnapshotItem) error {
		if msg := snapshotMessage(it); msg != nil {
			return stream.Send(msg)
		}
		return nil
	})
	return toStatus(err)
}

// ReplicationStatus: the commit time through which each origin's records
// of the table (of every table, without one) are applied here, and the
// peers' states.
func (a *ebbAdmin) ReplicationStatus(ctx context.Context, in *ebbadminpb.ReplicationStatusRequest) (*ebbadminpb.ReplicationStatusResponse, error) {
	s := a.s
	var metas []*table.Meta
	if t := in.GetTable(); t != "" {
		inst, err := instanceOf(in)
		if err != nil {
			return nil, err
		}
		m, err := s.engine.Table(inst, t)
		if err != nil {
			return nil, toStatus(err)
		}
		metas = []*table.Meta{m}
	} else {
		metas = s.engine.Tables("")
	}
	if k := s.cluster; k != nil && k.m != nil && k.sink != nil && !k.pullsHere() {
		if err := k.sink.readThroughs(ctx); err != nil { // clusterreplshare.go: what the puller shared, fresh
			return nil, toStatus(err)
		}
	}
	out := &ebbadminpb.ReplicationStatusResponse{Cluster: s.opts.ClusterID, Closed: s.engine.ClosedTimestamp(), Applied: map[string]int64{}}
	for _, p := range s.peers.list() {
		low := int64(math.MaxInt64)
		for _, m := range metas {
			pos, ok, err := s.replCheckpoint(m, p.ID) // clusterpull.go
			if err != nil {
				return nil, toStatus(err)
			}
			if !ok {
				pos.Commit = 0
			}
			low = min(low, pos.Commit)
		}
		if len(metas) == 0 {
			low = s.repl.Through(p.ID)
		}
		out.Applied[p.ID] = low
		entry := &ebbadminpb.PeerStatus{Id: p.ID, Addr: p.Addr, Ready: p.Ready, Healthy: s.peers.healthy(p.ID), Paused: s.repl.Paused(p.ID)}
		if d, ok := s.repl.MaxDelay(p.ID); ok {
			entry.MaxDelaySeconds = proto.Float64(d.Seconds())
		}
		out.Peers = append(out.Peers, entry)
	}
	return out, nil
}

// replicationLink pauses or resumes pulling from a peer (an operator's and
// the tests' control).
func (a *ebbAdmin) ReplicationLink(ctx context.Context, in *ebbadminpb.ReplicationLinkRequest) (*ebbadminpb.ReplicationLinkResponse, error) {
	id := in.GetPeer()
	if _, ok := a.s.peers.get(id); !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: cluster %q is not a peer of %q", id, a.s.opts.ClusterID)
	}
	on := in.GetPaused()
	if on {
		a.s.repl.Pause(id)
	} else {
		a.s.repl.Resume(id)
	}
	return &ebbadminpb.ReplicationLinkResponse{Peer: id, Paused: on}, nil
}

// ---- joining ----

// advertised is the address peers reach this process at.
func (s *Server) advertised() string {
	if s.opts.AdvertiseAddr != "" {
		return s.opts.AdvertiseAddr
	}
	return s.Addr()
}

// joinCluster makes this process a cluster of the instance the process at
// seed serves (replication.Replicator.JoinThrough: unless it joined
// before, it drops a partial copy, registers with the seed, copies the
// seed's data and says it is ready).
func (s *Server) joinCluster(seed string) error {
	if joined, err := s.repl.Joined(); err != nil || joined {
		return err
	}
	ctx, cancel := s.stopCtx(10 * time.Minute)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+seed, s.sec.peerDialOptions(seed, s.opts.MaxMessageBytes)...)
	if err != nil {
		return err
	}
	defer conn.Close()
	seedID, err := s.repl.JoinThrough(ctx, grpcPeer{s: s, conn: conn}, seed)
	if err != nil {
		return err
	}
	s.log.Info("joined the instance", "seed", seedID, "peers", len(s.peers.list()))
	return nil
}
