// Package etcdproc starts the one-member etcd of internal/etcdtest for
// the tests that drive ebbtable processes against etcd (cli, compat,
// console, robustness). It is etcdtest.Start, which runs etcd as a
// process of its own (internal/etcdtest/etcdmain).
package etcdproc

import (
	"testing"

	"github.com/ebbtable/ebbtable/internal/etcdtest"
)

// Start runs etcd with its data in a test directory and returns its
// client endpoint (host:port); the process ends when the test ends, or
// with the test process: etcdtest.Start.
func Start(t testing.TB) string {
	t.Helper()
	return etcdtest.Start(t)
}
