package compat

import (
	"testing"

	"github.com/ebbtable/ebbtable/internal/etcdtest"
)

// TestEmulatorModeCluster runs the client's integration suite (emulator
// mode) against node n1 of a three-node cluster: an embedded etcd, a shared
// SSTable directory and three `ebbtable serve --etcd` processes, so tables
// are spread over the nodes and requests forwarded to tablet owners.
func TestEmulatorModeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the client library's suite")
	}
	t.Parallel() // each runs its own servers; the suites wait more than they compute
	ebb, suite, dir := binaries(t)
	etcd := etcdtest.Start(t)
	shared := t.TempDir()
	var addr string
	for _, id := range []string{"n1", "n2", "n3"} {
		a := serve(t, ebb, "--etcd", etcd, "--node-id", id, "--shared-storage", "file://"+shared, "--lease-ttl", "2s")
		if addr == "" {
			addr = a
		}
	}
	res, out := runEmulatorSuite(t, suite, dir, addr, emulatorFailures)
	passed := judge(t, res, emulatorFailures, out)
	t.Logf("emulator mode, three-node cluster: %d of %d passed", passed, len(res))
	if len(res) < 30 {
		t.Fatalf("only %d integration tests reported; the suite did not really run:\n%s", len(res), tail(out, 60))
	}
}
