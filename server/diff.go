package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Comparing clusters: ebbtable replication diff TABLE. The comparison,
// its classes and the repair are replication.Diff; here are the handlers of
// the diff's RPCs and the gRPC replication.DiffPeer.

// MethodTableChunks, MethodTableCells, MethodRepairCells and MethodDiff are
// the diff's RPCs (EbbAdminService).
const (
	MethodTableChunks = ebbadminpb.EbbAdmin_TableChunks_FullMethodName
	MethodTableCells  = ebbadminpb.EbbAdmin_TableCells_FullMethodName
	MethodRepairCells = ebbadminpb.EbbAdmin_RepairCells_FullMethodName
	MethodDiff        = ebbadminpb.EbbAdmin_ReplicationDiff_FullMethodName
)

const diffChunkRows = 500

// Diff classes.
const (
	classExpected   = replication.ClassExpected
	classInFlight   = replication.ClassInFlight
	classUnexpected = replication.ClassUnexpected
)

// tableRequest is a request about a table.
type tableRequest interface {
	instanceRequest
	GetTable() string
}

func (a *ebbAdmin) tableOfRequest(in tableRequest) (*table.Meta, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	m, err := a.s.engine.Table(inst, in.GetTable())
	if err != nil {
		return nil, toStatus(err)
	}
	return m, nil
}

// TableChunks digests the table's chunks split at the request's bounds and
// tells the families' age cutoffs here.
func (a *ebbAdmin) TableChunks(ctx context.Context, in *ebbadminpb.TableChunksRequest) (*ebbadminpb.TableChunksResponse, error) {
	m, err := a.tableOfRequest(in)
	if err != nil {
		return nil, err
	}
	out := &ebbadminpb.TableChunksResponse{Cutoffs: a.s.ageCutoffs(m)}
	for _, r := range replication.ChunkRanges(in.GetBounds()) {
		h, n, err := a.s.engine.ChunkHash(m, r[0], r[1])
		if err != nil {
			return nil, toStatus(err)
		}
		out.Chunks = append(out.Chunks, &ebbadminpb.Chunk{Hash: h, Count: int64(n)})
	}
	return out, nil
}

// TableCells lists the stored cells of rows [start, end) (no end: to the
// end of the table).
func (a *ebbAdmin) TableCells(ctx context.Context, in *ebbadminpb.TableCellsRequest) (*ebbadminpb.TableCellsResponse, error) {
	m, err := a.tableOfRequest(in)
	if err != nil {
		return nil, err
	}
	var end []byte
	if in.End != nil {
		// A set end is a bound even when empty: no rows.
		end = append([]byte{}, in.GetEnd()...)
	}
	out := &ebbadminpb.TableCellsResponse{}
	err = a.s.engine.RawCells(m, in.GetStart(), end, func(c table.RawCell) error {
		out.Cells = append(out.Cells, rawCellPB(c))
		return nil
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return out, nil
}

// RepairCells writes the put cells (with their stamps, where newer) and
// deletes the delete cells.
func (a *ebbAdmin) RepairCells(ctx context.Context, in *ebbadminpb.RepairCellsRequest) (*ebbadminpb.RepairCellsResponse, error) {
	m, err := a.tableOfRequest(in)
	if err != nil {
		return nil, err
	}
	out := &ebbadminpb.RepairCellsResponse{}
	for _, c := range in.GetPut() {
		ok, err := a.s.engine.RepairCell(m, rawCellOf(c))
		if err != nil {
			return nil, toStatus(err)
		}
		if ok {
			out.Put++
		}
	}
	for _, c := range in.GetDelete() {
		if err := a.s.engine.DeleteRawCell(m, rawCellOf(c)); err != nil {
			return nil, toStatus(err)
		}
		out.Deleted++
	}
	return out, nil
}

// ReplicationDiff compares the table here with each peer's copy (or the
// request's peer's), and with repair settles the differences.
func (a *ebbAdmin) ReplicationDiff(ctx context.Context, in *ebbadminpb.ReplicationDiffRequest) (*ebbadminpb.ReplicationDiffResponse, error) {
	s := a.s
	m, err := a.tableOfRequest(in)
	if err != nil {
		return nil, err
	}
	repair := in.GetRepair()
	peers := s.peers.list()
	if p := in.GetPeer(); p != "" {
		pi, ok := s.peers.get(p)
		if !ok {
			return nil, status.Errorf(codes.NotFound, "ebbtable: cluster %q is not a peer of %q", p, s.opts.ClusterID)
		}
		peers = []peerInfo{pi}
	}
	if len(peers) == 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: cluster %q has no peers to compare with", s.opts.ClusterID)
	}
	bounds, err := s.engine.RowBoundaries(m, diffChunkRows)
	if err != nil {
		return nil, toStatus(err)
	}
	d := replication.Diff{Engine: s.engine, Meta: m, Bounds: bounds,
		Local: replication.DiffSide{ID: s.opts.ClusterID, Cutoffs: s.ageCutoffs(m), Applied: map[string]int64{}}}
	for _, p := range s.peers.list() {
		if pos, ok, err := s.replCheckpoint(m, p.ID); err == nil && ok {
			d.Local.Applied[p.ID] = pos.Commit
		}
	}
	ctx, op := s.trackProgress(ctx)
	defer op.Finish()
	out := &ebbadminpb.ReplicationDiffResponse{Cluster: s.opts.ClusterID, Table: m.Name}
	for i, p := range peers {
		op.Phase(fmt.Sprintf("peer %s (%d/%d)", p.ID, i+1, len(peers)), "chunks", int64(len(bounds)+1))
		callCtx, cancel := context.WithTimeout(ctx, time.Minute)
		res, err := d.Peer(callCtx, p.ID, diffPeer{s: s, id: p.ID}, peerApplied{s}, repair)
		cancel()
		if err != nil {
			var pe *replication.PeerError
			if errors.As(err, &pe) {
				return nil, status.Error(codes.Unavailable, "ebbtable: "+pe.Error())
			}
			return nil, toStatus(err)
		}
		dp := &ebbadminpb.DiffPeer{Peer: res.Peer, Chunks: int64(res.Chunks), DifferingChunks: int64(res.Differing)}
		for _, f := range res.Cells {
			dp.Cells = append(dp.Cells, &ebbadminpb.DiffCell{
				Row: f.Cell.Row, Family: f.Cell.Family, Qualifier: f.Cell.Qualifier,
				Timestamp: f.Cell.Timestamp, On: f.On, Lacking: f.Lacking, Class: f.Class,
			})
		}
		if repair {
			dp.Repaired = proto.Int64(res.Repaired)
		}
		out.Peers = append(out.Peers, dp)
	}
	return out, nil
}

// diffPeer is replication.DiffPeer over EbbAdmin.
type diffPeer struct {
	s  *Server
	id string
}

func (p diffPeer) request(m *table.Meta) (proj, inst string, c ebbadminpb.EbbAdminClient, err error) {
	proj, inst, _ = splitInstance(m.Instance)
	c, err = p.s.peerClient(p.id)
	return proj, inst, c, err
}

func (p diffPeer) Chunks(ctx context.Context, m *table.Meta, bounds [][]byte) ([][]byte, map[string]int64, error) {
	proj, inst, c, err := p.request(m)
	if err != nil {
		return nil, nil, err
	}
	out, err := c.TableChunks(ctx, &ebbadminpb.TableChunksRequest{Project: proj, Instance: inst, Table: m.Name, Bounds: bounds})
	if err != nil {
		return nil, nil, err
	}
	hashes := make([][]byte, 0, len(out.GetChunks()))
	for _, ch := range out.GetChunks() {
		hashes = append(hashes, ch.GetHash())
	}
	return hashes, out.GetCutoffs(), nil
}

func (p diffPeer) Cells(ctx context.Context, m *table.Meta, start, end []byte) ([]table.RawCell, error) {
	proj, inst, c, err := p.request(m)
	if err != nil {
		return nil, err
	}
	req := &ebbadminpb.TableCellsRequest{Project: proj, Instance: inst, Table: m.Name, Start: start}
	if end != nil {
		req.End = end
	}
	out, err := c.TableCells(ctx, req)
	if err != nil {
		return nil, err
	}
	cells := make([]table.RawCell, 0, len(out.GetCells()))
	for _, pc := range out.GetCells() {
		cells = append(cells, rawCellOf(pc))
	}
	return cells, nil
}

func (p diffPeer) Repair(ctx context.Context, m *table.Meta, put, del []table.RawCell) (int64, error) {
	proj, inst, c, err := p.request(m)
	if err != nil {
		return 0, err
	}
	req := &ebbadminpb.RepairCellsRequest{Project: proj, Instance: inst, Table: m.Name}
	for _, cell := range put {
		req.Put = append(req.Put, rawCellPB(cell))
	}
	for _, cell := range del {
		req.Delete = append(req.Delete, rawCellPB(cell))
	}
	out, err := c.RepairCells(ctx, req)
	if err != nil {
		return 0, err
	}
	return out.GetPut() + out.GetDeleted(), nil
}
