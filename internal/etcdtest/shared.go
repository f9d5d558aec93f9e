package etcdtest

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

// Shared is one etcd process for the tests of a test binary, each test
// under a key prefix of its own (the cluster mode's Prefix option): the
// first test that asks starts it, and the test binary's TestMain closes
// it after the tests. A test that stops or restarts etcd itself needs its
// own (Start*); one that cuts its nodes off puts Cuttable in front.
// Sharing saves each test an etcd start (a process, and a one-member
// election: about a second of the test's wall time).
//
// Per, when set before the first Start, makes Start give each test an
// etcd of its own (Start) instead, under a prefix all the same: the
// shared process is the opt-in while its behaviour under load is
// measured (docs/testing.md).
type Shared struct {
	Per bool

	once sync.Once
	dir  string
	p    *proc
	ep   string
	err  error
	next atomic.Int64
}

// Start returns the shared etcd's client endpoint, starting it on the
// first call, and a key prefix no other call returned.
func (s *Shared) Start(t testing.TB) (endpoint, prefix string) {
	t.Helper()
	if s.Per {
		return Start(t), fmt.Sprintf("/test%d/", s.next.Add(1))
	}
	s.once.Do(func() {
		s.dir, s.err = os.MkdirTemp("", "etcdtest-shared-")
		if s.err != nil {
			return
		}
		s.p, s.ep, _, s.err = run(s.dir, "127.0.0.1:0", "127.0.0.1:0")
	})
	if s.err != nil {
		t.Fatalf("shared etcd: %v", s.err)
	}
	return s.ep, fmt.Sprintf("/test%d/", s.next.Add(1))
}

// Close stops the shared etcd, if it started, and removes its data.
func (s *Shared) Close() {
	s.once.Do(func() {}) // no start after Close
	if s.p != nil {
		s.p.stop()
		s.p = nil
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}
