package cluster

import (
	"sync"
	"time"

	"github.com/ebbtable/ebbtable/clock"
)

// Fence tells a node whether its lease is surely still alive, so it serves
// its tablets only then. etcd expires a lease TTL after the leader granted
// or renewed it, which is after the node sent the renewal; the node counts
// its deadline from the moment it sent the renewal, less a margin for clock
// rate drift, so it stops serving before etcd can hand its tablets to
// another node.
type Fence struct {
	clock  clock.Clock
	margin time.Duration

	mu       sync.Mutex
	deadline time.Time
}

// NewFence returns a fence with no live lease. margin is subtracted from
// every deadline (a tenth of the TTL is a fair choice).
func NewFence(c clock.Clock, margin time.Duration) *Fence {
	return &Fence{clock: c, margin: margin}
}

// Renewed records a renewal sent at sent that etcd granted for ttl. A
// renewal never moves the deadline earlier than one already known.
func (f *Fence) Renewed(sent time.Time, ttl time.Duration) {
	d := sent.Add(ttl - f.margin)
	f.mu.Lock()
	if d.After(f.deadline) {
		f.deadline = d
	}
	f.mu.Unlock()
}

// Lost drops the lease at once (etcd said it is gone, or the node is
// leaving).
func (f *Fence) Lost() {
	f.mu.Lock()
	f.deadline = time.Time{}
	f.mu.Unlock()
}

// Live reports whether the lease is surely alive now.
func (f *Fence) Live() bool {
	now := f.clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	return now.Before(f.deadline)
}

// Deadline is when the node stops trusting its lease.
func (f *Fence) Deadline() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deadline
}
