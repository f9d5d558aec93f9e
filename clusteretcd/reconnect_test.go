package clusteretcd

import (
	"context"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/etcdtest"
	"github.com/ebbtable/ebbtable/internal/testkit/poll"
)

// After an etcd outage a node reconnects within about ReconnectMax of
// etcd's return, not after gRPC's default reconnect backoff (1 s growing
// 1.6× per failed attempt up to 120 s). With that default, the attempts
// after etcd stops come about 1, 2.6, 5.2, 9.3, 15.8 and 26.3 s later
// (each gap ±20%: the fifth 15.8 ± 1 s, at most 19 s; the sixth
// 26.3 ± 1.6 s, at least 21 s), so an etcd ready again 18 to 21 s after
// it stopped was reached 4.3 and 6.5 s later in two runs (load 16) — and
// after a longer outage up to 2 minutes later, the node's fence down all
// the while.
func TestReconnectsSoonAfterEtcdOutage(t *testing.T) {
	t.Parallel()
	ep, stop, restart := etcdtest.StartRestartable(t)
	a := join(t, ep, "a")
	const outage = 18 * time.Second // then the restart, 0.1 s to 2.6 s
	stopped := time.Now()
	stop()
	poll.Eventually(t, "a's fence to drop without etcd", 10*ttl, func() (bool, string) { return !a.Live(), "live" })
	<-time.After(time.Until(stopped.Add(outage)))
	restart()
	back := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := a.cli.Get(ctx, "reconnect"); err != nil { // waits for the connection
		t.Fatalf("a read through a's etcd client after etcd came back: %v", err)
	}
	reconnected := time.Since(back)
	poll.Eventually(t, "a's fence up again", time.Minute, func() (bool, string) { return a.Live(), "down" })
	live := time.Since(back)
	t.Logf("etcd down %v (ready again %v after the stop): a's client reconnected %v and its fence was up %v after etcd was back", outage, back.Sub(stopped), reconnected, live)
	// ReconnectMax with its jitter, and 2 s for a loaded machine.
	if limit := ReconnectMax*6/5 + 2*time.Second; reconnected > limit {
		t.Errorf("a's client reconnected %v after etcd was back, want at most %v (reconnect backoff bounded by %v)", reconnected, limit, ReconnectMax)
	}
}
