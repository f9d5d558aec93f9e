package server

import (
	"flag"
	"runtime"
	"strconv"
	"testing"

	"github.com/ebbtable/ebbtable/internal/etcdtest"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives its test: every
// server, client, collector loop and Pebble goroutine must be stopped by
// Close.
//
// Unless -test.parallel is given, it runs twice as many parallel tests at
// once as there are CPUs (go test's default is as many): the package's
// tests mostly wait on gRPC round trips, leases and replication, and at
// the default they kept two cores about a third busy.
//
// The cluster tests start an etcd each, unless -etcd.shared is given: then
// they share one etcd process, each cluster under its own key prefix (about
// a second of wall time saved per test, no CPU; under load the one process
// logged three times the failed lease renewals, so it is not the default).
func TestMain(m *testing.M) {
	shared := flag.Bool("etcd.shared", false, "the cluster tests share one etcd process, each cluster under its own key prefix")
	flag.Parse()
	sharedEtcd.Per = !*shared
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(2*runtime.GOMAXPROCS(0)))
	}
	goleak.VerifyTestMain(closeShared{m})
}

// sharedEtcd is the etcd of the package's cluster tests, each cluster
// under a key prefix of its own (newScaleCluster, newIAMClusterTuned).
var sharedEtcd etcdtest.Shared

// closeShared runs the tests, then stops what they shared, before
// goleak looks for goroutines left.
type closeShared struct{ m *testing.M }

func (c closeShared) Run() int {
	code := c.m.Run()
	sharedEtcd.Close()
	return code
}
