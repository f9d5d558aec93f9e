// Command etcdmain runs the one-member etcd of internal/etcdtest as a
// process of its own (etcdtest.Start builds and starts it), so the test
// binaries of the cluster mode need not link etcd's server, raft and
// bbolt, nor run them under the race detector. It prints its client and
// peer addresses (host:port) on one line and runs until its standard
// input closes, so it dies with the test that started it, however that
// one ends.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func main() {
	dir := flag.String("dir", "", "data directory (required)")
	client := flag.String("client", "127.0.0.1:0", "client address (port 0: any free one)")
	peer := flag.String("peer", "127.0.0.1:0", "peer address (port 0: any free one)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "etcdmain: --dir is required")
		os.Exit(2)
	}
	e, err := start(*dir, *client, *peer)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdmain:", err)
		os.Exit(1)
	}
	fmt.Println(e.Clients[0].Addr().String(), e.Peers[0].Listener.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	e.Close()
}

// start runs a one-member etcd with its data in dir, listening for
// clients on client and for peers on peer, and returns it once it is
// ready.
func start(dir, client, peer string) (*embed.Etcd, error) {
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
	// fatal etcd error ended the process without a word.
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
