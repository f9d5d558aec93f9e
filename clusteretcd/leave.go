package clusteretcd

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/ebbtable/ebbtable/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Drained lists the nodes marked draining (drain/ID), live or not, sorted:
// a drained node that is not live left the cluster cleanly.
func (m *Member) Drained() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.draining))
	for id := range m.draining {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// KeptOwnedBy lists the deleted tables whose kept directory (for an
// undelete) names node an owner.
func (m *Member) KeptOwnedBy(ctx context.Context, node string) ([]string, error) {
	p := m.deletedKey("")
	resp, err := m.cli.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		var d cluster.Directory
		if err := json.Unmarshal(kv.Value, &d); err != nil {
			return nil, fmt.Errorf("ebbtable: undecodable kept directory at %s: %w", kv.Key, err)
		}
		for _, t := range d.Tablets {
			if t.Owner == node {
				out = append(out, d.Table)
				break
			}
		}
	}
	return out, nil
}
