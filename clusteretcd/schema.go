package clusteretcd

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/ebbtable/ebbtable/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// SchemaEntry is one change to the cluster's tables, in the order every
// node applies them. Request is the Table Admin request as sent (protobuf
// bytes); TableID is the id a created table takes on every node (the
// entry's sequence number).
type SchemaEntry struct {
	Seq     uint64 `json:"seq"`
	Method  string `json:"method"`
	Table   string `json:"table"`
	TableID uint64 `json:"table_id,omitempty"`
	Request []byte `json:"request"`
}

// Append adds an entry to the schema log, in one transaction with the
// table's directory: create (if not nil, made by newDir from the entry's
// sequence number, and only if the table has no directory yet:
// ErrTableExists) or drop. It returns the entry with its sequence number.
func (m *Member) Append(ctx context.Context, e SchemaEntry, newDir func(seq uint64) (cluster.Directory, error), drop bool) (SchemaEntry, error) {
	for {
		g, err := m.cli.Get(ctx, m.seqKey())
		if err != nil {
			return e, fmt.Errorf("ebbtable: etcd: %w", err)
		}
		var cur uint64
		var modRev int64
		if len(g.Kvs) == 1 {
			cur, _ = strconv.ParseUint(string(g.Kvs[0].Value), 10, 64)
			modRev = g.Kvs[0].ModRevision
		}
		e.Seq = cur + 1
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(m.seqKey()), "=", modRev)}
		ops := []clientv3.Op{clientv3.OpPut(m.seqKey(), strconv.FormatUint(e.Seq, 10))}
		dk := m.dirKey(e.Table)
		if newDir != nil {
			e.TableID = e.Seq
			d, err := newDir(e.Seq)
			if err != nil {
				return e, err
			}
			d.TableID = e.Seq
			enc, err := json.Marshal(d)
			if err != nil {
				return e, err
			}
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(dk), "=", 0))
			ops = append(ops, clientv3.OpPut(dk, string(enc)))
		}
		if drop {
			ops = append(ops, clientv3.OpDelete(dk))
		}
		enc, err := json.Marshal(e)
		if err != nil {
			return e, err
		}
		ops = append(ops, clientv3.OpPut(m.logKey(e.Seq), string(enc)))
		resp, err := m.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return e, fmt.Errorf("ebbtable: etcd: %w", err)
		}
		if resp.Succeeded {
			return e, nil
		}
		if newDir != nil {
			if g, err := m.cli.Get(ctx, dk, clientv3.WithCountOnly()); err == nil && g.Count > 0 {
				return e, fmt.Errorf("%w: %s", ErrTableExists, e.Table)
			}
		}
	}
}

// Entries reads the schema log after seq, in order.
func (m *Member) Entries(ctx context.Context, after uint64) ([]SchemaEntry, error) {
	resp, err := m.cli.Get(ctx, m.logKey(after+1), clientv3.WithRange(m.key("schema", "log0")))
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	out := make([]SchemaEntry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var e SchemaEntry
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			return nil, fmt.Errorf("ebbtable: undecodable schema entry %s: %w", kv.Key, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// SchemaSeq is the last schema log sequence number the cache has seen.
func (m *Member) SchemaSeq() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.schema
}

// SetApplied publishes that this node applied the schema log up to seq
// (under its lease: a dead node's progress disappears with it).
func (m *Member) SetApplied(ctx context.Context, seq uint64) error {
	m.mu.Lock()
	m.applied[m.opts.NodeID] = max(m.applied[m.opts.NodeID], seq)
	lease := m.lease
	m.mu.Unlock()
	if _, err := m.cli.Put(ctx, m.appliedKey(m.opts.NodeID), strconv.FormatUint(seq, 10), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return nil
}

func (m *Member) republishApplied(ctx context.Context) {
	m.mu.RLock()
	seq := m.applied[m.opts.NodeID]
	m.mu.RUnlock()
	if seq > 0 {
		m.SetApplied(ctx, seq)
	}
}

// AllApplied reports whether every live node has applied the schema log up
// to seq.
func (m *Member) AllApplied(seq uint64) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for id := range m.nodes {
		if m.applied[id] < seq {
			return false
		}
	}
	return true
}
