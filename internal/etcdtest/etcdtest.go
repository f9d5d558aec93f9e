// Package etcdtest starts an embedded etcd server on loopback for tests of
// the cluster mode (a real etcd, go.etcd.io/etcd/server/v3/embed), kept out
// of internal/testkit so only the tests that need etcd build it.
package etcdtest

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Start runs a one-member etcd on 127.0.0.1 with its data in a test
// directory and returns its client endpoint; it stops when the test ends.
func Start(t testing.TB) string {
	t.Helper()
	ep, _ := StartStoppable(t)
	return ep
}

// StartStoppable is Start that also returns a stop, to cut the nodes of
// a test off from etcd before the test ends (stop twice is fine).
func StartStoppable(t testing.TB) (endpoint string, stop func()) {
	t.Helper()
	e, err := Embed(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(e.Close) }
	t.Cleanup(stop)
	return e.Clients[0].Addr().String(), stop
}

// Embed starts the one-member etcd that Start runs, with its data in dir,
// and returns it once it is ready; the caller closes it.
func Embed(dir string) (*embed.Etcd, error) { return embedAt(dir, "127.0.0.1:0", "127.0.0.1:0") }

// embedAt is Embed listening for clients on client and for peers on
// peer (host:port; port 0: any free one).
func embedAt(dir, client, peer string) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "etcdtest"
	cu, _ := url.Parse("http://" + client)
	pu, _ := url.Parse("http://" + peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Quiet, but not silent when etcd gives up: zap's Fatal exits the
	// process (status 1) even through a no-op logger, so with zap.NewNop a
	// fatal etcd error ended the whole test binary without a word (seen
	// once in robustness under a load of 50).
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(zapcore.NewCore(
		zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.Lock(os.Stderr), zapcore.DPanicLevel)))
	cfg.LogLevel = "error"
	// The test's etcd dies with the test process, never alone, so nothing
	// it acknowledged can be lost: no fsync (on a busy disk each costs
	// tens of milliseconds, and a lease grant or put waits for one).
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case <-time.After(30 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, errors.New("etcd did not become ready")
	}
}
