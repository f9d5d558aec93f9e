package replication_test

import (
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/table"
)

// TestLearnPeers: a pull brings the clusters the peer knows (a third one
// that joined through it), keeps readiness once seen, and skips clusters
// removed here.
func TestLearnPeers(t *testing.T) {
	n := newNetwork(t)
	a, b, c := n.add("a", -1), n.add("b", -1), n.add("c", -1)
	link(a, b)
	link(a, c)
	pull(t, b, "a")
	p, ok := b.Get("c")
	if !ok || p.Addr != "mem:c" || !p.Ready {
		t.Fatalf("b's record of c: %+v %v", p, ok)
	}
	// c's readiness seen once stays, even if a list says otherwise.
	b.repl.LearnPeers([]replication.PeerInfo{{ID: "c", Addr: "mem:c", Ready: false}, {ID: "b", Addr: "mem:b"}, {ID: "", Addr: "x"}})
	if p, _ := b.Get("c"); !p.Ready {
		t.Fatal("c's readiness was lost")
	}
	if _, ok := b.Get("b"); ok {
		t.Fatal("b recorded itself as a peer")
	}
	// A cluster removed here does not come back through a peer's list.
	a.mu.Lock()
	a.peers["d"] = replication.PeerInfo{ID: "d", Addr: "mem:d", Ready: true}
	a.mu.Unlock()
	b.mu.Lock()
	b.gone["d"] = true
	b.mu.Unlock()
	pull(t, b, "a")
	if _, ok := b.Get("d"); ok {
		t.Fatal("a removed cluster came back")
	}
	// The learnt peer replicates: c's writes reach b directly.
	createTable(t, c, "t", gcrule.MaxVersions(1))
	put(t, c, "t", "r", "from-c")
	c.Add(replication.PeerInfo{ID: "b", Addr: "mem:b", Ready: true})
	pull(t, b, "c")
	if got := rows(b, "t"); got != "r=from-c," {
		t.Fatalf("b reads %q", got)
	}
}

// TestGCLeader: the smallest ready, healthy cluster collects versions; a
// cluster that does not replicate always does; a leader silent for long
// hands over.
func TestGCLeader(t *testing.T) {
	n := newNetwork(t)
	a, b, c := n.add("a", -1), n.add("b", -1), n.add("c", -1)
	link(a, b, c)
	if !a.repl.IsGCLeader() {
		t.Fatal("a, the smallest id, does not lead")
	}
	// b has not heard from a yet: a is not healthy to b, b leads.
	if !b.repl.IsGCLeader() {
		t.Fatal("b does not lead while a has not answered")
	}
	pull(t, b, "a")
	pull(t, c, "b")
	if b.repl.IsGCLeader() || c.repl.IsGCLeader() {
		t.Fatalf("b leads %v, c leads %v while a (and b) answer", b.repl.IsGCLeader(), c.repl.IsGCLeader())
	}
	n.clock.Advance(4 * time.Second)
	pull(t, c, "b")
	if !b.repl.IsGCLeader() || c.repl.IsGCLeader() {
		t.Fatalf("after a fell silent: b leads %v (want true), c leads %v (want false)", b.repl.IsGCLeader(), c.repl.IsGCLeader())
	}
	if err := c.eng.SetReplicating(""); err != nil {
		t.Fatal(err)
	}
	if !c.repl.IsGCLeader() {
		t.Fatal("a cluster that does not replicate does not collect")
	}
}

// TestAgeCutoffDivergence: the age cutoffs a peer reports with its answer
// show as the spread against this cluster's.
func TestAgeCutoffDivergence(t *testing.T) {
	n := newNetwork(t)
	cut := func(c int64) replication.Options {
		return replication.Options{PullWait: -1, AgeCutoffs: func(*table.Meta) map[string]int64 { return map[string]int64{"f": c} }}
	}
	a, b := n.addWith("a", cut(1_000_000)), n.addWith("b", cut(4_000_000))
	link(a, b)
	createTable(t, a, "t", gcrule.MaxAge(time.Hour))
	pull(t, b, "a")
	d := b.repl.Divergence()
	if got := d[replication.FamilyKey{Instance: inst, Table: "t", Family: "f"}]; got != 3*time.Second || len(d) != 1 {
		t.Fatalf("divergence %v", d)
	}
}
