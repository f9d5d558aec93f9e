package server

import (
	"context"
	"sync"
	"time"

	"github.com/ebbtable/ebbtable/backup"
)

// Backup metrics in cluster mode (docs/backups.md, "Metrics"). Every node
// exports its own series; summed over the nodes they are the cluster's:
//
//   - ebbtable_backup_operations_total{op,result}: counted by the node that
//     ran the operation (the coordinator of a create, copy or restore);
//   - ebbtable_backups_expired_total: by the node whose sweep deleted the
//     backup (one node wins each);
//   - ebbtable_backups and ebbtable_backup_bytes: the cluster's ready
//     backups (records in etcd) are reported by one node, the live node
//     with the smallest id; the others report 0. So the sum is the
//     cluster's count whichever nodes are up.

// backupTotalsTTL is how long a reporting node reuses the totals it read
// from etcd (a scrape reads etcd at most this often); a change made
// through this node resets it.
const backupTotalsTTL = 10 * time.Second

type backupTotals struct {
	mu       sync.Mutex
	at       time.Time
	n        int
	bytes    int64
	reported bool
}

// backupTotals is this node's share of the cluster's ready backups.
func (c *clusterMember) backupTotals() (int, int64) {
	if !c.reportsBackups() {
		return 0, 0
	}
	t := &c.bkTotals
	t.mu.Lock()
	defer t.mu.Unlock()
	now := c.s.opts.Clock.Now()
	if t.reported && now.Sub(t.at) < c.s.knobs().backupTotalsTTL.or(backupTotalsTTL) {
		return t.n, t.bytes
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	recs, err := c.m.ListBackupRecords(ctx, "")
	if err != nil {
		return t.n, t.bytes // the last figures read
	}
	t.n, t.bytes = 0, 0
	for _, r := range recs {
		mf, _, err := backup.DecodeRecord(r.Value)
		if err != nil || mf.State != backup.Ready {
			continue
		}
		t.n++
		t.bytes += mf.SizeBytes
	}
	t.at, t.reported = now, true
	return t.n, t.bytes
}

// reportsBackups: this node is the live node with the smallest id.
func (c *clusterMember) reportsBackups() bool {
	if c.store == nil || c.m == nil || !c.joined.Load() {
		return false
	}
	for _, n := range c.m.Nodes() {
		if n.ID < c.opts.NodeID {
			return false
		}
	}
	_, live := c.m.Node(c.opts.NodeID)
	return live
}

// forgetBackupTotals makes the next scrape read etcd again (after a
// create, copy or delete here).
func (c *clusterMember) forgetBackupTotals() {
	c.bkTotals.mu.Lock()
	c.bkTotals.reported = false
	c.bkTotals.mu.Unlock()
}
