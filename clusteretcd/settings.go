package clusteretcd

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrSettingMismatch: a node starts with a cluster-wide setting other than
// the one the cluster recorded.
var ErrSettingMismatch = errors.New("ebbtable: cluster-wide setting differs")

func (m *Member) settingKey(name string) string { return m.key("settings", name) }

// checkSettings records each of the node's cluster-wide settings the
// cluster has not recorded yet (the first node to start decides) and
// refuses, ErrSettingMismatch, one the cluster recorded otherwise.
func (m *Member) checkSettings(ctx context.Context) error {
	for name, want := range m.opts.Settings {
		k := m.settingKey(name)
		resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
			Then(clientv3.OpPut(k, want)).Else(clientv3.OpGet(k)).Commit()
		if err != nil {
			return fmt.Errorf("ebbtable: etcd: %w", err)
		}
		if resp.Succeeded {
			continue
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 1 && string(kvs[0].Value) != want {
			return fmt.Errorf("%w: the cluster runs with %s=%s (etcd key %s, recorded by the first node that started), this node with %s=%s: "+
				"start every node with the same setting, or change it for the whole cluster (stop every node, delete the key, start them all with the new setting)",
				ErrSettingMismatch, name, kvs[0].Value, k, name, want)
		}
	}
	return nil
}
