package clusteretcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Pulling into a cluster of several nodes (docs/replication.md): the
// cluster's puller keeps, per peer cluster (origin) and table, the position
// up to which that peer's records are applied by the tablets' owners, under
// repl/ckpt/ORIGIN/TABLE; and the stamp below which every node may drop its
// replication tombstones under repl/trim.

func (m *Member) replCkptKey(origin, table string) string {
	return m.key("repl", "ckpt", origin, table)
}

// PutReplCheckpoint records a table's checkpoint of a peer cluster.
func (m *Member) PutReplCheckpoint(ctx context.Context, origin, table string, value []byte) error {
	if _, err := m.cli.Put(ctx, m.replCkptKey(origin, table), string(value)); err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return nil
}

// ReplCheckpoint reads one table's checkpoint of a peer cluster, nil if
// none.
func (m *Member) ReplCheckpoint(ctx context.Context, origin, table string) ([]byte, error) {
	resp, err := m.cli.Get(ctx, m.replCkptKey(origin, table))
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0].Value, nil
}

// ReplCheckpoints reads every table's checkpoint of a peer cluster, by
// table.
func (m *Member) ReplCheckpoints(ctx context.Context, origin string) (map[string][]byte, error) {
	base := m.replCkptKey(origin, "")
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

// PutReplTrim records the commit time below which every peer's records are
// applied in the cluster.
func (m *Member) PutReplTrim(ctx context.Context, below int64) error {
	if _, err := m.cli.Put(ctx, m.key("repl", "trim"), strconv.FormatInt(below, 10)); err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return nil
}

// ReplTrim reads what PutReplTrim recorded, 0 if nothing.
func (m *Member) ReplTrim(ctx context.Context) (int64, error) {
	resp, err := m.cli.Get(ctx, m.key("repl", "trim"))
	if err != nil {
		return 0, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
}
