package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/ebbtable/ebbtable/progress"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
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
	MethodTableChunks = "/" + EbbAdminService + "/TableChunks"
	MethodTableCells  = "/" + EbbAdminService + "/TableCells"
	MethodRepairCells = "/" + EbbAdminService + "/RepairCells"
	MethodDiff        = "/" + EbbAdminService + "/ReplicationDiff"
)

const diffChunkRows = 500

// Diff classes.
const (
	classExpected   = "expected"
	classInFlight   = "in flight"
	classUnexpected = "unexpected"
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func (a *ebbAdmin) tableOfRequest(in *structpb.Struct) (*table.Meta, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	m, err := a.s.engine.Table(inst, str(in, "table"))
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

// tableChunks: {project, instance, table, bounds: [base64 row keys]} →
// {chunks: [{hash, count}], cutoffs: {family: micros}}.
func (a *ebbAdmin) tableChunks(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	m, err := a.tableOfRequest(in)
	if err != nil {
		return nil, err
	}
	var bounds [][]byte
	for _, v := range in.GetFields()["bounds"].GetListValue().GetValues() {
		b, err := base64.StdEncoding.DecodeString(v.GetStringValue())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: bound: %v", err)
		}
		bounds = append(bounds, b)
	}
	var chunks []any
	for _, r := range chunkRanges(bounds) {
		h, n, err := a.s.engine.ChunkHash(m, r[0], r[1])
		if err != nil {
			return nil, toStatus(err)
		}
		chunks = append(chunks, map[string]any{"hash": hex.EncodeToString(h), "count": float64(n)})
	}
	cutoffs := map[string]any{}
	for fam, c := range a.s.ageCutoffs(m) {
		cutoffs[fam] = strconv.FormatInt(c, 10)
	}
	return structpb.NewStruct(map[string]any{"chunks": chunks, "cutoffs": cutoffs})
}

// tableCells: {project, instance, table, start?, end?} → {cells: [JSON of
// table.RawCell]}.
func (a *ebbAdmin) tableCells(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	m, err := a.tableOfRequest(in)
	if err != nil {
		return nil, err
	}
	start, err1 := base64.StdEncoding.DecodeString(str(in, "start"))
	var end []byte
	var err2 error
	if e, ok := in.GetFields()["end"]; ok {
		end, err2 = base64.StdEncoding.DecodeString(e.GetStringValue())
	}
	if err1 != nil || err2 != nil {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: start and end are base64 row keys")
	}
	var cells []any
	err = a.s.engine.RawCells(m, start, end, func(c table.RawCell) error {
		js, err := json.Marshal(c)
		cells = append(cells, string(js))
		return err
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return structpb.NewStruct(map[string]any{"cells": cells})
}

// repairCells: {project, instance, table, put: [cell JSON], delete: [cell
// JSON]} → {put, deleted}.
func (a *ebbAdmin) repairCells(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	m, err := a.tableOfRequest(in)
	if err != nil {
		return nil, err
	}
	put, deleted := 0, 0
	for _, kind := range []string{"put", "delete"} {
		for _, v := range in.GetFields()[kind].GetListValue().GetValues() {
			var c table.RawCell
			if err := json.Unmarshal([]byte(v.GetStringValue()), &c); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "ebbtable: cell: %v", err)
			}
			if kind == "put" {
				ok, err := a.s.engine.RepairCell(m, c)
				if err != nil {
					return nil, toStatus(err)
				}
				if ok {
					put++
				}
				continue
			}
			if err := a.s.engine.DeleteRawCell(m, c); err != nil {
				return nil, toStatus(err)
			}
			deleted++
		}
	}
	return structpb.NewStruct(map[string]any{"put": float64(put), "deleted": float64(deleted)})
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

// replicationDiff: {project, instance, table, peer?, repair (bool)} →
// {peers: [{peer, chunks, differing_chunks, cells: [{row, family,
// qualifier, timestamp, on, class}], repaired}]}.
func (a *ebbAdmin) replicationDiff(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	s := a.s
	m, err := a.tableOfRequest(in)
	if err != nil {
		return nil, err
	}
	repair := in.GetFields()["repair"].GetBoolValue()
	peers := s.peers.list()
	if p := str(in, "peer"); p != "" {
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
	var boundVals []any
	for _, b := range bounds {
		boundVals = append(boundVals, b64(b))
	}
	local := diffSide{id: s.opts.ClusterID, cutoffs: s.ageCutoffs(m), applied: map[string]int64{}}
	for _, p := range s.peers.list() {
		if pos, ok, err := s.engine.Checkpoint(m, p.ID); err == nil && ok {
			local.applied[p.ID] = pos.Commit
		}
	}
	ctx, op := s.trackProgress(ctx)
	defer op.Finish()
	var results []any
	for i, p := range peers {
		op.Phase(fmt.Sprintf("peer %s (%d/%d)", p.ID, i+1, len(peers)), "chunks", int64(len(ranges)))
		callCtx, cancel := context.WithTimeout(ctx, time.Minute)
		res, err := a.diffPeer(callCtx, m, p.ID, local, ranges, boundVals, repair)
		cancel()
		if err != nil {
			return nil, err
		}
		results = append(results, res)
	}
	return structpb.NewStruct(map[string]any{"cluster": s.opts.ClusterID, "table": m.Name, "peers": results})
}

func (a *ebbAdmin) diffPeer(ctx context.Context, m *table.Meta, peer string, local diffSide, ranges [][2][]byte, bounds []any, repair bool) (map[string]any, error) {
	s := a.s
	out, err := s.callPeer(ctx, peer, MethodTableChunks, tableFields(m.Instance, m.Name, map[string]any{"bounds": bounds}))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "ebbtable: cluster %s: %v", peer, err)
	}
	remote := diffSide{id: peer, cutoffs: map[string]int64{}}
	for fam, v := range out.GetFields()["cutoffs"].GetStructValue().GetFields() {
		remote.cutoffs[fam], _ = strconv.ParseInt(v.GetStringValue(), 10, 64)
	}
	_, remote.applied, err = s.peerStatus(ctx, peer, tableRef{instance: m.Instance, table: m.Name})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "ebbtable: cluster %s: %v", peer, err)
	}
	chunks := out.GetFields()["chunks"].GetListValue().GetValues()
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
		if hex.EncodeToString(h) == chunks[i].GetStructValue().GetFields()["hash"].GetStringValue() {
			continue
		}
		differing++
		req := map[string]any{"start": b64(r[0])}
		if r[1] != nil {
			req["end"] = b64(r[1])
		}
		cellsOut, err := s.callPeer(ctx, peer, MethodTableCells, tableFields(m.Instance, m.Name, req))
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: cluster %s: %v", peer, err)
		}
		theirs := map[string]table.RawCell{}
		for _, v := range cellsOut.GetFields()["cells"].GetListValue().GetValues() {
			var c table.RawCell
			if err := json.Unmarshal([]byte(v.GetStringValue()), &c); err != nil {
				return nil, err
			}
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
	var cells []any
	for _, f := range found {
		cells = append(cells, map[string]any{
			"row": string(f.cell.Row), "family": f.cell.Family, "qualifier": string(f.cell.Qualifier),
			"timestamp": strconv.FormatInt(f.cell.Timestamp, 10), "on": f.on, "lacking": f.lacking, "class": f.class,
		})
	}
	res := map[string]any{"peer": peer, "chunks": float64(len(ranges)), "differing_chunks": float64(differing), "cells": cells}
	if repair {
		n, err := a.repair(ctx, m, peer, found)
		if err != nil {
			return nil, err
		}
		res["repaired"] = float64(n)
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
func (a *ebbAdmin) repair(ctx context.Context, m *table.Meta, peer string, found []oneSided) (int, error) {
	s := a.s
	n := 0
	var remotePut, remoteDel []any
	for _, f := range found {
		js, err := json.Marshal(f.cell)
		if err != nil {
			return 0, err
		}
		switch {
		case f.class == classExpected && f.on == s.opts.ClusterID:
			if err := s.engine.DeleteRawCell(m, f.cell); err != nil {
				return 0, toStatus(err)
			}
			n++
		case f.class == classExpected:
			remoteDel = append(remoteDel, string(js))
		case f.class == classUnexpected && f.on == s.opts.ClusterID:
			remotePut = append(remotePut, string(js))
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
		out, err := s.callPeer(ctx, peer, MethodRepairCells, tableFields(m.Instance, m.Name, map[string]any{"put": remotePut, "delete": remoteDel}))
		if err != nil {
			return 0, status.Errorf(codes.Unavailable, "ebbtable: repairing on cluster %s: %v", peer, err)
		}
		n += int(out.GetFields()["put"].GetNumberValue() + out.GetFields()["deleted"].GetNumberValue())
	}
	return n, nil
}
