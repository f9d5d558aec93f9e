package clusteretcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ebbtable/ebbtable/cluster"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
	// Origin is the node the change was sent to (a restore runs there).
	Origin string `json:"origin,omitempty"`
	// Args holds what the request carried besides its message (metadata).
	Args map[string]string `json:"args,omitempty"`
}

// Append adds an entry to the schema log, in one transaction with the
// table's directory: create (if not nil, made by newDir from the entry's
// sequence number, and only if the table has no directory yet:
// ErrTableExists) or drop. It returns the entry with its sequence number.
func (m *Member) Append(ctx context.Context, e SchemaEntry, newDir func(seq uint64) (cluster.Directory, error), drop bool) (SchemaEntry, error) {
	return m.AppendEntry(ctx, e, DirOp{Create: newDir, Drop: drop})
}

// DirOp is what a schema log entry does to its table's tablet directory,
// in the same etcd transaction as the entry.
type DirOp struct {
	// Create makes a new directory from the entry's sequence number (the
	// table id); only if the table has none (else ErrTableExists). It
	// forgets a directory a delete kept, and the IAM policies (iam.go) of
	// the table's name and of the names under it.
	Create func(seq uint64) (cluster.Directory, error)
	// Drop removes the directory; with Keep it is kept (under deleted/)
	// for an undelete: for KeepFor (then etcd deletes it, under a lease of
	// that TTL, and the table's IAM policies with it, put under the same
	// lease), or until undeleted or a table of the name is created if
	// KeepFor is 0. Without Keep the table's IAM policies go at once.
	Drop, Keep bool
	KeepFor    time.Duration
	// Undrop brings back the directory a Drop with Keep kept, only if the
	// table has none (ErrTableExists) and one was kept (ErrNotDeleted);
	// the table's IAM policies are taken off the kept directory's lease.
	Undrop bool
	// IfTableID, when not 0, appends the entry only while the table's
	// directory holds that table id (else ErrDirectoryGone; ops.go).
	IfTableID uint64
	// Op, when set, writes an operation record (ops.go) in the same
	// transaction, made from the entry's sequence number.
	Op func(seq uint64) (name string, value []byte, err error)
}

// ErrNotDeleted: no directory of a deleted table is kept under the name.
var ErrNotDeleted = errors.New("ebbtable: no deleted table of that name in the cluster")

func (m *Member) deletedKey(table string) string { return m.key("deleted", table) }

// AppendEntry adds an entry to the schema log with op done to its table's
// directory in the same transaction, and returns the entry with its
// sequence number (and TableID, for a create).
func (m *Member) AppendEntry(ctx context.Context, e SchemaEntry, op DirOp) (_ SchemaEntry, err error) {
	dk, xk := m.dirKey(e.Table), m.deletedKey(e.Table)
	var keep []clientv3.OpOption
	if op.Drop && op.Keep && op.KeepFor > 0 {
		ttl := int64((op.KeepFor + time.Second - 1) / time.Second)
		l, err := m.cli.Grant(ctx, ttl)
		if err != nil {
			return e, fmt.Errorf("ebbtable: etcd: %w", err)
		}
		keep = append(keep, clientv3.WithLease(l.ID))
		defer func() {
			if err != nil { // nothing kept under it
				m.cli.Revoke(context.WithoutCancel(ctx), l.ID)
			}
		}()
	}
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
		if op.Create != nil {
			e.TableID = e.Seq
			d, err := op.Create(e.Seq)
			if err != nil {
				return e, err
			}
			d.TableID = e.Seq
			enc, err := json.Marshal(d)
			if err != nil {
				return e, err
			}
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(dk), "=", 0))
			ops = append(ops, clientv3.OpPut(dk, string(enc)), clientv3.OpDelete(xk))
			// A table created under the name starts without the IAM
			// policies a former one left (its own, its authorized views').
			ops = append(ops, clientv3.OpDelete(m.iamKey(e.Table)), clientv3.OpDelete(m.iamKey(e.Table)+"/", clientv3.WithPrefix()))
		}
		if op.IfTableID != 0 {
			cmp, err := m.guardTableID(ctx, e.Table, op.IfTableID)
			if err != nil {
				return e, err
			}
			cmps = append(cmps, cmp)
		}
		if op.Op != nil {
			name, value, err := op.Op(e.Seq)
			if err != nil {
				return e, err
			}
			ops = append(ops, clientv3.OpPut(m.opKey(name), string(value)))
		}
		if op.Drop {
			if op.Keep {
				g, err := m.cli.Get(ctx, dk)
				if err != nil {
					return e, fmt.Errorf("ebbtable: etcd: %w", err)
				}
				if len(g.Kvs) == 1 {
					cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(dk), "=", g.Kvs[0].ModRevision))
					ops = append(ops, clientv3.OpPut(xk, string(g.Kvs[0].Value), keep...))
				} else {
					cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(dk), "=", 0))
				}
				if len(keep) > 0 {
					// The table's IAM policies are kept as long as its
					// directory, under the same lease (iam.go).
					c, o, err := m.tableIAMOps(ctx, e.Table, false, keep...)
					if err != nil {
						return e, err
					}
					cmps, ops = append(cmps, c...), append(ops, o...)
				}
			} else {
				// Gone for good: its IAM policies with it.
				ops = append(ops, clientv3.OpDelete(m.iamKey(e.Table)), clientv3.OpDelete(m.iamKey(e.Table)+"/", clientv3.WithPrefix()))
			}
			ops = append(ops, clientv3.OpDelete(dk))
		}
		if op.Undrop {
			g, err := m.cli.Get(ctx, xk)
			if err != nil {
				return e, fmt.Errorf("ebbtable: etcd: %w", err)
			}
			if len(g.Kvs) == 0 {
				return e, fmt.Errorf("%w: %s", ErrNotDeleted, e.Table)
			}
			var d cluster.Directory
			if err := json.Unmarshal(g.Kvs[0].Value, &d); err != nil {
				return e, fmt.Errorf("ebbtable: undecodable kept directory of %s: %w", e.Table, err)
			}
			e.TableID = d.TableID
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(xk), "=", g.Kvs[0].ModRevision),
				clientv3.Compare(clientv3.CreateRevision(dk), "=", 0))
			ops = append(ops, clientv3.OpPut(dk, string(g.Kvs[0].Value)), clientv3.OpDelete(xk))
			// Its IAM policies, kept under the directory's lease, kept
			// for good again.
			c, o, err := m.tableIAMOps(ctx, e.Table, true)
			if err != nil {
				return e, err
			}
			cmps, ops = append(cmps, c...), append(ops, o...)
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
		if op.Create != nil || op.Undrop {
			if g, err := m.cli.Get(ctx, dk, clientv3.WithCountOnly()); err == nil && g.Count > 0 {
				return e, fmt.Errorf("%w: %s", ErrTableExists, e.Table)
			}
		}
		if err := ctx.Err(); err != nil {
			return e, err
		}
	}
}

// KeptDirectory returns the directory a delete kept for an undelete.
func (m *Member) KeptDirectory(ctx context.Context, table string) (cluster.Directory, bool, error) {
	g, err := m.cli.Get(ctx, m.deletedKey(table))
	if err != nil {
		return cluster.Directory{}, false, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if len(g.Kvs) == 0 {
		return cluster.Directory{}, false, nil
	}
	var d cluster.Directory
	if err := json.Unmarshal(g.Kvs[0].Value, &d); err != nil {
		return d, false, fmt.Errorf("ebbtable: undecodable kept directory of %s: %w", table, err)
	}
	return d, true, nil
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

// SetApplied publishes that this node applied the schema log up to seq:
// under its lease (a dead node's applied mark disappears with it) and as
// its durable progress mark (schemalog.go).
//
// If the lease has lapsed (renewals failed for a TTL: a process starved
// of CPU, or cut off from etcd), the mark is kept and SetApplied succeeds:
// renew registers the node again and republishes it under the new lease.
// Failing instead stopped a node's start-up (server tests under load:
// "etcdserver: requested lease not found").
func (m *Member) SetApplied(ctx context.Context, seq uint64) error {
	m.mu.Lock()
	m.applied[m.opts.NodeID] = max(m.applied[m.opts.NodeID], seq)
	lease := m.lease
	m.mu.Unlock()
	v := strconv.FormatUint(seq, 10)
	if _, err := m.cli.Txn(ctx).Then(clientv3.OpPut(m.appliedKey(m.opts.NodeID), v, clientv3.WithLease(lease)),
		clientv3.OpPut(m.progressKey(m.opts.NodeID), v)).Commit(); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			m.log.Warn("lease lapsed: the applied mark waits for the node to register again", "node", m.opts.NodeID, "seq", seq)
			return nil
		}
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
