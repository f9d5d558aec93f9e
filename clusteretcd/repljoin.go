package clusteretcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Replication between clusters, the cluster's side (docs/replication.md,
// "Joining with a cluster of several nodes"):
//   - repl/join: the cluster's join of a peer's instance (`--join`): who
//     copies, from which seed, and whether it finished; changed only by
//     compare-and-swap, so one node copies;
//   - repl/through/PEER: the peer's closed timestamp through which the
//     cluster's puller has every table applied, so every node reports the
//     delay;
//   - repl/meta/PEER: the instance metadata the peer's last answer
//     carried, so every node adopts it.

// ErrReplJoinChanged: repl/join changed since it was read.
var ErrReplJoinChanged = errors.New("ebbtable: the cluster's join record changed meanwhile")

// ReplJoin reads repl/join: its value (nil if none) and mod revision.
func (m *Member) ReplJoin(ctx context.Context) ([]byte, int64, error) {
	resp, err := m.cli.Get(ctx, m.key("repl", "join"))
	if err != nil {
		return nil, 0, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, nil
}

// PutReplJoin replaces repl/join if it is still at revision rev (0: it
// does not exist), else ErrReplJoinChanged.
func (m *Member) PutReplJoin(ctx context.Context, value []byte, rev int64) (int64, error) {
	k := m.key("repl", "join")
	resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(clientv3.OpPut(k, string(value))).Commit()
	if err != nil {
		return 0, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if !resp.Succeeded {
		return 0, ErrReplJoinChanged
	}
	return resp.Header.Revision, nil
}

// PutReplThrough records a peer's closed timestamp through which the
// cluster has applied every table.
func (m *Member) PutReplThrough(ctx context.Context, peer string, through int64) error {
	if _, err := m.cli.Put(ctx, m.key("repl", "through", peer), strconv.FormatInt(through, 10)); err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return nil
}

// ReplThroughs reads what PutReplThrough recorded, by peer.
func (m *Member) ReplThroughs(ctx context.Context) (map[string]int64, error) {
	base := m.key("repl", "through", "")
	resp, err := m.cli.Get(ctx, base, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	out := make(map[string]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if v, err := strconv.ParseInt(string(kv.Value), 10, 64); err == nil {
			out[strings.TrimPrefix(string(kv.Key), base)] = v
		}
	}
	return out, nil
}

// PutReplMeta records the instance metadata a peer's last answer carried
// (opaque here).
func (m *Member) PutReplMeta(ctx context.Context, peer string, value []byte) error {
	if _, err := m.cli.Put(ctx, m.key("repl", "meta", peer), string(value)); err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return nil
}

// ReplMetas reads what PutReplMeta recorded, by peer, with each key's mod
// revision.
func (m *Member) ReplMetas(ctx context.Context) (map[string][]byte, map[string]int64, error) {
	base := m.key("repl", "meta", "")
	resp, err := m.cli.Get(ctx, base, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	vals := make(map[string][]byte, len(resp.Kvs))
	revs := make(map[string]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		id := strings.TrimPrefix(string(kv.Key), base)
		vals[id], revs[id] = kv.Value, kv.ModRevision
	}
	return vals, revs, nil
}
