package clusteretcd

import (
	"context"
	"testing"

	"github.com/ebbtable/ebbtable/internal/etcdtest"
)

// TestMetaChanges: the count the metadata mirror (server/clustermeta.go)
// reads before it lists etcd's instance metadata moves at every write of
// that metadata another node makes, and stands still at the cluster's
// other changes (a drain mark, a progress mark).
func TestMetaChanges(t *testing.T) {
	t.Parallel()
	ep := etcdtest.Start(t)
	a := join(t, ep, "a")
	b := join(t, ep, "b")
	waitFor(t, a, "both nodes", func() bool { return ids(a.Nodes()) == "a b " })
	ctx := context.Background()
	before := a.MetaChanges()
	if err := b.SetDraining(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, a, "b draining", func() bool { n, _ := a.Node("b"); return n.Draining })
	if err := b.SetApplied(ctx, 7); err != nil { // a progress mark
		t.Fatal(err)
	}
	waitFor(t, a, "b's progress mark", func() bool { return a.appliedOf("b") == 7 })
	if got := a.MetaChanges(); got != before {
		t.Fatalf("metadata changes moved from %d to %d with no metadata written", before, got)
	}
	if err := b.PutMeta(ctx, MetaEntry{Kind: "clusters", Instance: "i", Name: "c", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, a, "the metadata write", func() bool { return a.MetaChanges() > before })
	mid := a.MetaChanges()
	if err := b.PutMeta(ctx, MetaEntry{Kind: "clusters", Instance: "i", Name: "c"}); err != nil { // a deletion
		t.Fatal(err)
	}
	waitFor(t, a, "the metadata deletion", func() bool { return a.MetaChanges() > mid })
}

func (m *Member) appliedOf(id string) uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.applied[id]
}
