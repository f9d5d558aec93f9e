package server

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ebbtable/ebbtable/replication"
)

// The sweep of IAM stamps in cluster mode (docs/replication.md, "Other
// metadata"; clusteriamrepl.go). A stamp (iamstamp/NAME) whose policy is
// gone is a tombstone: it keeps a peer cluster's older copy of the policy
// from being adopted back, and travels to the peers so they drop theirs.
// One node of the cluster (the live node with the lowest id) sweeps the
// stamps every iamSweepEvery:
//   - a stamp left by a policy dropped without one (with its table's kept
//     directory when the undelete retention ran out, or by the creation
//     of a table of the name, or by a node before tombstones were written)
//     becomes a tombstone one microsecond after the policy's stamp: later
//     than every copy of that policy a peer may hold, earlier than any
//     change made since;
//   - a tombstone is removed once no peer can send an older copy back:
//     every peer's last answer (repl/meta/PEER, what the puller shared)
//     carries the deletion or a later change, or — for a peer whose answer
//     carries nothing of the policy, or an older deletion — the tombstone
//     has been seen for iamTombstoneKeep. A peer with no answer yet keeps
//     every tombstone. With no peer at all, nothing can come back: it goes
//     at once.
// So stamps do not grow with every resource that ever had a policy.

const (
	iamSweepEvery    = 2 * time.Second
	iamTombstoneKeep = 10 * time.Minute
)

// iamSweep is the sweeper's state (in metaMirror).
type iamSweep struct {
	mu   sync.Mutex
	last time.Time
	// seen: when this node first saw each tombstone (name and stamp
	// revision) it could not remove yet.
	seen map[string]time.Time
	// every and keep replace iamSweepEvery and iamTombstoneKeep when set
	// (tests).
	every, keep time.Duration
}

// iamSweeper reports whether this node sweeps: the live node with the
// lowest id (two nodes that both think so are harmless: every change
// compares the stamp's revision).
func (c *clusterMember) iamSweeper() bool {
	me := c.m.ID()
	for _, n := range c.m.Nodes() {
		if n.ID < me {
			return false
		}
	}
	return true
}

// sweepIAMStamps runs the sweep when it is due (clusterPeerLoop calls it
// every second on every node).
func (s *Server) sweepIAMStamps(ctx context.Context) error {
	c := s.cluster
	if c == nil || c.m == nil || !c.iamSweeper() {
		return nil
	}
	sw := &c.meta.iamSweep
	now := s.opts.Clock.Now()
	sw.mu.Lock()
	every, keep := sw.every, sw.keep
	if every <= 0 {
		every = iamSweepEvery
	}
	if keep <= 0 {
		keep = iamTombstoneKeep
	}
	due := now.Sub(sw.last) >= every
	if due {
		sw.last = now
	}
	sw.mu.Unlock()
	if !due {
		return nil
	}
	all, err := c.m.IAMTombstones(ctx)
	if err != nil {
		return err
	}
	type tomb struct {
		name string
		rev  int64
		m    metaMarker
	}
	var tombs []tomb
	for n, e := range all {
		var m metaMarker
		if err := json.Unmarshal(e.Stamp, &m); err != nil {
			s.log.Warn("IAM stamps: an undecodable stamp left alone", "resource", n, "err", err)
			continue
		}
		if !m.Gone {
			g := m
			g.Commit++
			g.Gone = true
			b, err := json.Marshal(g)
			if err != nil {
				return err
			}
			if _, err := c.m.ReplaceIAMStamp(ctx, n, e.StampRev, b); err != nil {
				return err
			}
			continue // its revision changed: the next sweep sees it
		}
		tombs = append(tombs, tomb{n, e.StampRev, m})
	}
	if len(tombs) == 0 {
		sw.mu.Lock()
		sw.seen = nil
		sw.mu.Unlock()
		return nil
	}
	held, err := s.peersIAM(ctx)
	if err != nil {
		return err
	}
	sw.mu.Lock()
	prev := sw.seen
	sw.mu.Unlock()
	seen := map[string]time.Time{}
	removed := 0
	for _, tb := range tombs {
		key := tb.name + "\x00" + strconv.FormatInt(tb.rev, 10)
		first, ok := prev[key]
		if !ok {
			first = now
		}
		if !tombstoneHeld(held, tb.name, tb.m, now.Sub(first) >= keep) {
			seen[key] = first
			continue
		}
		ok, err := c.m.ReplaceIAMStamp(ctx, tb.name, tb.rev, nil)
		if err != nil {
			return err
		}
		if ok {
			removed++
		}
	}
	sw.mu.Lock()
	sw.seen = seen
	sw.mu.Unlock()
	if removed > 0 {
		s.log.Debug("IAM stamps: tombstones removed (every peer has the deletions)", "removed", removed, "kept", len(seen))
	}
	return nil
}

// tombstoneHeld reports whether a tombstone may go: no peer can send an
// older copy of the policy back (see above). held is each peer's policies
// as its last answer carried them (nil for a peer with no answer yet);
// old says the tombstone has been kept iamTombstoneKeep.
func tombstoneHeld(held map[string]map[string]stampedValue, name string, m metaMarker, old bool) bool {
	for _, mm := range held {
		if mm == nil {
			return false
		}
		sv, has := mm[name]
		switch {
		case has && !sv.stamp().Less(m.stamp()):
			// The peer has the deletion, or a later change.
		case has && !sv.Gone:
			return false // an older copy
		case !old:
			return false
		}
	}
	return true
}

// peersIAM reads each peer's stamped policies as its last answer carried
// them (repl/meta/PEER), by resource name; nil for a peer with none yet.
func (s *Server) peersIAM(ctx context.Context) (map[string]map[string]stampedValue, error) {
	metas, _, err := s.cluster.m.ReplMetas(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]stampedValue{}
	for _, p := range s.peers.list() {
		if p.ID == s.opts.ClusterID {
			continue
		}
		b, ok := metas[p.ID]
		if !ok {
			out[p.ID] = nil
			continue
		}
		var list []replication.MetaEntry
		if err := json.Unmarshal(b, &list); err != nil {
			return nil, err
		}
		mm := map[string]stampedValue{}
		for _, e := range list {
			rest, sv, ok := stampedIAM(e)
			if !ok {
				continue
			}
			mm[strings.TrimSuffix(e.Instance+"/"+rest, "/")] = sv
		}
		out[p.ID] = mm
	}
	return out, nil
}
