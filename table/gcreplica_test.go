package table

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
)

func setRule(e *Engine, rule string) error {
	_, err := e.ModifyFamilies(testInst, "t", []FamilyMod{{Name: "cf", Update: true, GC: gcrule.MustParse(rule)}})
	return err
}

// TestReplicatedMaxAgeRaiseIsBounded: on a replicated table a local change
// may raise a family's max age by 90 days, not more; removing the age term
// is an unbounded raise. A change that arrives from a peer is not checked.
func TestReplicatedMaxAgeRaiseIsBounded(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := newReplica(t, "a", fake)
	if err := setRule(r.e, "maxage=10d"); err != nil {
		t.Fatal(err)
	}
	if err := setRule(r.e, "maxage=100d"); err != nil { // exactly 90 days more
		t.Fatalf("a 90-day raise: %v", err)
	}
	err := setRule(r.e, "maxage=191d || maxversions=2")
	if !errors.Is(err, ErrPrecondition) {
		t.Fatalf("a 91-day raise: %v, want ErrPrecondition", err)
	}
	for _, want := range []string{"90 days", "100d", "191d"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	for _, rule := range []string{"never", "maxversions=1"} {
		if err := setRule(r.e, rule); !errors.Is(err, ErrPrecondition) || !strings.Contains(err.Error(), "no max age") {
			t.Errorf("removing the age term (%s): %v, want ErrPrecondition", rule, err)
		}
	}
	// Lowering, and raising by less, pass; the longest age is compared.
	for _, rule := range []string{"maxage=1d", "maxage=1d || maxage=91d", "maxage=2d && maxversions=1"} {
		if err := setRule(r.e, rule); err != nil {
			t.Errorf("%s: %v", rule, err)
		}
	}
	// From a peer: not checked.
	st := storage.Stamp{Commit: clock.Micros(fake.Now()) + 1, Cluster: "b"}
	if _, err := r.e.ModifyFamiliesAt(testInst, "t", []FamilyMod{{Name: "cf", Update: true, GC: gcrule.MustParse("maxage=1000d")}}, st); err != nil {
		t.Fatalf("a peer's raise: %v", err)
	}

	// Not replicating: any raise.
	if err := r.e.SetReplicating(""); err != nil {
		t.Fatal(err)
	}
	if err := setRule(r.e, "never"); err != nil {
		t.Fatalf("unreplicated: %v", err)
	}
}

// TestPeerRuleChangeSkipsTheSchemaHook: a local rule change runs the schema
// hook (the collector collects under the old rule first); one that arrives
// from a peer does not.
func TestPeerRuleChangeSkipsTheSchemaHook(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := newReplica(t, "a", fake)
	calls := 0
	r.e.SetSchemaHook(func(*Meta, Family, gcrule.Rule) error { calls++; return nil })
	if err := setRule(r.e, "maxage=1d"); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("local change ran the hook %d times, want 1", calls)
	}
	st := storage.Stamp{Commit: clock.Micros(fake.Now()) + 1, Cluster: "b"}
	m, err := r.e.ModifyFamiliesAt(testInst, "t", []FamilyMod{{Name: "cf", Update: true, GC: gcrule.MustParse("maxage=30d")}}, st)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("a peer's change ran the hook")
	}
	if f, _ := m.Family("cf"); f.GC.String() != gcrule.MustParse("maxage=30d").String() {
		t.Errorf("rule %s", f.GC)
	}
}

// TestReplicatedGCDeleteKeepsItsTypeAndLeavesNoTombstone: the GC leader's
// versions deletion applied on a peer deletes the cell, is recorded as a
// garbage collection from the leader, and leaves no tombstone.
func TestReplicatedGCDeleteKeepsItsTypeAndLeavesNoTombstone(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a, b := newReplica(t, "a", fake), newReplica(t, "b", fake)
	a.write(t, set("r", "q", 1000, "old"), set("r", "q", 2000, "new"))
	b.pull(t, a)
	fake.Advance(time.Second)
	gc := changestream.Record{Type: changestream.GarbageCollection, Reason: changestream.ReasonGCVersions,
		TransactionTag: changestream.TagGarbageCollection, IsSystem: true, RowKey: []byte("r"),
		Mods:     []changestream.Mod{{Kind: changestream.DeleteFromColumn, Family: "cf", Qualifier: []byte("q"), StartTS: 1000, EndTS: 2000}},
		Position: changestream.Position{Commit: clock.Micros(fake.Now())}}
	gc.Commit = gc.Position.Commit
	through := changestream.Position{Commit: gc.Commit, Index: ^uint32(0)}
	if st, err := b.e.ApplyReplicated(b.m, "a", []changestream.Record{gc}, through); err != nil || st.Applied != 1 {
		t.Fatalf("apply: %+v %v", st, err)
	}
	if got := b.dump(t); got != "r/cf:q@2000=new" {
		t.Errorf("after the GC delete: %q", got)
	}
	prefix := storage.MetaPrefix(metaKindTombstone)
	it, err := b.e.store.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	if it.First() {
		t.Errorf("a GC delete left a tombstone %x", it.Key())
	}
	it.Close()
	ch, err := b.e.ReadChanges(b.m, changestream.TableStart(b.m.ID), 0)
	if err != nil {
		t.Fatal(err)
	}
	last := ch.Records[len(ch.Records)-1]
	if last.Type != changestream.GarbageCollection || last.Reason != changestream.ReasonGCVersions || last.SourceCluster != "a" {
		t.Errorf("recorded as %+v", last)
	}
}
