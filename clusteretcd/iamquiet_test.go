package clusteretcd

import (
	"context"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/etcdtest"
	"github.com/ebbtable/ebbtable/internal/testkit/poll"
)

// A quiet cluster's IAM cache stays current: after the member's watch
// starts, and after an etcd cut shorter than any lease, with nothing
// written to etcd since. etcd answers a progress request only once its
// revision has reached the watch's start, the revision after the last one
// seen: without confirmQuiet the cache stopped answering IAMFresh after
// the join, and was not current again after the cut until some write (the
// member here holds no lease, so nothing is ever written).
func TestIAMCacheCurrentWhenQuiet(t *testing.T) {
	t.Parallel()
	ep, cut, heal := etcdtest.StartCuttable(t)
	const fresh, every = 500 * time.Millisecond, 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := Join(ctx, Options{Endpoints: []string{ep}, TTL: ttl, IAMFresh: fresh, IAMProgressEvery: every})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	samples, stale := 0, 0
	poll.Until(4*fresh, func() bool {
		samples++
		if !m.IAMCacheCurrent() {
			stale++
		}
		return false
	})
	if stale > samples/4 { // a starved moment may miss one; a stale cache misses most
		t.Errorf("a quiet member's IAM cache not current in %d of %d samples over %v after its join (IAMFresh %v)", stale, samples, 4*fresh, fresh)
	}
	cut()
	poll.Eventually(t, "the cache to stop answering while cut", 10*time.Second, func() (bool, string) { return !m.IAMCacheCurrent(), "current" })
	heal()
	start := time.Now()
	poll.Eventually(t, "the cache current again after the cut, nothing written since", 10*time.Second, func() (bool, string) {
		return m.IAMCacheCurrent(), "not current"
	})
	t.Logf("current again %v after etcd was back", time.Since(start))
}
