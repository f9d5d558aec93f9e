package clusteretcd

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Replication between clusters (docs/replication.md, "Clusters of several
// nodes"): the peer clusters of a cluster of several nodes are kept in etcd
// under repl/peers/ID, so every node of the cluster records its changes for
// them and can answer their pulls, whichever node they called.

func (m *Member) replPeerKey(id string) string { return m.key("repl", "peers", id) }

// PutReplPeer records (or replaces) a peer cluster's entry.
func (m *Member) PutReplPeer(ctx context.Context, id string, value []byte) error {
	if _, err := m.cli.Put(ctx, m.replPeerKey(id), string(value)); err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return nil
}

// DeleteReplPeer forgets a peer cluster.
func (m *Member) DeleteReplPeer(ctx context.Context, id string) error {
	if _, err := m.cli.Delete(ctx, m.replPeerKey(id)); err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return nil
}

// ReplPeers reads every peer cluster's entry, by id.
func (m *Member) ReplPeers(ctx context.Context) (map[string][]byte, error) {
	base := m.replPeerKey("")
	resp, err := m.cli.Get(ctx, base, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	out := make(map[string][]byte, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), base)] = kv.Value
	}
	return out, nil
}
