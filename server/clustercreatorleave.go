package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ebbtable/ebbtable/storage"
)

// Nodes that left the cluster cleanly (docs/scale-out.md, "Creator ids"):
// an operator drained a node (`node drain ID`: every tablet moved away by
// reference, the targets' ingests adding their own reference markers to
// the shared SSTables they use) and stopped it. Its drain mark stays; it
// holds no lease and owns no tablet. ReleaseDeadAfter (default an hour,
// negative never) after the live node with the smallest id first saw it
// so, with or without --failover, that node releases it as failover gives
// a dead node up (releaseNode): a released marker (its old data directory
// is refused from then on; it starts again on an empty one, with a new
// creator id), its failover catalogs, checkpoints and commit log if any,
// and the reference markers of every creator id it ran with. An object
// goes only once no other node's marker references it, so nothing a live
// node reads is deleted. Not while the kept directory of a deleted table
// names it (an undelete would give it tablets again): that waits out the
// undelete retention. Its schema-log progress mark goes too.

// leftNodes is when the releasing node first saw each node gone cleanly.
type leftNodes struct {
	mu    sync.Mutex
	since map[string]time.Time
}

// releaseLeft releases the nodes that left cleanly (above); run by every
// node's backup expiry loop, acting on the live node with the smallest
// id only.
func (c *clusterMember) releaseLeft(ctx context.Context) {
	if c.store == nil || !c.reportsBackups() {
		return
	}
	after := c.opts.ReleaseDeadAfter
	if after == 0 {
		after = DefaultReleaseDeadAfter
	}
	if after < 0 {
		return
	}
	now := c.s.opts.Clock.Now()
	dirs := c.m.Directories()
	c.left.mu.Lock()
	defer c.left.mu.Unlock()
	if c.left.since == nil {
		c.left.since = map[string]time.Time{}
	}
	seen := map[string]bool{}
	for _, id := range c.m.Drained() {
		if _, live := c.m.Node(id); live || ownsAny(dirs, id) {
			continue
		}
		seen[id] = true
		since, ok := c.left.since[id]
		if !ok {
			c.left.since[id], since = now, now
		}
		if now.Sub(since) < after {
			continue
		}
		if _, err := storage.GetObject(ctx, c.store, storage.ReleasedMarker(id)); err == nil {
			continue // released already
		}
		if kept, err := c.m.KeptOwnedBy(ctx, id); err != nil || len(kept) > 0 {
			continue // an undelete may give it tablets again
		}
		err := c.releaseNode(ctx, id, dirs)
		switch {
		case errors.Is(err, errNotYet):
			continue
		case err != nil:
			c.s.log.Warn("release a node that left the cluster", "node", id, "err", err)
			continue
		}
		if _, err := c.m.ForgetDeadProgress(ctx, id); err != nil {
			c.s.log.Warn("forget the schema-log progress of a node that left the cluster", "node", id, "err", err)
		}
		c.s.log.Info("released a node that left the cluster cleanly (drained, stopped)", "node", id)
	}
	for id := range c.left.since {
		if !seen[id] {
			delete(c.left.since, id)
		}
	}
}
