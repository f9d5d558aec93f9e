package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc"
)

// The gRPC side of package replication: a Peer that calls another
// process's EbbAdmin, the peer registry as a replication.Directory, and the
// encoding of pulls and snapshots in ebbadminpb's messages (shared with the
// handlers).

// grpcPeer is a replication.Peer reached through EbbAdmin: a registered
// peer by id (over the peer set's shared connection) or, while joining,
// the seed over conn.
type grpcPeer struct {
	s    *Server
	id   string
	conn *grpc.ClientConn
}

func (p grpcPeer) client() (ebbadminpb.EbbAdminClient, error) {
	if p.conn != nil {
		return ebbadminpb.NewEbbAdminClient(p.conn), nil
	}
	return p.s.peerClient(p.id)
}

func (p grpcPeer) Pull(ctx context.Context, req replication.PullRequest) (*replication.PullResponse, error) {
	c, err := p.client()
	if err != nil {
		return nil, err
	}
	out, err := c.Pull(ctx, encodePullRequest(req))
	if err != nil {
		return nil, err
	}
	return decodePullResponse(out)
}

// Snapshot reads the Snapshot stream: each table's schema, runs of its
// cells and tombstones, its checkpoints, then the end.
func (p grpcPeer) Snapshot(ctx context.Context, fn func(replication.SnapshotItem) error) error {
	c, err := p.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.Snapshot(ctx, &ebbadminpb.SnapshotRequest{})
	if err != nil {
		return err
	}
	for {
		msg, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil // the importer says whether the end came
		}
		if err != nil {
			return err
		}
		var it replication.SnapshotItem
		switch item := msg.GetItem().(type) {
		case *ebbadminpb.SnapshotMessage_Table:
			m, err := metaOf(item.Table)
			if err != nil {
				return err
			}
			it = replication.SnapshotItem{Kind: replication.SnapshotTable, Meta: m}
		case *ebbadminpb.SnapshotMessage_Cells:
			it = snapshotPairsOf(replication.SnapshotCells, item.Cells)
		case *ebbadminpb.SnapshotMessage_Tombstones:
			it = snapshotPairsOf(replication.SnapshotTombstones, item.Tombstones)
		case *ebbadminpb.SnapshotMessage_Checkpoint:
			cp := item.Checkpoint
			it = replication.SnapshotItem{
				Kind: replication.SnapshotCheckpoint, Meta: &table.Meta{Instance: cp.GetInstance(), Name: cp.GetTable()},
				Origin: cp.GetOrigin(), Position: positionOf(cp.GetPosition()),
			}
		case *ebbadminpb.SnapshotMessage_End:
			return fn(replication.SnapshotItem{Kind: replication.SnapshotEnd, Closed: item.End.GetClosed()})
		default:
			continue
		}
		if err := fn(it); err != nil {
			return err
		}
	}
}

func snapshotPairsOf(kind replication.SnapshotKind, ps *ebbadminpb.SnapshotPairs) replication.SnapshotItem {
	it := replication.SnapshotItem{Kind: kind, Meta: &table.Meta{Instance: ps.GetInstance(), Name: ps.GetTable()}}
	it.Pairs = make([][2][]byte, 0, len(ps.GetPairs()))
	for _, kv := range ps.GetPairs() {
		it.Pairs = append(it.Pairs, [2][]byte{kv.GetKey(), kv.GetValue()})
	}
	return it
}

// snapshotMessage is a snapshot item as the Snapshot stream sends it.
func snapshotMessage(it replication.SnapshotItem) *ebbadminpb.SnapshotMessage {
	m := it.Meta
	switch it.Kind {
	case replication.SnapshotTable:
		return &ebbadminpb.SnapshotMessage{Item: &ebbadminpb.SnapshotMessage_Table{Table: metaPB(m)}}
	case replication.SnapshotCells, replication.SnapshotTombstones:
		ps := &ebbadminpb.SnapshotPairs{Instance: m.Instance, Table: m.Name, Pairs: make([]*ebbadminpb.KeyValue, 0, len(it.Pairs))}
		for _, p := range it.Pairs {
			ps.Pairs = append(ps.Pairs, &ebbadminpb.KeyValue{Key: p[0], Value: p[1]})
		}
		if it.Kind == replication.SnapshotTombstones {
			return &ebbadminpb.SnapshotMessage{Item: &ebbadminpb.SnapshotMessage_Tombstones{Tombstones: ps}}
		}
		return &ebbadminpb.SnapshotMessage{Item: &ebbadminpb.SnapshotMessage_Cells{Cells: ps}}
	case replication.SnapshotCheckpoint:
		return &ebbadminpb.SnapshotMessage{Item: &ebbadminpb.SnapshotMessage_Checkpoint{Checkpoint: &ebbadminpb.SnapshotCheckpoint{
			Instance: m.Instance, Table: m.Name, Origin: it.Origin, Position: positionPB(it.Position)}}}
	case replication.SnapshotEnd:
		return &ebbadminpb.SnapshotMessage{Item: &ebbadminpb.SnapshotMessage_End{End: &ebbadminpb.SnapshotEnd{Closed: it.Closed}}}
	}
	return nil
}

func (p grpcPeer) Join(ctx context.Context, req replication.JoinRequest) (*replication.JoinResponse, error) {
	c, err := p.client()
	if err != nil {
		return nil, err
	}
	out, err := c.Join(ctx, &ebbadminpb.JoinRequest{Cluster: req.Cluster, Addr: req.Addr})
	if err != nil {
		return nil, err
	}
	return &replication.JoinResponse{Cluster: out.GetCluster(), Addr: out.GetAddr(), Peers: peersOf(out.GetPeers())}, nil
}

func (p grpcPeer) Ready(ctx context.Context, cluster string) error {
	c, err := p.client()
	if err != nil {
		return err
	}
	_, err = c.Ready(ctx, &ebbadminpb.ReadyRequest{Cluster: cluster})
	return err
}

// peerDirectory is the peer set as replication sees it.
type peerDirectory struct{ s *Server }

func (d peerDirectory) Get(id string) (replication.PeerInfo, bool) { return d.s.peers.get(id) }
func (d peerDirectory) List() []replication.PeerInfo               { return d.s.peers.list() }
func (d peerDirectory) Gone(id string) bool                        { return d.s.peers.gone(id) }
func (d peerDirectory) Add(p replication.PeerInfo) error           { return d.s.peers.add(p) }
func (d peerDirectory) Rejoined(id string) error {
	return d.s.engine.DeleteInstanceMeta(kindPeerGone, peerInstance, id)
}
func (d peerDirectory) Contact(id string, err error) { d.s.peers.contact(id, err) }
func (d peerDirectory) Healthy(id string) bool       { return d.s.peers.healthy(id) }
func (d peerDirectory) Dial(id string) (replication.Peer, error) {
	if _, ok := d.s.peers.get(id); !ok {
		return nil, fmt.Errorf("%w: cluster %q is not a known peer", errNotFound, id)
	}
	return grpcPeer{s: d.s, id: id}, nil
}

// newReplicator wires package replication to the server.
func newReplicator(s *Server) *replication.Replicator {
	sink, pulls := s.pullSink() // clusterpull.go
	o := replication.Options{
		ClusterID:  s.opts.ClusterID,
		Advertised: s.advertised,
		Engine:     s.engine,
		Peers:      peerDirectory{s},
		Clock:      s.opts.Clock,
		// Replication talks to other processes in real time.
		Pace:       clock.Real{},
		Log:        s.log,
		Registry:   s.opts.Registry,
		AgeCutoffs: s.ageCutoffs,
		LocalMeta:  s.localMeta,
		AdoptMeta: func(id string, es []replication.MetaEntry) error {
			if s.cluster != nil {
				return s.adoptAndShare(id, es) // clusterreplshare.go
			}
			return s.inst.adoptPeerMeta(es)
		},
		Nodes:   s.clusterNodeAddrs, // clusterreplshare.go
		OnReady: func(id string) { s.inst.peerReady(id) },
		DataDir: s.opts.DataDir,
		// A cluster of several nodes pulls through one node, which sends
		// the records to their owners (clusterpull.go).
		Sink:  sink,
		Pulls: pulls,
		// Tests lower the budget (TestLargeValuesReplicate, to cross the
		// bound with less data).
		PullMaxBytes: s.knobs().pullMaxBytes.or(replication.PullMaxBytes),
	}
	if k := s.cluster; k != nil && k.sink != nil { // clusterreplshare.go
		o.OnThrough = k.sink.shareThrough
	}
	return replication.New(o)
}

// localMeta is the instance metadata that travels with pulls: clusters and
// app profiles (with their tombstones).
func (s *Server) localMeta() ([]replication.MetaEntry, error) {
	var meta []replication.MetaEntry
	for _, kind := range []string{kindCluster, kindAppProfile, kindAppProfileGone} {
		if err := s.engine.InstanceMeta(kind, "", func(inst, name string, v []byte) error {
			meta = append(meta, replication.MetaEntry{Kind: kind, Instance: inst, Name: name, Value: string(v)})
			return nil
		}); err != nil {
			return nil, err
		}
	}
	stamped, err := s.stampedMeta() // metarepl.go
	if err != nil {
		return nil, err
	}
	return append(meta, stamped...), nil
}

// The encoding of pulls (ebbadminpb.PullRequest and PullResponse); records
// travel in changestream's binary encoding, each with its position.

func encodePullRequest(req replication.PullRequest) *ebbadminpb.PullRequest {
	positions := make(map[string]*ebbadminpb.Position, len(req.Positions))
	for k, p := range req.Positions {
		positions[k] = positionPB(p)
	}
	return &ebbadminpb.PullRequest{Cluster: req.Cluster, Addr: req.Addr, WaitMs: req.Wait.Milliseconds(), Limit: int64(req.Limit), Positions: positions}
}

func decodePullRequest(in *ebbadminpb.PullRequest) (replication.PullRequest, error) {
	req := replication.PullRequest{
		Cluster: in.GetCluster(), Addr: in.GetAddr(),
		Limit:     int(in.GetLimit()),
		Wait:      time.Duration(in.GetWaitMs()) * time.Millisecond,
		Positions: map[string]changestream.Position{},
	}
	if in.GetLimit() < 0 || in.GetWaitMs() < 0 {
		return req, fmt.Errorf("%w: pull limit %d and wait_ms %d must not be negative", errInvalid, in.GetLimit(), in.GetWaitMs())
	}
	for k, p := range in.GetPositions() {
		if p.GetCommit() < 0 {
			return req, fmt.Errorf("%w: position of %q: negative commit time %d", errInvalid, k, p.GetCommit())
		}
		req.Positions[k] = positionOf(p)
	}
	return req, nil
}

func encodePullResponse(out *replication.PullResponse) *ebbadminpb.PullResponse {
	resp := &ebbadminpb.PullResponse{Cluster: out.Cluster, Closed: out.Closed, Peers: peersPB(out.Peers)}
	for _, pt := range out.Tables {
		t := &ebbadminpb.PulledTable{Instance: pt.Instance, Table: pt.Table, Through: positionPB(pt.Through), Full: pt.Full,
			Records: make([]*ebbadminpb.PulledRecord, 0, len(pt.Records))}
		for _, rec := range pt.Records {
			t.Records = append(t.Records, &ebbadminpb.PulledRecord{Record: rec.Encode(), Position: positionPB(rec.Position)})
		}
		resp.Tables = append(resp.Tables, t)
	}
	for _, ts := range out.Catalog {
		resp.Catalog = append(resp.Catalog, schemaPB(ts))
	}
	for _, d := range out.Dropped {
		resp.Dropped = append(resp.Dropped, &ebbadminpb.DroppedTable{Instance: d.Instance, Name: d.Name, Stamp: stampPB(d.Stamp)})
	}
	for k, c := range out.AgeCutoffs {
		resp.AgeCutoffs = append(resp.AgeCutoffs, &ebbadminpb.AgeCutoff{Instance: k.Instance, Table: k.Table, Family: k.Family, Cutoff: c})
	}
	for _, e := range out.InstanceMeta {
		resp.InstanceMeta = append(resp.InstanceMeta, &ebbadminpb.MetaEntry{Kind: e.Kind, Instance: e.Instance, Name: e.Name, Value: []byte(e.Value)})
	}
	return resp
}

func decodePullResponse(in *ebbadminpb.PullResponse) (*replication.PullResponse, error) {
	out := &replication.PullResponse{Cluster: in.GetCluster(), Closed: in.GetClosed(), Peers: peersOf(in.GetPeers()), AgeCutoffs: map[replication.FamilyKey]int64{}}
	for _, d := range in.GetDropped() {
		out.Dropped = append(out.Dropped, table.DroppedTable{Instance: d.GetInstance(), Name: d.GetName(), Stamp: stampOf(d.GetStamp())})
	}
	for _, ps := range in.GetCatalog() {
		ts, err := schemaOf(ps)
		if err != nil {
			return nil, err
		}
		out.Catalog = append(out.Catalog, ts)
	}
	for _, e := range in.GetInstanceMeta() {
		out.InstanceMeta = append(out.InstanceMeta, replication.MetaEntry{Kind: e.GetKind(), Instance: e.GetInstance(), Name: e.GetName(), Value: string(e.GetValue())})
	}
	for _, c := range in.GetAgeCutoffs() {
		out.AgeCutoffs[replication.FamilyKey{Instance: c.GetInstance(), Table: c.GetTable(), Family: c.GetFamily()}] = c.GetCutoff()
	}
	for _, t := range in.GetTables() {
		pt := replication.PulledTable{Instance: t.GetInstance(), Table: t.GetTable(), Full: t.GetFull(), Through: positionOf(t.GetThrough())}
		for _, r := range t.GetRecords() {
			rec, err := changestream.Decode(r.GetRecord())
			if err != nil {
				return nil, err
			}
			rec.Position = positionOf(r.GetPosition())
			pt.Records = append(pt.Records, rec)
		}
		out.Shipped += len(pt.Records)
		out.Tables = append(out.Tables, pt)
	}
	return out, nil
}
