package clusteretcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Shared-storage creator ids (docs/scale-out.md, "Creator ids"). Pebble
// names a shared object by its creator id and file number only, and a
// fresh database numbers its files from the start: two databases with one
// creator id write objects of the same names. So every fresh data
// directory takes a new id from a counter in etcd, never handed out twice,
// and records it; the id a node runs with is recorded under its node id
// too (for releasing a dead node's references).

func creatorsKey(prefix string, parts ...string) string {
	k := prefix + "creators"
	for _, p := range parts {
		k += "/" + p
	}
	return k
}

// AllocateCreatorID takes the next creator id from the cluster's counter
// (etcd at endpoints, keys under prefix; "" is the default): an id no
// database of the cluster had or will have.
func AllocateCreatorID(ctx context.Context, endpoints []string, prefix string) (uint64, error) {
	o := Options{Endpoints: endpoints, Prefix: prefix}
	o.ensureDefaults()
	cli, err := clientv3.New(clientConfig(o.Endpoints, o.DialTimeout))
	if err != nil {
		return 0, fmt.Errorf("ebbtable: etcd at %v: %w", o.Endpoints, err)
	}
	defer cli.Close()
	k := creatorsKey(o.Prefix, "last")
	for {
		resp, err := cli.Get(ctx, k)
		if err != nil {
			return 0, fmt.Errorf("ebbtable: etcd: %w", err)
		}
		var last uint64
		var rev int64
		if len(resp.Kvs) == 1 {
			rev = resp.Kvs[0].ModRevision
			if last, err = strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64); err != nil {
				return 0, fmt.Errorf("ebbtable: etcd key %s holds %q, not a creator id", k, resp.Kvs[0].Value)
			}
		}
		next := last + 1
		put, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
			Then(clientv3.OpPut(k, strconv.FormatUint(next, 10))).Commit()
		if err != nil {
			return 0, fmt.Errorf("ebbtable: etcd: %w", err)
		}
		if put.Succeeded {
			return next, nil
		}
	}
}

// RecordCreatorID records the creator id this node's engine runs with:
// as the node's latest, and among every id the node id ever ran with
// (creators/ran/NODE/ID, until ForgetCreatorIDs), so giving the node up
// releases the references of all its data directories, not only the last.
func (m *Member) RecordCreatorID(ctx context.Context, id uint64) error {
	v := strconv.FormatUint(id, 10)
	_, err := m.cli.Txn(ctx).Then(clientv3.OpPut(creatorsKey(m.opts.Prefix, "node", m.opts.NodeID), v),
		clientv3.OpPut(creatorsKey(m.opts.Prefix, "ran", m.opts.NodeID, v), "")).Commit()
	if err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return nil
}

// CreatorIDs returns every creator id node ran with and has not been
// forgotten (ForgetCreatorIDs), its latest included, in no set order.
func (m *Member) CreatorIDs(ctx context.Context, node string) ([]uint64, error) {
	base := creatorsKey(m.opts.Prefix, "ran", node) + "/"
	resp, err := m.cli.Get(ctx, base, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	seen := map[uint64]bool{}
	var ids []uint64
	for _, kv := range resp.Kvs {
		id, err := strconv.ParseUint(strings.TrimPrefix(string(kv.Key), base), 10, 64)
		if err == nil && id != 0 && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	// The latest, recorded by versions that kept no history too.
	if id, ok, err := m.CreatorID(ctx, node); err != nil {
		return nil, err
	} else if ok && !seen[id] {
		ids = append(ids, id)
	}
	return ids, nil
}

// ForgetCreatorIDs drops ids from the creator ids node ran with (their
// references were released).
func (m *Member) ForgetCreatorIDs(ctx context.Context, node string, ids []uint64) error {
	var ops []clientv3.Op
	for _, id := range ids {
		ops = append(ops, clientv3.OpDelete(creatorsKey(m.opts.Prefix, "ran", node, strconv.FormatUint(id, 10))))
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := m.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return nil
}

// CreatorID returns the creator id node last recorded (RecordCreatorID);
// false if it recorded none.
func (m *Member) CreatorID(ctx context.Context, node string) (uint64, bool, error) {
	resp, err := m.cli.Get(ctx, creatorsKey(m.opts.Prefix, "node", node))
	if err != nil {
		return 0, false, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, false, nil
	}
	id, err := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
	if err != nil || id == 0 {
		return 0, false, fmt.Errorf("ebbtable: etcd: node %s's creator id %q is not a number", node, resp.Kvs[0].Value)
	}
	return id, true, nil
}
