package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// Replication between clusters (docs/replication.md): the EbbAdmin side.
// The policy is package replication (s.repl): each cluster pulls from each
// peer the user records that originated there (EbbAdmin/Pull, a long poll
// over every table's change stream) and applies them with
// table.Engine.ApplyReplicated. A cluster joins with EbbAdmin/Join, copies
// the seed's data (EbbAdmin/Snapshot) before it serves, then says
// EbbAdmin/Ready. This file keeps the handlers of those calls, the
// replication status and link calls, and the dialling; replpeer.go the
// gRPC replication.Peer and the Struct encoding of pulls.

// Method names of the replication RPCs (EbbAdminService).
const (
	MethodJoin     = "/" + EbbAdminService + "/Join"
	MethodReady    = "/" + EbbAdminService + "/Ready"
	MethodPull     = "/" + EbbAdminService + "/Pull"
	MethodSnapshot = "/" + EbbAdminService + "/Snapshot"
	MethodStatus   = "/" + EbbAdminService + "/ReplicationStatus"
	MethodLink     = "/" + EbbAdminService + "/ReplicationLink"
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

// call invokes a unary EbbAdmin method on a peer.
func (s *Server) callPeer(ctx context.Context, id, method string, in map[string]any) (*structpb.Struct, error) {
	conn, err := s.peers.conn(id)
	if err != nil {
		return nil, err
	}
	return invokeStruct(ctx, conn, method, in)
}

func invokeStruct(ctx context.Context, conn *grpc.ClientConn, method string, in map[string]any) (*structpb.Struct, error) {
	req, err := structpb.NewStruct(in)
	if err != nil {
		return nil, err
	}
	out := new(structpb.Struct)
	if err := conn.Invoke(ctx, method, req, out); err != nil {
		return nil, err
	}
	return out, nil
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
func (a *ebbAdmin) pull(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	s := a.s
	caller := str(in, "cluster")
	if caller == "" || caller == s.opts.ClusterID {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: pull needs the calling cluster's id (got %q)", caller)
	}
	p, ok := s.peers.get(caller)
	if !ok {
		// A cluster pulls only after joining; one this process forgot
		// (deleted) must join again.
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: cluster %q has not joined cluster %q", caller, s.opts.ClusterID)
	}
	if addr := str(in, "addr"); addr != "" && addr != p.Addr {
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
	out, err := s.repl.Answer(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return encodePullResponse(out)
}

// join registers a cluster joining through this one: {cluster, addr} →
// {cluster, addr, peers}. The joining cluster then copies this one's data
// (Snapshot) and says Ready.
func (a *ebbAdmin) join(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	s := a.s
	id, addr := str(in, "cluster"), str(in, "addr")
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
	var peers []any
	for _, p := range out.Peers {
		peers = append(peers, map[string]any{"id": p.ID, "addr": p.Addr, "ready": p.Ready})
	}
	return structpb.NewStruct(map[string]any{"cluster": out.Cluster, "addr": out.Addr, "peers": peers})
}

// ready marks a joined cluster as having copied the data: {cluster} → {}.
func (a *ebbAdmin) ready(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	if err := a.s.repl.MarkReady(str(in, "cluster")); err != nil {
		if errors.Is(err, replication.ErrNotJoined) {
			return nil, status.Errorf(codes.NotFound, "ebbtable: cluster %q has not joined", str(in, "cluster"))
		}
		return nil, toStatus(err)
	}
	return &structpb.Struct{}, nil
}

// snapshot streams a consistent copy of every table to a joining cluster:
// messages {kind: table, schema} | {kind: cells|tombstones, instance, table,
// pairs: [base64 key, base64 value, …]} | {kind: checkpoint, instance,
// table, origin, token}, then {kind: end, closed}.
func (a *ebbAdmin) snapshot(in *structpb.Struct, stream grpc.ServerStream) error {
	send := func(m map[string]any) error {
		msg, err := structpb.NewStruct(m)
		if err != nil {
			return err
		}
		return stream.SendMsg(msg)
	}
	err := a.s.repl.Snapshot(func(it replication.SnapshotItem) error {
		m := it.Meta
		switch it.Kind {
		case replication.SnapshotTable:
			js, err := json.Marshal(m)
			if err != nil {
				return err
			}
			return send(map[string]any{"kind": "table", "schema": string(js)})
		case replication.SnapshotCells, replication.SnapshotTombstones:
			kind := "cells"
			if it.Kind == replication.SnapshotTombstones {
				kind = "tombstones"
			}
			pairs := make([]any, 0, 2*len(it.Pairs))
			for _, p := range it.Pairs {
				pairs = append(pairs, base64.StdEncoding.EncodeToString(p[0]), base64.StdEncoding.EncodeToString(p[1]))
			}
			return send(map[string]any{"kind": kind, "instance": m.Instance, "table": m.Name, "pairs": pairs})
		case replication.SnapshotCheckpoint:
			return send(map[string]any{"kind": "checkpoint", "instance": m.Instance, "table": m.Name, "origin": it.Origin, "token": it.Position.Token()})
		case replication.SnapshotEnd:
			return send(map[string]any{"kind": "end", "closed": strconv.FormatInt(it.Closed, 10)})
		}
		return nil
	})
	return toStatus(err)
}

// replicationStatus: {instance?, table?} → {cluster, closed, applied: {origin:
// commit time through which that origin's records of the table (of every
// table, without one) are applied here}, peers: [{id, addr, ready, healthy,
// max_delay_seconds}]}.
func (a *ebbAdmin) replicationStatus(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	s := a.s
	var metas []*table.Meta
	if t := str(in, "table"); t != "" {
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
	applied := map[string]any{}
	var peers []any
	for _, p := range s.peers.list() {
		low := int64(math.MaxInt64)
		for _, m := range metas {
			pos, ok, err := s.engine.Checkpoint(m, p.ID)
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
		applied[p.ID] = strconv.FormatInt(low, 10)
		entry := map[string]any{"id": p.ID, "addr": p.Addr, "ready": p.Ready, "healthy": s.peers.healthy(p.ID), "paused": s.repl.Paused(p.ID)}
		if d, ok := s.repl.MaxDelay(p.ID); ok {
			entry["max_delay_seconds"] = d.Seconds()
		}
		peers = append(peers, entry)
	}
	return structpb.NewStruct(map[string]any{
		"cluster": s.opts.ClusterID, "closed": strconv.FormatInt(s.engine.ClosedTimestamp(), 10),
		"applied": applied, "peers": peers,
	})
}

// replicationLink pauses or resumes pulling from a peer (an operator's and
// the tests' control): {peer, paused (bool)} → {peer, paused}.
func (a *ebbAdmin) replicationLink(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	id := str(in, "peer")
	if _, ok := a.s.peers.get(id); !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: cluster %q is not a peer of %q", id, a.s.opts.ClusterID)
	}
	on := in.GetFields()["paused"].GetBoolValue()
	if on {
		a.s.repl.Pause(id)
	} else {
		a.s.repl.Resume(id)
	}
	return structpb.NewStruct(map[string]any{"peer": id, "paused": on})
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
