package etcdtest

import (
	"sync"
	"testing"
)

// StartRestartable is StartStoppable whose etcd can start again: stop
// closes it (its clients' connections are refused, as when etcd is down),
// and restart runs it again on the same data and the same ports, returning
// once it is ready. The test's cleanup stops it.
func StartRestartable(t testing.TB) (endpoint string, stop, restart func()) {
	t.Helper()
	dir := t.TempDir()
	e, err := Embed(dir)
	if err != nil {
		t.Fatal(err)
	}
	client, peer := e.Clients[0].Addr().String(), e.Peers[0].Listener.Addr().String()
	var mu sync.Mutex
	cur := e
	stop = func() {
		mu.Lock()
		defer mu.Unlock()
		if cur != nil {
			cur.Close()
			cur = nil
		}
	}
	restart = func() {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if cur != nil {
			return
		}
		e, err := embedAt(dir, client, peer)
		if err != nil {
			t.Fatalf("restart etcd on %s: %v", client, err)
		}
		cur = e
	}
	t.Cleanup(stop)
	return client, stop, restart
}
