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

// KeptDirectoryAt is KeptDirectory with the kept key's mod revision.
func (m *Member) KeptDirectoryAt(ctx context.Context, table string) (cluster.Directory, int64, bool, error) {
	g, err := m.cli.Get(ctx, m.deletedKey(table))
	if err != nil {
		return cluster.Directory{}, 0, false, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if len(g.Kvs) == 0 {
		return cluster.Directory{}, 0, false, nil
	}
	var d cluster.Directory
	if err := json.Unmarshal(g.Kvs[0].Value, &d); err != nil {
		return d, 0, false, fmt.Errorf("ebbtable: undecodable kept directory of %s: %w", table, err)
	}
	return d, g.Kvs[0].ModRevision, true, nil
}

// DropKeptAt removes, in one transaction, the kept directories of deleted
// tables (table → the mod revision they were read at), only if none
// changed or went since (false, nothing removed, if one did). An undelete
// compares the kept directory's revision in its own transaction, so of an
// undelete and this, exactly one wins: a table whose kept directory this
// removed can no longer be undeleted.
func (m *Member) DropKeptAt(ctx context.Context, revs map[string]int64) (bool, error) {
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	for table, rev := range revs {
		k := m.deletedKey(table)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", rev))
		ops = append(ops, clientv3.OpDelete(k))
	}
	resp, err := m.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return resp.Succeeded, nil
}
