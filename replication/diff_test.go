package replication_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

// memDiffPeer is another node as a diff asks it.
type memDiffPeer struct {
	t  *testing.T
	nd *node
}

func (p memDiffPeer) meta(m *table.Meta) *table.Meta {
	mine, err := p.nd.eng.Table(m.Instance, m.Name)
	if err != nil {
		p.t.Fatal(err)
	}
	return mine
}

func (p memDiffPeer) Chunks(_ context.Context, m *table.Meta, bounds [][]byte) ([][]byte, map[string]int64, error) {
	var hashes [][]byte
	for _, r := range replication.ChunkRanges(bounds) {
		h, _, err := p.nd.eng.ChunkHash(p.meta(m), r[0], r[1])
		if err != nil {
			return nil, nil, err
		}
		hashes = append(hashes, h)
	}
	return hashes, nil, nil
}

func (p memDiffPeer) Cells(_ context.Context, m *table.Meta, start, end []byte) ([]table.RawCell, error) {
	var out []table.RawCell
	err := p.nd.eng.RawCells(p.meta(m), start, end, func(c table.RawCell) error { out = append(out, c); return nil })
	return out, err
}

func (p memDiffPeer) Repair(_ context.Context, m *table.Meta, put, del []table.RawCell) (int64, error) {
	var n int64
	for _, c := range put {
		ok, err := p.nd.eng.RepairCell(p.meta(m), c)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	for _, c := range del {
		if err := p.nd.eng.DeleteRawCell(p.meta(m), c); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Applied answers how far the node applied each peer's records.
func (p memDiffPeer) Applied(_ context.Context, _, instance, tbl string) (int64, map[string]int64, error) {
	m, err := p.nd.eng.Table(instance, tbl)
	if err != nil {
		return 0, nil, err
	}
	applied := map[string]int64{}
	for _, peer := range p.nd.List() {
		if pos, ok, err := p.nd.eng.Checkpoint(m, peer.ID); err == nil && ok {
			applied[peer.ID] = pos.Commit
		}
	}
	return p.nd.eng.ClosedTimestamp(), applied, nil
}

func diffOf(t *testing.T, a, b *node, tbl string, repair bool) *replication.PeerDiff {
	t.Helper()
	m, err := a.eng.Table(inst, tbl)
	if err != nil {
		t.Fatal(err)
	}
	bounds, err := a.eng.RowBoundaries(m, 2)
	if err != nil {
		t.Fatal(err)
	}
	peer := memDiffPeer{t, b}
	d := replication.Diff{Engine: a.eng, Meta: m, Bounds: bounds, Local: replication.DiffSide{ID: a.id, Applied: map[string]int64{}}}
	if _, applied, err := (memDiffPeer{t, a}).Applied(context.Background(), a.id, inst, tbl); err == nil {
		d.Local.Applied = applied
	}
	out, err := d.Peer(context.Background(), b.id, peer, peer, repair)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func cellsOf(d *replication.PeerDiff) string {
	var b strings.Builder
	for _, c := range d.Cells {
		fmt.Fprintf(&b, "%s on %s: %s; ", c.Cell.Row, c.On, c.Class)
	}
	return b.String()
}

// TestDiff compares two in-memory clusters: a copy in sync differs in
// nothing; a write b has not pulled is in flight; a cell lost on b is
// unexpected, and repair copies it back (leaving the write in flight to
// replication); once b pulls, nothing differs.
func TestDiff(t *testing.T) {
	n := newNetwork(t)
	a, b := n.add("a", -1), n.add("b", -1)
	link(a, b)
	createTable(t, a, "t", gcrule.None())
	for i := range 6 {
		put(t, a, "t", fmt.Sprintf("r%d", i), "v")
	}
	pull(t, b, "a")
	if got := rows(b, "t"); got != "r0=v,r1=v,r2=v,r3=v,r4=v,r5=v," {
		t.Fatalf("b reads %q", got)
	}
	if d := diffOf(t, a, b, "t", false); len(d.Cells) != 0 || d.Differing != 0 || d.Chunks < 2 || d.Repaired != -1 {
		t.Fatalf("in sync: %+v", d)
	}

	n.clock.Advance(1000)
	put(t, a, "t", "r6", "new")
	mb, err := b.eng.Table(inst, "t")
	if err != nil {
		t.Fatal(err)
	}
	var lost table.RawCell
	if err := b.eng.RawCells(mb, []byte("r2"), []byte("r3"), func(c table.RawCell) error { lost = c; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := b.eng.DeleteRawCell(mb, lost); err != nil {
		t.Fatal(err)
	}
	d := diffOf(t, a, b, "t", true)
	if got, want := cellsOf(d), "r2 on a: unexpected; r6 on a: in flight; "; got != want || d.Repaired != 1 || d.Differing == 0 {
		t.Fatalf("diff %q (repaired %d), want %q (repaired 1)", got, d.Repaired, want)
	}
	if got := cellsOf(diffOf(t, a, b, "t", false)); got != "r6 on a: in flight; " {
		t.Fatalf("after repair: %q", got)
	}
	pull(t, b, "a")
	if d := diffOf(t, a, b, "t", false); len(d.Cells) != 0 {
		t.Fatalf("after the pull: %q", cellsOf(d))
	}
}

// TestClassify: a cell collected by age on the side lacking it and not on
// the other is expected; one whose origin the lacking side has not applied
// that far is in flight; anything else unexpected.
func TestClassify(t *testing.T) {
	cell := table.RawCell{Row: []byte("r"), Family: "f", Timestamp: 100, Stamp: storage.Stamp{Commit: 500, Cluster: "c"}}
	for _, tc := range []struct {
		name          string
		onCut, lacked map[string]int64
		applied       int64
		want          string
	}{
		{"collected there, not here", nil, map[string]int64{"f": 200}, 0, replication.ClassExpected},
		{"collected on both sides", map[string]int64{"f": 150}, map[string]int64{"f": 200}, 0, replication.ClassInFlight},
		{"origin not applied", nil, nil, 499, replication.ClassInFlight},
		{"origin applied", nil, nil, 500, replication.ClassUnexpected},
		{"cutoff below the cell", nil, map[string]int64{"f": 100}, 500, replication.ClassUnexpected},
	} {
		sides := map[string]replication.DiffSide{
			"a": {ID: "a", Cutoffs: tc.onCut},
			"b": {ID: "b", Cutoffs: tc.lacked, Applied: map[string]int64{"c": tc.applied}},
		}
		if got := replication.Classify(replication.OneSided{Cell: cell, On: "a", Lacking: "b"}, sides); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	// A cell whose origin is the lacking side itself is never in flight.
	own := cell
	own.Stamp.Cluster = "b"
	if got := replication.Classify(replication.OneSided{Cell: own, On: "a", Lacking: "b"}, map[string]replication.DiffSide{"a": {ID: "a"}, "b": {ID: "b"}}); got != replication.ClassUnexpected {
		t.Errorf("own cell: %s", got)
	}
}
