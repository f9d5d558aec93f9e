package replication_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/internal/testkit/poll"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/table"
)

// TestWritesConvergeBothWays drives two clusters pull by pull: the table
// travels with the first pull, then writes, overwrites and deletes made on
// either side reach the other, the later write winning.
func TestWritesConvergeBothWays(t *testing.T) {
	n := newNetwork(t)
	a, b := n.add("a", -1), n.add("b", -1)
	link(a, b)
	createTable(t, a, "t", gcrule.MaxVersions(1))
	pull(t, b, "a")
	if got := rows(b, "t"); got != "" {
		t.Fatalf("b after the first pull: %q, want the empty table", got)
	}
	put(t, a, "t", "r1", "x")
	put(t, b, "t", "r2", "y")
	n.clock.Advance(time.Millisecond)
	pull(t, b, "a")
	pull(t, a, "b")
	for _, nd := range []*node{a, b} {
		if got := rows(nd, "t"); got != "r1=x,r2=y," {
			t.Fatalf("%s reads %q", nd.id, got)
		}
	}
	// The same cell written on both: the later write wins everywhere.
	put(t, a, "t", "r1", "from-a")
	n.clock.Advance(time.Millisecond)
	put(t, b, "t", "r1", "from-b")
	n.clock.Advance(time.Millisecond)
	pull(t, a, "b")
	pull(t, b, "a")
	deleteRow(t, b, "t", "r2")
	n.clock.Advance(time.Millisecond)
	pull(t, a, "b")
	for _, nd := range []*node{a, b} {
		if got := rows(nd, "t"); got != "r1=from-b," {
			t.Fatalf("%s reads %q, want r1=from-b,", nd.id, got)
		}
	}
	if d, ok := b.repl.MaxDelay("a"); !ok || d > 10*time.Millisecond {
		t.Fatalf("b's delay behind a: %v %v", d, ok)
	}
}

// TestSchemaTravels: a created table, an added family, a changed GC rule
// and a dropped table reach the peer with the next pull.
func TestSchemaTravels(t *testing.T) {
	n := newNetwork(t)
	a, b := n.add("a", -1), n.add("b", -1)
	link(a, b)
	createTable(t, a, "t", gcrule.MaxVersions(3))
	pull(t, b, "a")
	m, err := b.eng.Table(inst, "t")
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := m.Family("f"); !ok || f.GC.String() != gcrule.MaxVersions(3).String() {
		t.Fatalf("b's family f: %+v %v", f, ok)
	}
	if _, err := a.eng.ModifyFamilies(inst, "t", []table.FamilyMod{
		{Name: "g", Create: true, GC: gcrule.MaxAge(time.Hour)},
		{Name: "f", Update: true, GC: gcrule.MaxVersions(1)},
	}); err != nil {
		t.Fatal(err)
	}
	pull(t, b, "a")
	m, _ = b.eng.Table(inst, "t")
	if f, ok := m.Family("f"); !ok || f.GC.String() != gcrule.MaxVersions(1).String() {
		t.Fatalf("b's family f after the change: %+v %v", f, ok)
	}
	if _, ok := m.Family("g"); !ok {
		t.Fatal("b lacks the family a added")
	}
	// b's older schema does not travel back.
	pull(t, a, "b")
	if m, _ := a.eng.Table(inst, "t"); len(m.Families) != 2 {
		t.Fatalf("a's families after pulling b: %d", len(m.Families))
	}
	if err := a.eng.DeleteTable(inst, "t"); err != nil {
		t.Fatal(err)
	}
	pull(t, b, "a")
	if got := rows(b, "t"); got != "no table" {
		t.Fatalf("b after a dropped the table: %q", got)
	}
	// Nor does b's catalog bring the dropped table back to a.
	pull(t, a, "b")
	if got := rows(a, "t"); got != "no table" {
		t.Fatalf("a after pulling b: %q", got)
	}
}

// TestPullerRunsPausesAndStops runs the pullers as the server does: long
// polls on the fake clock, woken by commits. A paused link drops the pull
// in flight and waits; Resume catches it up; Stop ends every puller.
func TestPullerRunsPausesAndStops(t *testing.T) {
	n := newNetwork(t)
	a, b, c := n.add("a", 0), n.add("b", 0), n.add("c", 0)
	link(a, b, c)
	createTable(t, a, "t", gcrule.MaxVersions(1))
	for _, nd := range []*node{a, b, c} {
		for _, p := range nd.List() {
			nd.repl.Run(p.ID)
			nd.repl.Run(p.ID) // a second Run is a no-op
		}
	}
	// The table travels when an idle long poll ends: move the clock.
	converge(t, "t", "", a, b, c)
	put(t, a, "t", "r1", "x")
	put(t, c, "t", "r2", "z")
	converge(t, "t", "r1=x,r2=z,", a, b, c)

	// Every puller parks in a long poll (six links, six timers) before b
	// pauses, so b's two pulls are in flight.
	poll.Eventually(t, "the pullers wait in long polls", 10*time.Second, func() (bool, string) {
		return n.clock.Waiters() == 6, fmt.Sprintf("%d timers", n.clock.Waiters())
	})
	b.repl.Pause("a")
	b.repl.Pause("c")
	if !b.repl.Paused("a") || b.repl.Paused("x") {
		t.Fatal("Paused does not report the pause")
	}
	shipped, cDone := b.shippedTo("a"), b.pullsFrom("c")
	put(t, a, "t", "r3", "paused")
	put(t, c, "t", "r4", "paused")
	// The long polls in flight end: a's answers with r3 (its commit wakes
	// it), which b drops (it would have applied it before recording the
	// contact); c's may end before r4, with nothing.
	poll.Eventually(t, "b's pulls in flight end", 10*time.Second, func() (bool, string) {
		n.clock.Advance(replication.PullWait)
		return b.settled("a") > shipped && b.pullsFrom("c") > cDone, fmt.Sprintf("a shipped %d, settled %d; pulls from c %d", b.shippedTo("a"), b.settled("a"), b.pullsFrom("c"))
	})
	for range 5 {
		n.clock.Advance(replication.PullWait)
	}
	if got := rows(b, "t"); got != "r1=x,r2=z," {
		t.Fatalf("paused b reads %q", got)
	}
	converge(t, "t", "r1=x,r2=z,r3=paused,r4=paused,", a, c)
	b.repl.Resume("a")
	b.repl.Resume("c")
	converge(t, "t", "r1=x,r2=z,r3=paused,r4=paused,", b)

	done := make(chan struct{})
	go func() {
		a.repl.Stop()
		b.repl.Stop()
		c.repl.Stop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop does not return")
	}
	after := b.pullCount()
	b.repl.Run("a") // after Stop: no-op
	put(t, a, "t", "r5", "stopped")
	n.clock.Advance(time.Minute)
	if b.pullCount() != after || strings.Contains(rows(b, "t"), "r5") {
		t.Fatal("b pulled after Stop")
	}
}

// TestPullerBacksOff: a failing peer is retried after a backoff on the
// injected clock, and the puller catches up once it answers.
func TestPullerBacksOff(t *testing.T) {
	n := newNetwork(t)
	a, b := n.add("a", 0), n.add("b", 0)
	link(a, b)
	createTable(t, a, "t", gcrule.MaxVersions(1))
	put(t, a, "t", "r1", "x")
	n.mu.Lock()
	n.down["a"] = true
	n.mu.Unlock()
	b.repl.Run("a")
	poll.Eventually(t, "b fails once and waits", 10*time.Second, func() (bool, string) {
		return b.pullCount() >= 1 && n.clock.Waiters() >= 1, ""
	})
	if got := rows(b, "t"); got != "no table" {
		t.Fatalf("b reads %q from a down peer", got)
	}
	if b.Healthy("a") {
		t.Fatal("a failing peer counts as healthy")
	}
	n.mu.Lock()
	n.down["a"] = false
	n.mu.Unlock()
	converge(t, "t", "r1=x,", b)
	// The pull that applied r1 marks a healthy when it ends, which may be
	// just after converge saw the row.
	poll.Eventually(t, "an answering peer to count as healthy", 10*time.Second, func() (bool, string) {
		return b.Healthy("a"), ""
	})
}

// TestTombstonesTrimmed: once a pull applied everything a peer closed,
// delete tombstones stamped before it go, at most every
// TombstoneTrimEvery.
func TestTombstonesTrimmed(t *testing.T) {
	n := newNetwork(t)
	a, b := n.add("a", -1), n.add("b", -1)
	link(a, b)
	createTable(t, a, "t", gcrule.MaxVersions(1))
	pull(t, b, "a")
	for _, r := range []string{"r1", "r2", "r3"} {
		put(t, b, "t", r, "v")
	}
	deleteRow(t, b, "t", "r1")
	n.clock.Advance(time.Millisecond)
	pull(t, b, "a") // the first complete pull trims r1's tombstone
	deleteRow(t, b, "t", "r2")
	n.clock.Advance(time.Second)
	pull(t, b, "a") // too soon to trim again: r2's stays
	deleteRow(t, b, "t", "r3")
	n.clock.Advance(replication.TombstoneTrimEvery)
	// r3's tombstone is stamped after a's closed timestamp of this pull
	// only if a's clock lags; it shares the fake clock, so it goes too.
	pull(t, b, "a")
	put(t, b, "t", "r4", "v")
	deleteRow(t, b, "t", "r4")
	left, err := b.eng.TrimTombstones(math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	if left != 1 {
		t.Fatalf("%d tombstones left untrimmed, want 1 (r4's, written after the last trim)", left)
	}
}

// TestAnswerBudget: an answer stops at its byte budget with the table
// marked full, and the next pulls resume where it stopped.
func TestAnswerBudget(t *testing.T) {
	n := newNetwork(t)
	a := n.addWith("a", replication.Options{PullWait: -1, PullMaxBytes: 1})
	b := n.add("b", -1)
	link(a, b)
	createTable(t, a, "t", gcrule.MaxVersions(1))
	pull(t, b, "a")
	for _, r := range []string{"r1", "r2", "r3"} {
		put(t, a, "t", r, "v")
	}
	n.clock.Advance(time.Millisecond)
	resp, err := a.repl.Answer(t.Context(), replication.PullRequest{Cluster: "b", Positions: map[string]changestream.Position{}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Tables) != 1 || !resp.Tables[0].Full || len(resp.Tables[0].Records) != 1 || resp.Shipped != 1 {
		t.Fatalf("answer over budget: %+v", resp)
	}
	want := []string{"r1=v,", "r1=v,r2=v,", "r1=v,r2=v,r3=v,"}
	for i, w := range want {
		pull(t, b, "a")
		if got := rows(b, "t"); got != w {
			t.Fatalf("after pull %d b reads %q, want %q", i+1, got, w)
		}
	}
}

// TestMaxDelayWhilePaused: a paused link drops what its pull brings, so
// the delay behind the peer grows with the clock; after Resume it falls.
func TestMaxDelayWhilePaused(t *testing.T) {
	n := newNetwork(t)
	a, b := n.add("a", -1), n.add("b", -1)
	link(a, b)
	createTable(t, a, "t", gcrule.MaxVersions(1))
	if _, ok := b.repl.MaxDelay("a"); ok {
		t.Fatal("a delay before any pull")
	}
	pull(t, b, "a")
	d1, _ := b.repl.MaxDelay("a")
	b.repl.Pause("a")
	put(t, a, "t", "r", "v")
	n.clock.Advance(300 * time.Millisecond)
	pull(t, b, "a")
	d2, _ := b.repl.MaxDelay("a")
	if d2 < d1+300*time.Millisecond {
		t.Fatalf("paused link: delay %v then %v, want it to grow by the 300ms the clock moved", d1, d2)
	}
	if got := rows(b, "t"); got != "" {
		t.Fatalf("a paused pull delivered %q", got)
	}
	b.repl.Resume("a")
	pull(t, b, "a")
	if d, _ := b.repl.MaxDelay("a"); d > time.Millisecond || rows(b, "t") != "r=v," {
		t.Fatalf("after Resume: delay %v, b reads %q", d, rows(b, "t"))
	}
}

// dropOnLookup is a Sink whose first lookup of one table deletes it just
// before answering: a DeleteTable that lands while a pull syncs schemas
// (another node's, applied through the schema log, or a client's).
type dropOnLookup struct {
	*table.Engine
	name    string
	dropped bool
}

func (d *dropOnLookup) setEngine(e *table.Engine) { d.Engine = e }

func (d *dropOnLookup) Table(instance, name string) (*table.Meta, error) {
	if name == d.name && !d.dropped {
		d.dropped = true
		if err := d.Engine.DeleteTable(instance, name); err != nil {
			return nil, err
		}
	}
	return d.Engine.Table(instance, name)
}

// TestDropDuringSchemaSync: a table dropped here while a pull brings the
// peer's older catalog, which still lists it, stays dropped. Reading the
// dropped tables before looking the table up re-created it (a re-created
// name then failed CreateTable with AlreadyExists in a cluster test).
func TestDropDuringSchemaSync(t *testing.T) {
	n := newNetwork(t)
	a := n.add("a", -1)
	sink := &dropOnLookup{name: "t", dropped: true}
	b := n.addWith("b", replication.Options{PullWait: -1, Sink: sink})
	link(a, b)
	createTable(t, a, "t", gcrule.MaxVersions(1))
	pull(t, b, "a") // b creates t
	if got := rows(b, "t"); got != "" {
		t.Fatalf("b after the first pull: %q, want the empty table", got)
	}
	n.clock.Advance(time.Millisecond)
	sink.dropped = false
	pull(t, b, "a") // a still lists t; b's lookup drops it as it answers
	if !sink.dropped {
		t.Fatal("the sync never looked the table up")
	}
	if got := rows(b, "t"); got != "no table" {
		t.Fatalf("b after dropping t during a pull: %q, want no table", got)
	}
}
