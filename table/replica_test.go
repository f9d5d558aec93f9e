package table

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
)

// replica is one cluster of a replication test: an engine and how far it
// has pulled from each peer.
type replica struct {
	id     string
	e      *Engine
	m      *Meta
	pulled map[string]changestream.Position
}

func newReplica(t *testing.T, id string, fake *clock.Fake) *replica {
	t.Helper()
	e, err := Open(Options{Dir: t.TempDir(), Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.SetReplicating(id); err != nil {
		t.Fatal(err)
	}
	m, err := e.CreateTable(testInst, "t", TableSpec{Families: []FamilySpec{{Name: "cf", GC: gcrule.MustParse("never")}}})
	if err != nil {
		t.Fatal(err)
	}
	return &replica{id: id, e: e, m: m, pulled: map[string]changestream.Position{}}
}

// pull applies the records that originated on src and src has committed.
func (r *replica) pull(t *testing.T, src *replica) {
	t.Helper()
	lower := changestream.TableStart(src.m.ID)
	if p, ok := r.pulled[src.id]; ok {
		lower = changestream.After(src.m.ID, p)
	}
	b, err := src.e.ReadChanges(src.m, lower, 0)
	if err != nil {
		t.Fatal(err)
	}
	var recs []changestream.Record
	for _, rec := range b.Records {
		if rec.SourceCluster == "" && rec.Type == changestream.User {
			recs = append(recs, rec)
		}
	}
	through := changestream.Position{Commit: b.Closed, Index: ^uint32(0)}
	if _, err := r.e.ApplyReplicated(r.m, src.id, recs, through); err != nil {
		t.Fatal(err)
	}
	r.pulled[src.id] = through
	if p, ok, err := r.e.Checkpoint(r.m, src.id); err != nil || !ok || p != through {
		t.Fatalf("checkpoint %v %v %v", p, ok, err)
	}
}

func (r *replica) dump(t *testing.T) string {
	t.Helper()
	var lines []string
	err := r.e.ReadRows(context.Background(), testInst, "t", ReadRequest{}, func(row cell.Row) error {
		for _, c := range row.Cells {
			lines = append(lines, fmt.Sprintf("%s/%s:%s@%d=%s", row.Key, c.Family, c.Qualifier, c.Timestamp, c.Value))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func set(row, q string, ts int64, v string) RowMutation {
	return RowMutation{Row: []byte(row), Mutations: []Mutation{{Kind: SetCell, Family: "cf", Qualifier: []byte(q), Timestamp: ts, Value: []byte(v)}}}
}

func (r *replica) write(t *testing.T, ms ...RowMutation) {
	t.Helper()
	for _, m := range ms {
		if err := r.e.MutateRow(testInst, "t", m.Row, m.Mutations); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReplicasConverge: concurrent writes to the same cell, and a delete
// racing an older write, end the same on both clusters whatever order the
// records arrive in; applying records twice changes nothing.
func TestReplicasConverge(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a, b := newReplica(t, "a", fake), newReplica(t, "b", fake)

	a.write(t, set("r1", "q", 1000, "from-a"), set("r2", "q", 1000, "a-old"))
	fake.Advance(time.Millisecond)
	b.write(t, set("r1", "q", 1000, "from-b")) // later commit: b wins the cell
	b.write(t, RowMutation{Row: []byte("r2"), Mutations: []Mutation{{Kind: DeleteFromRow}}})
	fake.Advance(time.Millisecond)
	a.write(t, set("r3", "q", 2000, "only-a"))

	b.pull(t, a) // b sees a's older r1 write and r2 write after its own
	a.pull(t, b)
	b.pull(t, a) // nothing new: harmless
	a.pull(t, b)
	if da, db := a.dump(t), b.dump(t); da != db {
		t.Fatalf("diverged:\na:\n%s\nb:\n%s", da, db)
	}
	want := "r1/cf:q@1000=from-b\nr3/cf:q@2000=only-a"
	if got := a.dump(t); got != want {
		t.Fatalf("converged to\n%s\nwant\n%s", got, want)
	}

	// Applying a batch again (a lost checkpoint) changes nothing.
	delete(b.pulled, "a")
	b.pull(t, a)
	if got := b.dump(t); got != want {
		t.Fatalf("after re-applying:\n%s", got)
	}
}

// TestReplicaLocalWritesFollowApplied: after applying a peer's record
// stamped in the future (a fast clock), a local write still wins, because
// the commit sequence follows what it has seen.
func TestReplicaLocalWritesFollowApplied(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a, b := newReplica(t, "a", fake), newReplica(t, "b", fake)
	fake.Advance(time.Hour)
	a.write(t, set("r", "q", 1000, "a"))
	fake.Set(fake.Now().Add(-time.Hour)) // b's clock is an hour behind
	b.pull(t, a)
	b.write(t, set("r", "q", 1000, "b-later"))
	a.pull(t, b)
	if da, db := a.dump(t), b.dump(t); da != db || da != "r/cf:q@1000=b-later" {
		t.Fatalf("a:\n%s\nb:\n%s", da, db)
	}
}

// TestReplicatedRecordsAreNotShippedBack: what a cluster applied from a
// peer is recorded with the peer as its source.
func TestReplicatedRecordsAreNotShippedBack(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a, b := newReplica(t, "a", fake), newReplica(t, "b", fake)
	a.write(t, set("r", "q", 1000, "v"))
	b.pull(t, a)
	recs := allChanges(t, b.e, b.m)
	if len(recs) != 1 || recs[0].SourceCluster != "a" {
		t.Fatalf("b's records: %+v", recs)
	}
	n, err := b.e.TrimTombstones(1 << 62)
	if err != nil || n != 0 {
		t.Fatalf("trim: %d %v", n, err)
	}
}

// TestTrimTombstones: tombstones go once older than the mark, whatever
// bytes their row key holds.
func TestTrimTombstones(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a := newReplica(t, "a", fake)
	for _, row := range []string{"plain", "a\x00\x01b", "\x00\x01"} {
		a.write(t, RowMutation{Row: []byte(row), Mutations: []Mutation{{Kind: DeleteFromRow}}})
	}
	if n, err := a.e.TrimTombstones(clock.Micros(fake.Now()) - 1); err != nil || n != 0 {
		t.Fatalf("trim below every stamp: %d %v", n, err)
	}
	if n, err := a.e.TrimTombstones(clock.Micros(fake.Now()) + 10); err != nil || n != 3 {
		t.Fatalf("trim above every stamp: %d %v", n, err)
	}
}
