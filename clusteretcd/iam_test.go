package clusteretcd

import (
	"context"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/etcdtest"
	"github.com/ebbtable/ebbtable/internal/testkit/poll"
)

// TestIAMCache: a node's own IAM writes are in its cache at once, even
// with its watch held (and a delete is not undone by the older put the
// watch delivers after it); another node's cache gets them from its watch;
// progress notifications keep a quiet cache current; a held watch makes
// it stop answering within Options.IAMFresh (lowered here), a lost one
// at once until reloaded.
func TestIAMCache(t *testing.T) {
	t.Parallel()
	ep := etcdtest.Start(t)
	const fresh, every = 500 * time.Millisecond, 100 * time.Millisecond
	join := func(id string) *Member {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m, err := Join(ctx, Options{Endpoints: []string{ep}, NodeID: id, Addr: id + ".addr", TTL: ttl, IAMFresh: fresh, IAMProgressEvery: every})
		if err != nil {
			t.Fatalf("join %s: %v", id, err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	a, b := join("a"), join("b")
	ctx := context.Background()
	cached := func(m *Member, name string) (string, bool) {
		got, ok := m.CachedIAMPolicies([]string{name})
		if !ok {
			t.Fatalf("%s's cache not current", m.ID())
		}
		v, has := got[name]
		return string(v), has
	}

	release := a.HoldWatch()
	if err := a.PutIAMPolicy(ctx, "x", []byte("v1"), 0); err != nil {
		t.Fatal(err)
	}
	if v, _ := cached(a, "x"); v != "v1" {
		t.Fatalf("a's own write, its watch held: %q", v)
	}
	_, rev, err := a.GetIAMPolicy(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PutIAMPolicy(ctx, "x", []byte("v2"), rev); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteIAMPolicy(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if _, has := cached(a, "x"); has {
		t.Fatal("a's own delete, its watch held: still cached")
	}
	waitFor(t, b, "b's watch to deliver", func() bool { _, has := cached(b, "x"); return !has && b.Revision() > rev })
	end := b.Revision()
	release()
	waitFor(t, a, "a's watch to catch up", func() bool { return a.Revision() >= end })
	if _, has := cached(a, "x"); has {
		t.Fatal("a's cache has x back after its watch delivered the older puts")
	}
	if err := a.PutIAMPolicy(ctx, "y", []byte("w"), 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, "y in b's cache", func() bool { v, _ := cached(b, "y"); return v == "w" })
	if l, ok := b.CachedIAMList(); !ok || len(l) != 1 || string(l["y"]) != "w" {
		t.Fatalf("b's list: %v %v", l, ok)
	}

	// Quiet: progress notifications, every IAMProgressEvery, keep b's
	// cache current.
	b.mu.RLock()
	h := b.heard
	b.mu.RUnlock()
	poll.Eventually(t, "a progress notification", 10*time.Second, func() (bool, string) {
		b.mu.RLock()
		defer b.mu.RUnlock()
		return b.heard.After(h), ""
	})

	// A held watch that misses a change: not current within IAMFresh;
	// current again once released. (Held with nothing changed, it stays
	// current: TestIAMCacheCurrentWhenQuiet.)
	hold := b.HoldWatch()
	if err := a.PutIAMPolicy(ctx, "z", []byte("w"), 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	poll.Eventually(t, "b's cache, its watch held, to stop answering", 10*time.Second, func() (bool, string) {
		_, ok := b.CachedIAMPolicies([]string{"y"})
		return !ok, ""
	})
	if d := time.Since(start); d > 5*fresh { // the default, IAMFresh, would be 3 s
		t.Errorf("b's cache stopped answering %v after its watch was held, IAMFresh %v", d, fresh)
	}
	hold()
	poll.Eventually(t, "b's cache current again", 10*time.Second, func() (bool, string) {
		_, ok := b.CachedIAMPolicies([]string{"y"})
		return ok, ""
	})
	// A lost watch: not current until the member loaded etcd again.
	b.mu.Lock()
	b.lostWatchLocked()
	b.mu.Unlock()
	if _, ok := b.CachedIAMPolicies([]string{"y"}); ok {
		t.Fatal("b's cache answers with its watch lost")
	}
	if err := b.load(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := cached(b, "y"); v != "w" {
		t.Fatalf("b's cache after a reload: %q", v)
	}
}
