package server

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/ebbtable/ebbtable/progress"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Comparing clusters: ebbtable replication diff TABLE. The cluster asked
// splits the table into chunks of about diffChunkRows rows, asks each peer
// for a digest of the same chunks (EbbAdmin/TableChunks), fetches the cells
// of the chunks that differ from both sides and lists the cells one side
// has and the other lacks (or holds with another value), each classed as:
//   - expected: its family's age rule has collected it on the side that
//     lacks it and not yet on the other (a raise window: the clusters' age
//     cutoffs differ, see ebbtable_replication_gc_divergence_seconds);
//   - in flight: the side that lacks it has not yet applied the origin's
//     records that far;
//   - unexpected: anything else.
// --repair settles them: an expected cell is deleted where it remains
// (where its age has passed on another cluster), an unexpected one is
// copied, with its stamp, to the side that lacks it (or that holds the
// older write); cells in flight are left to replication.

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
	classExpected   = "expected"
	classInFlight   = "in flight"
	classUnexpected = "unexpected"
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

// chunkRanges turns boundaries into [start, end) row ranges covering the
// whole table (nil end: to the end).
func chunkRanges(bounds [][]byte) [][2][]byte {
	var out [][2][]byte
	var start []byte
	for _, b := range bounds {
		out = append(out, [2][]byte{start, b})
		start = b
	}
	return append(out, [2][]byte{start, nil})
}

// TableChunks digests the table's chunks split at the request's bounds and
// tells the families' age cutoffs here.
func (a *ebbAdmin) TableChunks(ctx context.Context, in *ebbadminpb.TableChunksRequest) (*ebbadminpb.TableChunksResponse, error) {
	m, err := a.tableOfRequest(in)
	if err != nil {
		return nil, err
	}
	out := &ebbadminpb.TableChunksResponse{Cutoffs: a.s.ageCutoffs(m)}
	for _, r := range chunkRanges(in.GetBounds()) {
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

// diffSide is what the diff knows of one cluster.
type diffSide struct {
	id      string
	cutoffs map[string]int64 // family → age cutoff
	applied map[string]int64 // origin → commit time applied through
}

// oneSided is a cell one side has and the other lacks or holds otherwise.
type oneSided struct {
	cell    table.RawCell
	on      string // the cluster that has it
	lacking string
	class   string
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
	ranges := chunkRanges(bounds)
	local := diffSide{id: s.opts.ClusterID, cutoffs: s.ageCutoffs(m), applied: map[string]int64{}}
	for _, p := range s.peers.list() {
		if pos, ok, err := s.engine.Checkpoint(m, p.ID); err == nil && ok {
			local.applied[p.ID] = pos.Commit
		}
	}
	ctx, op := s.trackProgress(ctx)
	defer op.Finish()
	out := &ebbadminpb.ReplicationDiffResponse{Cluster: s.opts.ClusterID, Table: m.Name}
	for i, p := range peers {
		op.Phase(fmt.Sprintf("peer %s (%d/%d)", p.ID, i+1, len(peers)), "chunks", int64(len(ranges)))
		callCtx, cancel := context.WithTimeout(ctx, time.Minute)
		res, err := a.diffPeer(callCtx, m, p.ID, local, ranges, bounds, repair)
		cancel()
		if err != nil {
			return nil, err
		}
		out.Peers = append(out.Peers, res)
	}
	return out, nil
}

func (a *ebbAdmin) diffPeer(ctx context.Context, m *table.Meta, peer string, local diffSide, ranges [][2][]byte, bounds [][]byte, repair bool) (*ebbadminpb.DiffPeer, error) {
	s := a.s
	c, err := s.peerClient(peer)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "ebbtable: cluster %s: %v", peer, err)
	}
	proj, inst, _ := splitInstance(m.Instance)
	out, err := c.TableChunks(ctx, &ebbadminpb.TableChunksRequest{Project: proj, Instance: inst, Table: m.Name, Bounds: bounds})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "ebbtable: cluster %s: %v", peer, err)
	}
	remote := diffSide{id: peer, cutoffs: out.GetCutoffs()}
	if remote.cutoffs == nil {
		remote.cutoffs = map[string]int64{}
	}
	_, remote.applied, err = s.peerStatus(ctx, peer, tableRef{instance: m.Instance, table: m.Name})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "ebbtable: cluster %s: %v", peer, err)
	}
	chunks := out.GetChunks()
	if len(chunks) != len(ranges) {
		return nil, status.Errorf(codes.Internal, "ebbtable: cluster %s answered %d chunks for %d", peer, len(chunks), len(ranges))
	}
	var found []oneSided
	differing := 0
	op := progress.FromContext(ctx)
	for i, r := range ranges {
		op.Add(1)
		h, _, err := s.engine.ChunkHash(m, r[0], r[1])
		if err != nil {
			return nil, toStatus(err)
		}
		if bytes.Equal(h, chunks[i].GetHash()) {
			continue
		}
		differing++
		req := &ebbadminpb.TableCellsRequest{Project: proj, Instance: inst, Table: m.Name, Start: r[0]}
		if r[1] != nil {
			req.End = r[1]
		}
		cellsOut, err := c.TableCells(ctx, req)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: cluster %s: %v", peer, err)
		}
		theirs := map[string]table.RawCell{}
		for _, pc := range cellsOut.GetCells() {
			c := rawCellOf(pc)
			theirs[c.Coord()] = c
		}
		mine := map[string]table.RawCell{}
		if err := s.engine.RawCells(m, r[0], r[1], func(c table.RawCell) error { mine[c.Coord()] = c; return nil }); err != nil {
			return nil, toStatus(err)
		}
		for k, c := range mine {
			t, ok := theirs[k]
			switch {
			case !ok:
				found = append(found, oneSided{cell: c, on: local.id, lacking: peer})
			case !bytes.Equal(t.Value, c.Value) || t.ExpireAt != c.ExpireAt:
				if t.Stamp.Less(c.Stamp) {
					found = append(found, oneSided{cell: c, on: local.id, lacking: peer})
				} else {
					found = append(found, oneSided{cell: t, on: peer, lacking: local.id})
				}
			}
		}
		for k, t := range theirs {
			if _, ok := mine[k]; !ok {
				found = append(found, oneSided{cell: t, on: peer, lacking: local.id})
			}
		}
	}
	sides := map[string]diffSide{local.id: local, peer: remote}
	for i := range found {
		found[i].class = classify(m, found[i], sides)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].cell.Coord() < found[j].cell.Coord() })
	res := &ebbadminpb.DiffPeer{Peer: peer, Chunks: int64(len(ranges)), DifferingChunks: int64(differing)}
	for _, f := range found {
		res.Cells = append(res.Cells, &ebbadminpb.DiffCell{
			Row: f.cell.Row, Family: f.cell.Family, Qualifier: f.cell.Qualifier,
			Timestamp: f.cell.Timestamp, On: f.on, Lacking: f.lacking, Class: f.class,
		})
	}
	if repair {
		n, err := a.repair(ctx, m, peer, found)
		if err != nil {
			return nil, err
		}
		res.Repaired = proto.Int64(n)
	}
	return res, nil
}

// classify tells why a cell is one-sided.
func classify(m *table.Meta, f oneSided, sides map[string]diffSide) string {
	on, lacking := sides[f.on], sides[f.lacking]
	c := f.cell
	if cut, ok := lacking.cutoffs[c.Family]; ok && c.Timestamp < cut {
		if have, ok := on.cutoffs[c.Family]; !ok || c.Timestamp >= have {
			return classExpected
		}
	}
	origin := c.Stamp.Cluster
	if origin != "" && origin != lacking.id && lacking.applied[origin] < c.Stamp.Commit {
		return classInFlight
	}
	return classUnexpected
}

// repair settles the one-sided cells: expected ones are deleted where they
// remain, unexpected ones copied to where they lack.
func (a *ebbAdmin) repair(ctx context.Context, m *table.Meta, peer string, found []oneSided) (int64, error) {
	s := a.s
	var n int64
	var remotePut, remoteDel []*ebbadminpb.RawCell
	for _, f := range found {
		switch {
		case f.class == classExpected && f.on == s.opts.ClusterID:
			if err := s.engine.DeleteRawCell(m, f.cell); err != nil {
				return 0, toStatus(err)
			}
			n++
		case f.class == classExpected:
			remoteDel = append(remoteDel, rawCellPB(f.cell))
		case f.class == classUnexpected && f.on == s.opts.ClusterID:
			remotePut = append(remotePut, rawCellPB(f.cell))
		case f.class == classUnexpected:
			ok, err := s.engine.RepairCell(m, f.cell)
			if err != nil {
				return 0, toStatus(err)
			}
			if ok {
				n++
			}
		}
	}
	if len(remotePut)+len(remoteDel) > 0 {
		c, err := s.peerClient(peer)
		if err != nil {
			return 0, status.Errorf(codes.Unavailable, "ebbtable: repairing on cluster %s: %v", peer, err)
		}
		proj, inst, _ := splitInstance(m.Instance)
		out, err := c.RepairCells(ctx, &ebbadminpb.RepairCellsRequest{Project: proj, Instance: inst, Table: m.Name, Put: remotePut, Delete: remoteDel})
		if err != nil {
			return 0, status.Errorf(codes.Unavailable, "ebbtable: repairing on cluster %s: %v", peer, err)
		}
		n += out.GetPut() + out.GetDeleted()
	}
	return n, nil
}
