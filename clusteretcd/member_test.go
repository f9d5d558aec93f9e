package clusteretcd

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/internal/etcdtest"
	"github.com/ebbtable/ebbtable/internal/testkit/poll"
)

const ttl = 2 * time.Second // etcd's least lease TTL with its default ticks

func join(t *testing.T, ep, id string) *Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := Join(ctx, Options{Endpoints: []string{ep}, NodeID: id, Addr: id + ".addr", TTL: ttl})
	if err != nil {
		t.Fatalf("join %s: %v", id, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func waitFor(t *testing.T, m *Member, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := m.WaitFor(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func ids(nodes []cluster.Node) string {
	s := ""
	for _, n := range nodes {
		s += n.ID + " "
	}
	return s
}

func TestMembershipAndTakeover(t *testing.T) {
	t.Parallel()
	ep := etcdtest.Start(t)
	a := join(t, ep, "a")
	b := join(t, ep, "b")
	waitFor(t, a, "both nodes", func() bool { return ids(a.Nodes()) == "a b " })
	if n, ok := a.Node("b"); !ok || n.Addr != "b.addr" {
		t.Fatalf("node b: %+v %v", n, ok)
	}
	if !a.Live() || !b.Live() {
		t.Fatal("a fresh member's fence is down")
	}
	ctx := context.Background()
	// A second process with b's id waits for b's lease...
	if _, err := Join(ctx, Options{Endpoints: []string{ep}, NodeID: "b", TTL: ttl}); !errors.Is(err, ErrNodeLive) {
		t.Fatalf("a second b joined: %v", err)
	}
	// ...unless it holds b's data directory (b's last lease): then it takes
	// over, and the old b's fence drops: never two processes serving b.
	b2, err := Join(ctx, Options{Endpoints: []string{ep}, NodeID: "b", Addr: "b2.addr", TTL: ttl, PreviousLease: b.LeaseID()})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	poll.Eventually(t, "the old b to stop trusting its lease", 10*time.Second, func() (bool, string) { return !b.Live(), "" })
	waitFor(t, a, "b's new address", func() bool { n, _ := a.Node("b"); return n.Addr == "b2.addr" })
	if !b2.Live() {
		t.Fatal("b2 is not live")
	}
	// Drain marks outlive leases and show in Nodes.
	if err := a.SetDraining(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b2, "b draining", func() bool { n, _ := b2.Node("b"); return n.Draining })
}

func TestLeaseExpiryAndRejoin(t *testing.T) {
	t.Parallel()
	ep := etcdtest.Start(t)
	a := join(t, ep, "a")
	b := join(t, ep, "b")
	waitFor(t, a, "both nodes", func() bool { return len(a.Nodes()) == 2 })
	// b dies without revoking: its key goes when the lease expires.
	b.Abandon()
	start := time.Now()
	waitFor(t, a, "b's lease to expire", func() bool { return ids(a.Nodes()) == "a " })
	if el := time.Since(start); el > 4*ttl {
		t.Errorf("b's key outlived its lease by far: %s", el)
	}
	// a's lease is revoked behind its back (cut off past its TTL): its
	// fence drops, and it registers again under a new lease.
	old := a.LeaseID()
	if _, err := a.cli.Revoke(context.Background(), clientLease(old)); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "a under a new lease", 10*time.Second, func() (bool, string) { return a.LeaseID() != old && a.Live(), "" })
	waitFor(t, a, "a back", func() bool { return ids(a.Nodes()) == "a " })
}

func TestDirectoryFencedUpdates(t *testing.T) {
	t.Parallel()
	ep := etcdtest.Start(t)
	a := join(t, ep, "a")
	b := join(t, ep, "b")
	ctx := context.Background()
	e, err := a.Append(ctx, SchemaEntry{Method: "CreateTable", Table: "i/t"}, func(seq uint64) (cluster.Directory, error) {
		return cluster.NewDirectory("i/t", seq, [][]byte{[]byte("m")}, []string{"a", "b"})
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	if e.Seq != 1 || e.TableID != 1 {
		t.Fatalf("first entry: %+v", e)
	}
	if _, err := b.Append(ctx, SchemaEntry{Method: "CreateTable", Table: "i/t"}, func(seq uint64) (cluster.Directory, error) {
		return cluster.NewDirectory("i/t", seq, nil, []string{"b"})
	}, false); !errors.Is(err, ErrTableExists) {
		t.Fatalf("second create: %v", err)
	}
	// Each node's cache follows etcd on its own watch: wait for both.
	waitFor(t, a, "the directory on a", func() bool { _, ok := a.Directory("i/t"); return ok })
	waitFor(t, b, "the directory", func() bool { _, ok := b.Directory("i/t"); return ok })
	da, _ := a.Directory("i/t")
	db, _ := b.Directory("i/t")
	if da.Revision == 0 || da.Revision != db.Revision || da.TableID != 1 {
		t.Fatalf("directories: %+v / %+v", da, db)
	}
	// Two nodes change the same directory from the same revision: one wins.
	split, _ := da.Split([]byte("f"))
	moved, _ := db.WithOwner(2, "a")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); _, errs[0] = a.UpdateDirectory(ctx, da, split) }()
	go func() { defer wg.Done(); _, errs[1] = b.UpdateDirectory(ctx, db, moved) }()
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) || !(errors.Is(errs[0], cluster.ErrConflict) || errors.Is(errs[1], cluster.ErrConflict)) {
		t.Fatalf("both or neither update won: %v / %v", errs[0], errs[1])
	}
	// A new owner must be live.
	cur, _ := a.Directory("i/t")
	waitFor(t, a, "the winner", func() bool { cur, _ = a.Directory("i/t"); return cur.Revision > da.Revision })
	ghost, _ := cur.WithOwner(1, "ghost")
	if _, err := a.UpdateDirectory(ctx, cur, ghost); !errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("a dead owner: %v", err)
	}
	waitFor(t, b, "the same view", func() bool { x, _ := b.Directory("i/t"); return x.Revision == cur.Revision })
	// Dropping the table removes its directory.
	if _, err := b.Append(ctx, SchemaEntry{Method: "DeleteTable", Table: "i/t"}, nil, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, a, "the drop", func() bool { _, ok := a.Directory("i/t"); return !ok && a.SchemaSeq() == 2 })
}

func TestSchemaLogOrder(t *testing.T) {
	t.Parallel()
	ep := etcdtest.Start(t)
	a := join(t, ep, "a")
	b := join(t, ep, "b")
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 10 {
		m := a
		if i%2 == 1 {
			m = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.Append(ctx, SchemaEntry{Method: "ModifyColumnFamilies", Table: "i/t", Request: []byte{byte(i)}}, nil, false); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	es, err := b.Entries(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 7 {
		t.Fatalf("%d entries after 3", len(es))
	}
	seen := map[byte]bool{}
	for i, e := range es {
		if e.Seq != uint64(4+i) {
			t.Fatalf("entry %d has seq %d", i, e.Seq)
		}
		seen[e.Request[0]] = true
	}
	if len(seen) != 7 {
		t.Fatalf("duplicate requests in the log: %v", seen)
	}
	waitFor(t, a, "both nodes", func() bool { return len(a.Nodes()) == 2 })
	if a.AllApplied(10) {
		t.Fatal("applied before anyone applied")
	}
	a.SetApplied(ctx, 10)
	b.SetApplied(ctx, 10)
	waitFor(t, a, "everyone applied", func() bool { return a.AllApplied(10) })
}

// TestSetAppliedUnderLapsedLease: a node whose lease lapsed (its renewals
// failed for a TTL, as in a process starved of CPU) still publishes its
// applied mark: SetApplied succeeds, and the mark comes back under the
// lease the node registers again with. Failing made a server's start-up
// fail ("requested lease not found") on a loaded machine.
func TestSetAppliedUnderLapsedLease(t *testing.T) {
	t.Parallel()
	ep := etcdtest.Start(t)
	a := join(t, ep, "a")
	b := join(t, ep, "b")
	old := a.LeaseID()
	if _, err := a.cli.Revoke(context.Background(), clientLease(old)); err != nil {
		t.Fatal(err)
	}
	if err := a.SetApplied(context.Background(), 7); err != nil {
		t.Fatalf("SetApplied under a lapsed lease: %v", err)
	}
	waitFor(t, b, "a's applied mark under its new lease", func() bool {
		b.mu.RLock()
		defer b.mu.RUnlock()
		return b.applied["a"] == 7 && a.LeaseID() != old
	})
}
