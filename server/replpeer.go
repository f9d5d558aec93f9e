package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// The gRPC side of package replication: a Peer that calls another
// process's EbbAdmin, the peer registry as a replication.Directory, and the
// Struct encoding of pulls (shared with the Pull handler).

// grpcPeer is a replication.Peer reached through EbbAdmin: a registered
// peer by id (over the peer set's shared connection) or, while joining,
// the seed over conn.
type grpcPeer struct {
	s    *Server
	id   string
	conn *grpc.ClientConn
}

func (p grpcPeer) call(ctx context.Context, method string, in map[string]any) (*structpb.Struct, error) {
	if p.conn != nil {
		return invokeStruct(ctx, p.conn, method, in)
	}
	return p.s.callPeer(ctx, p.id, method, in)
}

func (p grpcPeer) Pull(ctx context.Context, req replication.PullRequest) (*replication.PullResponse, error) {
	out, err := p.call(ctx, MethodPull, encodePullRequest(req))
	if err != nil {
		return nil, err
	}
	return decodePullResponse(out)
}

// Snapshot reads the Snapshot stream: messages {kind: table, schema} |
// {kind: cells|tombstones, instance, table, pairs: [base64 key, base64
// value, …]} | {kind: checkpoint, instance, table, origin, token}, then
// {kind: end, closed}.
func (p grpcPeer) Snapshot(ctx context.Context, fn func(replication.SnapshotItem) error) error {
	conn := p.conn
	if conn == nil {
		var err error
		if conn, err = p.s.peers.conn(p.id); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, MethodSnapshot)
	if err != nil {
		return err
	}
	if err := st.SendMsg(&structpb.Struct{}); err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	for {
		msg := new(structpb.Struct)
		err := st.RecvMsg(msg)
		if errors.Is(err, io.EOF) {
			return nil // the importer says whether the end came
		}
		if err != nil {
			return err
		}
		f := msg.GetFields()
		names := &table.Meta{Instance: f["instance"].GetStringValue(), Name: f["table"].GetStringValue()}
		var it replication.SnapshotItem
		switch f["kind"].GetStringValue() {
		case "table":
			var pm table.Meta
			if err := json.Unmarshal([]byte(f["schema"].GetStringValue()), &pm); err != nil {
				return err
			}
			it = replication.SnapshotItem{Kind: replication.SnapshotTable, Meta: &pm}
		case "cells", "tombstones":
			it = replication.SnapshotItem{Kind: replication.SnapshotCells, Meta: names}
			if f["kind"].GetStringValue() == "tombstones" {
				it.Kind = replication.SnapshotTombstones
			}
			vals := f["pairs"].GetListValue().GetValues()
			it.Pairs = make([][2][]byte, 0, len(vals)/2)
			for i := 0; i+1 < len(vals); i += 2 {
				k, err1 := base64.StdEncoding.DecodeString(vals[i].GetStringValue())
				v, err2 := base64.StdEncoding.DecodeString(vals[i+1].GetStringValue())
				if err := errors.Join(err1, err2); err != nil {
					return err
				}
				it.Pairs = append(it.Pairs, [2][]byte{k, v})
			}
		case "checkpoint":
			pos, err := changestream.ParseToken(f["token"].GetStringValue())
			if err != nil {
				return err
			}
			it = replication.SnapshotItem{Kind: replication.SnapshotCheckpoint, Meta: names, Origin: f["origin"].GetStringValue(), Position: pos}
		case "end":
			closed, err := strconv.ParseInt(f["closed"].GetStringValue(), 10, 64)
			if err != nil {
				return err
			}
			return fn(replication.SnapshotItem{Kind: replication.SnapshotEnd, Closed: closed})
		default:
			continue
		}
		if err := fn(it); err != nil {
			return err
		}
	}
}

func (p grpcPeer) Join(ctx context.Context, req replication.JoinRequest) (*replication.JoinResponse, error) {
	out, err := p.call(ctx, MethodJoin, map[string]any{"cluster": req.Cluster, "addr": req.Addr})
	if err != nil {
		return nil, err
	}
	f := out.GetFields()
	return &replication.JoinResponse{Cluster: f["cluster"].GetStringValue(), Addr: f["addr"].GetStringValue(), Peers: decodePeers(f["peers"].GetListValue())}, nil
}

func (p grpcPeer) Ready(ctx context.Context, cluster string) error {
	_, err := p.call(ctx, MethodReady, map[string]any{"cluster": cluster})
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

// pullMaxBytes is about the most record bytes one pull answer carries
// (TestLargeValuesReplicate lowers it to cross the bound with less data).
var pullMaxBytes = replication.PullMaxBytes

// newReplicator wires package replication to the server.
func newReplicator(s *Server) *replication.Replicator {
	return replication.New(replication.Options{
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
		AdoptMeta:  func(es []replication.MetaEntry) error { return s.inst.adoptPeerMeta(es) },
		OnReady:    func(id string) { s.inst.peerReady(id) },
		DataDir:    s.opts.DataDir,
		// Tests lower the budget (see pullMaxBytes).
		PullMaxBytes: pullMaxBytes,
	})
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
	return meta, nil
}

// Pull: {cluster, addr, wait_ms, limit, positions: {"instance\x00table":
// token}} → {cluster, closed, peers, catalog, dropped, instance_meta,
// age_cutoffs, tables: [{instance, table, records, positions, through,
// full}]}. Records are base64 of the binary record encoding, each with its
// position token; schemas are JSON strings.

func encodePullRequest(req replication.PullRequest) map[string]any {
	positions := map[string]any{}
	for k, p := range req.Positions {
		positions[k] = p.Token()
	}
	return map[string]any{
		"cluster": req.Cluster, "addr": req.Addr, "wait_ms": float64(req.Wait.Milliseconds()), "limit": float64(req.Limit), "positions": positions,
	}
}

func decodePullRequest(in *structpb.Struct) (replication.PullRequest, error) {
	f := in.GetFields()
	req := replication.PullRequest{
		Cluster: f["cluster"].GetStringValue(), Addr: f["addr"].GetStringValue(),
		Limit:     int(f["limit"].GetNumberValue()),
		Wait:      time.Duration(f["wait_ms"].GetNumberValue()) * time.Millisecond,
		Positions: map[string]changestream.Position{},
	}
	for k, v := range f["positions"].GetStructValue().GetFields() {
		p, err := changestream.ParseToken(v.GetStringValue())
		if err != nil {
			return req, fmt.Errorf("%w: position of %q: %v", errInvalid, k, err)
		}
		req.Positions[k] = p
	}
	return req, nil
}

func encodePullResponse(out *replication.PullResponse) (*structpb.Struct, error) {
	var tables, catalog, dropped, peers, meta, cutoffs []any
	for _, pt := range out.Tables {
		recs := make([]any, 0, len(pt.Records))
		toks := make([]any, 0, len(pt.Records))
		for _, rec := range pt.Records {
			recs = append(recs, base64.StdEncoding.EncodeToString(rec.Encode()))
			toks = append(toks, rec.Position.Token())
		}
		tables = append(tables, map[string]any{
			"instance": pt.Instance, "table": pt.Table, "records": recs, "positions": toks,
			"through": pt.Through.Token(), "full": pt.Full,
		})
	}
	for _, ts := range out.Catalog {
		js, err := json.Marshal(ts)
		if err != nil {
			return nil, err
		}
		catalog = append(catalog, string(js))
	}
	for _, d := range out.Dropped {
		js, err := json.Marshal(d)
		if err != nil {
			return nil, err
		}
		dropped = append(dropped, string(js))
	}
	for _, p := range out.Peers {
		peers = append(peers, map[string]any{"id": p.ID, "addr": p.Addr, "ready": p.Ready})
	}
	for k, c := range out.AgeCutoffs {
		cutoffs = append(cutoffs, map[string]any{"instance": k.Instance, "table": k.Table, "family": k.Family, "cutoff": strconv.FormatInt(c, 10)})
	}
	for _, e := range out.InstanceMeta {
		meta = append(meta, map[string]any{"kind": e.Kind, "instance": e.Instance, "name": e.Name, "value": e.Value})
	}
	return structpb.NewStruct(map[string]any{
		"cluster": out.Cluster, "closed": strconv.FormatInt(out.Closed, 10),
		"tables": tables, "catalog": catalog, "dropped": dropped, "peers": peers, "instance_meta": meta,
		"age_cutoffs": cutoffs,
	})
}

func decodePullResponse(in *structpb.Struct) (*replication.PullResponse, error) {
	f := in.GetFields()
	out := &replication.PullResponse{Cluster: f["cluster"].GetStringValue(), Peers: decodePeers(f["peers"].GetListValue()), AgeCutoffs: map[replication.FamilyKey]int64{}}
	out.Closed, _ = strconv.ParseInt(f["closed"].GetStringValue(), 10, 64)
	for _, v := range f["dropped"].GetListValue().GetValues() {
		var d table.DroppedTable
		if err := json.Unmarshal([]byte(v.GetStringValue()), &d); err != nil {
			return nil, err
		}
		out.Dropped = append(out.Dropped, d)
	}
	for _, v := range f["catalog"].GetListValue().GetValues() {
		var ts replication.TableSchema
		if err := json.Unmarshal([]byte(v.GetStringValue()), &ts); err != nil {
			return nil, err
		}
		out.Catalog = append(out.Catalog, ts)
	}
	for _, v := range f["instance_meta"].GetListValue().GetValues() {
		mf := v.GetStructValue().GetFields()
		out.InstanceMeta = append(out.InstanceMeta, replication.MetaEntry{Kind: mf["kind"].GetStringValue(), Instance: mf["instance"].GetStringValue(), Name: mf["name"].GetStringValue(), Value: mf["value"].GetStringValue()})
	}
	for _, v := range f["age_cutoffs"].GetListValue().GetValues() {
		cf := v.GetStructValue().GetFields()
		c, err := strconv.ParseInt(cf["cutoff"].GetStringValue(), 10, 64)
		if err != nil {
			return nil, err
		}
		out.AgeCutoffs[replication.FamilyKey{Instance: cf["instance"].GetStringValue(), Table: cf["table"].GetStringValue(), Family: cf["family"].GetStringValue()}] = c
	}
	for _, tv := range f["tables"].GetListValue().GetValues() {
		tf := tv.GetStructValue().GetFields()
		pt := replication.PulledTable{Instance: tf["instance"].GetStringValue(), Table: tf["table"].GetStringValue(), Full: tf["full"].GetBoolValue()}
		var err error
		if pt.Through, err = changestream.ParseToken(tf["through"].GetStringValue()); err != nil {
			return nil, err
		}
		toks := tf["positions"].GetListValue().GetValues()
		for i, rv := range tf["records"].GetListValue().GetValues() {
			b, err := base64.StdEncoding.DecodeString(rv.GetStringValue())
			if err != nil {
				return nil, err
			}
			rec, err := changestream.Decode(b)
			if err != nil {
				return nil, err
			}
			if i < len(toks) {
				if rec.Position, err = changestream.ParseToken(toks[i].GetStringValue()); err != nil {
					return nil, err
				}
			}
			pt.Records = append(pt.Records, rec)
		}
		out.Shipped += len(pt.Records)
		out.Tables = append(out.Tables, pt)
	}
	return out, nil
}

func decodePeers(list *structpb.ListValue) []replication.PeerInfo {
	var out []replication.PeerInfo
	for _, v := range list.GetValues() {
		f := v.GetStructValue().GetFields()
		out = append(out, replication.PeerInfo{ID: f["id"].GetStringValue(), Addr: f["addr"].GetStringValue(), Ready: f["ready"].GetBoolValue()})
	}
	return out
}
