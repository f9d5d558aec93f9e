package clusteretcd

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// IAM policies in cluster mode (instances, tables, authorized views,
// backups): one key per resource, iam/NAME (NAME the resource name), so
// every node reads and enforces the same policy. The value is opaque here (an encoded
// iampb.Policy). A change compares the key's revision, so two nodes never
// both replace the policy they read.

func (m *Member) iamKey(name string) string { return m.key("iam", name) }

// GetIAMPolicy reads a resource's policy and its revision; a resource
// never given one has none (nil, 0).
func (m *Member) GetIAMPolicy(ctx context.Context, name string) ([]byte, int64, error) {
	resp, err := m.cli.Get(ctx, m.iamKey(name))
	if err != nil {
		return nil, 0, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, nil
}

// PutIAMPolicy replaces a policy read at revision rev (0: there was none);
// ErrRecordChanged if it changed since.
func (m *Member) PutIAMPolicy(ctx context.Context, name string, value []byte, rev int64) error {
	k := m.iamKey(name)
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(clientv3.OpPut(k, string(value))).Commit()
	if err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: the IAM policy of %s", ErrRecordChanged, name)
	}
	return nil
}

// DeleteIAMPolicy removes a resource's policy (a deleted resource's).
func (m *Member) DeleteIAMPolicy(ctx context.Context, name string) error {
	if _, err := m.cli.Delete(ctx, m.iamKey(name)); err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return nil
}

// GetIAMPolicies reads the policies of names in one request (the
// resources on a request's path); names with none are left out.
func (m *Member) GetIAMPolicies(ctx context.Context, names []string) (map[string][]byte, error) {
	ops := make([]clientv3.Op, len(names))
	for i, n := range names {
		ops[i] = clientv3.OpGet(m.iamKey(n))
	}
	resp, err := m.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	out := make(map[string][]byte, len(names))
	for i, r := range resp.Responses {
		if kvs := r.GetResponseRange().GetKvs(); len(kvs) > 0 {
			out[names[i]] = kvs[0].Value
		}
	}
	return out, nil
}

// ListIAMPolicies returns every stored policy by resource name.
func (m *Member) ListIAMPolicies(ctx context.Context) (map[string][]byte, error) {
	pre := m.iamKey("")
	resp, err := m.cli.Get(ctx, pre, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	out := make(map[string][]byte, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), pre)] = kv.Value
	}
	return out, nil
}
