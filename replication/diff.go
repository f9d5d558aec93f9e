package replication

import (
	"bytes"
	"context"
	"fmt"
	"sort"

	"github.com/ebbtable/ebbtable/progress"
	"github.com/ebbtable/ebbtable/table"
)

// Comparing clusters (ebbtable replication diff TABLE). The table is split
// into row ranges; each peer digests the same ranges; the cells of the
// ranges that differ are fetched from both sides and every cell one side
// has and the other lacks (or holds with another value) is classed:
//   - expected: its family's age rule has collected it on the side that
//     lacks it and not yet on the other (a raise window: the clusters' age
//     cutoffs differ);
//   - in flight: the side that lacks it has not yet applied the origin's
//     records that far;
//   - unexpected: anything else.
// Repair settles them: an expected cell is deleted where it remains (its
// age has passed on another cluster), an unexpected one is copied, with its
// stamp, to the side that lacks it (or that holds the older write); cells
// in flight are left to replication.

// The classes of a one-sided cell.
const (
	ClassExpected   = "expected"
	ClassInFlight   = "in flight"
	ClassUnexpected = "unexpected"
)

// DiffEngine is the part of the engine a diff reads and repairs.
type DiffEngine interface {
	ChunkHash(m *table.Meta, start, end []byte) ([]byte, int, error)
	RawCells(m *table.Meta, start, end []byte, fn func(table.RawCell) error) error
	RepairCell(m *table.Meta, c table.RawCell) (bool, error)
	DeleteRawCell(m *table.Meta, c table.RawCell) error
}

var _ DiffEngine = (*table.Engine)(nil)

// DiffPeer is another cluster as a diff asks it (the server's
// EbbAdmin/TableChunks, TableCells, RepairCells).
type DiffPeer interface {
	// Chunks digests the table's ranges split at bounds (len(bounds)+1
	// hashes) and tells the families' age cutoffs there.
	Chunks(ctx context.Context, m *table.Meta, bounds [][]byte) (hashes [][]byte, cutoffs map[string]int64, err error)
	// Cells lists the stored cells of rows [start, end) (nil end: to the
	// end).
	Cells(ctx context.Context, m *table.Meta, start, end []byte) ([]table.RawCell, error)
	// Repair writes put (where newer) and deletes del there; it answers
	// how many cells changed.
	Repair(ctx context.Context, m *table.Meta, put, del []table.RawCell) (int64, error)
}

// DiffSide is what a diff knows of one cluster.
type DiffSide struct {
	ID      string
	Cutoffs map[string]int64 // family → age cutoff
	Applied map[string]int64 // origin → commit time applied through
}

// OneSided is a cell one side has and the other lacks or holds otherwise.
type OneSided struct {
	Cell    table.RawCell
	On      string // the cluster that has it
	Lacking string
	Class   string
}

// PeerDiff is the comparison with one peer.
type PeerDiff struct {
	Peer              string
	Chunks, Differing int
	Cells             []OneSided // by coordinate
	// Repaired is how many cells a repair changed (-1: none asked).
	Repaired int64
}

// PeerError is a peer that failed a diff's call.
type PeerError struct {
	Peer      string
	Repairing bool
	Err       error
}

func (e *PeerError) Error() string {
	if e.Repairing {
		return fmt.Sprintf("repairing on cluster %s: %v", e.Peer, e.Err)
	}
	return fmt.Sprintf("cluster %s: %v", e.Peer, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// ChunkRanges turns boundaries into [start, end) row ranges covering the
// whole table (nil end: to the end).
func ChunkRanges(bounds [][]byte) [][2][]byte {
	var out [][2][]byte
	var start []byte
	for _, b := range bounds {
		out = append(out, [2][]byte{start, b})
		start = b
	}
	return append(out, [2][]byte{start, nil})
}

// Diff compares a table here with peers.
type Diff struct {
	Engine DiffEngine
	Meta   *table.Meta
	Local  DiffSide
	// Bounds split the table into ranges (engine.RowBoundaries).
	Bounds [][]byte
}

// Peer compares the table with one peer (remote, its applied positions
// from status) and, with repair, settles the differences. Progress counts
// ranges on ctx's progress.Op. Peer failures come back as *PeerError.
func (d Diff) Peer(ctx context.Context, id string, remote DiffPeer, status Applied, repair bool) (*PeerDiff, error) {
	m := d.Meta
	ranges := ChunkRanges(d.Bounds)
	hashes, cutoffs, err := remote.Chunks(ctx, m, d.Bounds)
	if err != nil {
		return nil, &PeerError{Peer: id, Err: err}
	}
	other := DiffSide{ID: id, Cutoffs: cutoffs}
	if other.Cutoffs == nil {
		other.Cutoffs = map[string]int64{}
	}
	if _, other.Applied, err = status.Applied(ctx, id, m.Instance, m.Name); err != nil {
		return nil, &PeerError{Peer: id, Err: err}
	}
	if len(hashes) != len(ranges) {
		return nil, fmt.Errorf("ebbtable: cluster %s answered %d chunks for %d", id, len(hashes), len(ranges))
	}
	out := &PeerDiff{Peer: id, Chunks: len(ranges), Repaired: -1}
	op := progress.FromContext(ctx)
	for i, r := range ranges {
		op.Add(1)
		h, _, err := d.Engine.ChunkHash(m, r[0], r[1])
		if err != nil {
			return nil, err
		}
		if bytes.Equal(h, hashes[i]) {
			continue
		}
		out.Differing++
		theirs, err := remote.Cells(ctx, m, r[0], r[1])
		if err != nil {
			return nil, &PeerError{Peer: id, Err: err}
		}
		var mine []table.RawCell
		if err := d.Engine.RawCells(m, r[0], r[1], func(c table.RawCell) error { mine = append(mine, c); return nil }); err != nil {
			return nil, err
		}
		out.Cells = append(out.Cells, CompareCells(d.Local.ID, id, mine, theirs)...)
	}
	sides := map[string]DiffSide{d.Local.ID: d.Local, id: other}
	for i := range out.Cells {
		out.Cells[i].Class = Classify(out.Cells[i], sides)
	}
	sort.Slice(out.Cells, func(i, j int) bool { return out.Cells[i].Cell.Coord() < out.Cells[j].Cell.Coord() })
	if repair {
		if out.Repaired, err = d.repair(ctx, id, remote, out.Cells); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CompareCells lists the cells one side has and the other lacks, and of
// the cells both hold with another value or expiry, the newer write's.
func CompareCells(local, peer string, mine, theirs []table.RawCell) []OneSided {
	byCoord := func(cs []table.RawCell) map[string]table.RawCell {
		out := make(map[string]table.RawCell, len(cs))
		for _, c := range cs {
			out[c.Coord()] = c
		}
		return out
	}
	my, their := byCoord(mine), byCoord(theirs)
	var found []OneSided
	for k, c := range my {
		t, ok := their[k]
		switch {
		case !ok:
			found = append(found, OneSided{Cell: c, On: local, Lacking: peer})
		case !bytes.Equal(t.Value, c.Value) || t.ExpireAt != c.ExpireAt:
			if t.Stamp.Less(c.Stamp) {
				found = append(found, OneSided{Cell: c, On: local, Lacking: peer})
			} else {
				found = append(found, OneSided{Cell: t, On: peer, Lacking: local})
			}
		}
	}
	for k, t := range their {
		if _, ok := my[k]; !ok {
			found = append(found, OneSided{Cell: t, On: peer, Lacking: local})
		}
	}
	return found
}

// Classify tells why a cell is one-sided.
func Classify(f OneSided, sides map[string]DiffSide) string {
	on, lacking := sides[f.On], sides[f.Lacking]
	c := f.Cell
	if cut, ok := lacking.Cutoffs[c.Family]; ok && c.Timestamp < cut {
		if have, ok := on.Cutoffs[c.Family]; !ok || c.Timestamp >= have {
			return ClassExpected
		}
	}
	origin := c.Stamp.Cluster
	if origin != "" && origin != lacking.ID && lacking.Applied[origin] < c.Stamp.Commit {
		return ClassInFlight
	}
	return ClassUnexpected
}

// repair settles the one-sided cells: expected ones are deleted where they
// remain, unexpected ones copied to where they lack.
func (d Diff) repair(ctx context.Context, id string, remote DiffPeer, found []OneSided) (int64, error) {
	var n int64
	var put, del []table.RawCell
	for _, f := range found {
		here := f.On == d.Local.ID
		switch {
		case f.Class == ClassExpected && here:
			if err := d.Engine.DeleteRawCell(d.Meta, f.Cell); err != nil {
				return 0, err
			}
			n++
		case f.Class == ClassExpected:
			del = append(del, f.Cell)
		case f.Class == ClassUnexpected && here:
			put = append(put, f.Cell)
		case f.Class == ClassUnexpected:
			ok, err := d.Engine.RepairCell(d.Meta, f.Cell)
			if err != nil {
				return 0, err
			}
			if ok {
				n++
			}
		}
	}
	if len(put)+len(del) > 0 {
		changed, err := remote.Repair(ctx, d.Meta, put, del)
		if err != nil {
			return 0, &PeerError{Peer: id, Repairing: true, Err: err}
		}
		n += changed
	}
	return n, nil
}
