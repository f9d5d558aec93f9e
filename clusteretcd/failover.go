package clusteretcd

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ebbtable/ebbtable/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TakeOver replaces old with next, which gives tablets of the dead node to
// live ones, in one etcd transaction that holds only if the directory is
// unchanged since old was read, the dead node has no key (its lease
// expired, or it left) and every new owner is live. Otherwise
// cluster.ErrConflict: the dead node came back, or the directory moved on.
// The dead node's fence dropped before its lease expired, so it serves
// none of these tablets any more (docs/scale-out.md, "Automatic
// failover").
func (m *Member) TakeOver(ctx context.Context, old, next cluster.Directory, dead string) (cluster.Directory, error) {
	if err := next.Validate(); err != nil {
		return old, err
	}
	enc, err := json.Marshal(next)
	if err != nil {
		return old, err
	}
	k := m.dirKey(next.Table)
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(k), "=", old.Revision),
		clientv3.Compare(clientv3.CreateRevision(m.nodeKey(dead)), "=", 0),
	}
	seen := map[string]bool{}
	for _, t := range next.Tablets {
		if t.Owner != dead && !seen[t.Owner] {
			seen[t.Owner] = true
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(m.nodeKey(t.Owner)), ">", 0))
		}
	}
	resp, err := m.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(k, string(enc))).Commit()
	if err != nil {
		return old, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if !resp.Succeeded {
		return old, fmt.Errorf("%w: %s (or node %s is back, or a new owner is not live)", cluster.ErrConflict, next.Table, dead)
	}
	next = next.Clone()
	next.Revision = resp.Header.Revision
	m.mu.Lock()
	if cur, ok := m.dirs[next.Table]; !ok || cur.Revision < next.Revision {
		m.dirs[next.Table] = next
		m.notifyLocked()
	}
	m.mu.Unlock()
	return next, nil
}

// ForgetDeadProgress removes a dead node's progress mark (ForgetProgress)
// only while the node has no key: a node that registers again publishes
// its mark after registering, so it never loses it to this. It reports
// whether the node had no key (and so no mark now).
func (m *Member) ForgetDeadProgress(ctx context.Context, id string) (bool, error) {
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(m.nodeKey(id)), "=", 0)).
		Then(clientv3.OpDelete(m.progressKey(id))).Commit()
	if err != nil {
		return false, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return resp.Succeeded, nil
}
