package replication_test

import (
	"errors"
	"testing"

	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/table"
)

// TestJoinCopiesThenReplicates: a cluster joining through a seed copies
// the seed's tables before it serves, becomes a ready peer of the seed,
// then replicates both ways; a second join is a no-op, and a cluster
// holding tables of its own is refused.
func TestJoinCopiesThenReplicates(t *testing.T) {
	n := newNetwork(t)
	a := n.add("a", 0)
	createTable(t, a, "t", gcrule.MaxVersions(1))
	put(t, a, "t", "r1", "x")
	put(t, a, "t", "r2", "y")
	deleteRow(t, a, "t", "r2")

	c := n.add("c", 0)
	seedID, err := c.repl.JoinThrough(t.Context(), memPeer{from: c, to: a}, "mem:a")
	if err != nil || seedID != "a" {
		t.Fatalf("join: %q %v", seedID, err)
	}
	// The copy is there before c pulls anything.
	if got := rows(c, "t"); got != "r1=x," {
		t.Fatalf("c after the copy reads %q", got)
	}
	if p, ok := a.Get("c"); !ok || !p.Ready || p.Addr != "mem:c" {
		t.Fatalf("a's record of c: %+v %v", p, ok)
	}
	if p, ok := c.Get("a"); !ok || !p.Ready {
		t.Fatalf("c's record of a: %+v %v", p, ok)
	}
	if joined, err := c.repl.Joined(); err != nil || !joined {
		t.Fatalf("Joined after the join: %v %v", joined, err)
	}
	c.repl.Run("a") // the server starts a puller for each stored peer
	put(t, a, "t", "r3", "from-a")
	put(t, c, "t", "r4", "from-c")
	converge(t, "t", "r1=x,r3=from-a,r4=from-c,", a, c)

	if id, err := c.repl.JoinThrough(t.Context(), memPeer{from: c, to: a}, "mem:a"); err != nil || id != "" {
		t.Fatalf("joining again: %q %v, want a no-op", id, err)
	}
	d := n.add("d", 0)
	createTable(t, d, "own", gcrule.MaxVersions(1))
	if _, err := d.repl.JoinThrough(t.Context(), memPeer{from: d, to: a}, "mem:a"); !errors.Is(err, table.ErrPrecondition) {
		t.Fatalf("joining with tables of its own: %v, want ErrPrecondition", err)
	}
	if err := a.repl.MarkReady("zz"); !errors.Is(err, replication.ErrNotJoined) {
		t.Fatalf("MarkReady of a stranger: %v", err)
	}
}
