package clusteretcd

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Instance metadata in cluster mode (the clusters and app profiles the
// InstanceAdmin API writes): one key per record, meta/KIND/INSTANCE/NAME,
// written by the node that took the call and mirrored by every node into
// its own metadata (server/clustermeta.go). A deleted record keeps its key
// with an empty value, so a node that was down when it was deleted
// deletes its copy too. Values are opaque here.

// MetaEntry is one record; an empty Value is a deletion.
type MetaEntry struct {
	Kind, Instance, Name string
	Value                []byte
}

func (m *Member) metaKey(kind, inst, name string) string { return m.key("meta", kind, inst, name) }

// PutMeta writes the entries in one transaction.
func (m *Member) PutMeta(ctx context.Context, entries ...MetaEntry) error {
	ops := make([]clientv3.Op, len(entries))
	for i, e := range entries {
		ops[i] = clientv3.OpPut(m.metaKey(e.Kind, e.Instance, e.Name), string(e.Value))
	}
	if _, err := m.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return nil
}

// PutMetaIfAbsent writes the entries in one transaction only if etcd
// holds none of the keys of absent (written or deleted); it reports
// whether it did.
func (m *Member) PutMetaIfAbsent(ctx context.Context, absent []MetaEntry, entries ...MetaEntry) (bool, error) {
	cmps := make([]clientv3.Cmp, len(absent))
	for i, e := range absent {
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(m.metaKey(e.Kind, e.Instance, e.Name)), "=", 0)
	}
	ops := make([]clientv3.Op, len(entries))
	for i, e := range entries {
		ops[i] = clientv3.OpPut(m.metaKey(e.Kind, e.Instance, e.Name), string(e.Value))
	}
	resp, err := m.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return resp.Succeeded, nil
}

// ListMeta reads every record (deletions included) and the revision read.
func (m *Member) ListMeta(ctx context.Context) ([]MetaEntry, int64, error) {
	pre := m.key("meta") + "/"
	resp, err := m.cli.Get(ctx, pre, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	out := make([]MetaEntry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), pre)
		kind, rest, ok1 := strings.Cut(rest, "/")
		i := strings.LastIndex(rest, "/")
		if !ok1 || i < 0 {
			m.log.Warn("malformed instance metadata key in etcd", "key", string(kv.Key))
			continue
		}
		out = append(out, MetaEntry{Kind: kind, Instance: rest[:i], Name: rest[i+1:], Value: kv.Value})
	}
	return out, resp.Header.Revision, nil
}

// PutMetaIfVacant writes the entries in one transaction only if etcd holds
// no record at vacant's key: the key was never written, or holds a
// deletion (an empty value). It reports whether it did. Two nodes creating
// the same record at once: exactly one succeeds.
func (m *Member) PutMetaIfVacant(ctx context.Context, vacant MetaEntry, entries ...MetaEntry) (bool, error) {
	k := m.metaKey(vacant.Kind, vacant.Instance, vacant.Name)
	ops := make([]clientv3.Op, len(entries))
	for i, e := range entries {
		ops[i] = clientv3.OpPut(m.metaKey(e.Kind, e.Instance, e.Name), string(e.Value))
	}
	// etcd compares have no OR, and a value compare fails on a missing
	// key: never written, else (nested) deleted.
	deleted := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(k), "=", "")}, ops, nil)
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(ops...).Else(deleted).Commit()
	if err != nil {
		return false, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if resp.Succeeded {
		return true, nil
	}
	return len(resp.Responses) == 1 && resp.Responses[0].GetResponseTxn().GetSucceeded(), nil
}
