package clusteretcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Trimming the schema log. Every node keeps, besides its applied mark
// under its lease, a durable progress mark (progress/NODE, no lease): the
// log entries a node has applied. A node that is down keeps its mark, so
// the log keeps what it needs to catch up when it returns.
//
// A trim writes a snapshot of the schema as one node has it after
// applying the log up to Seq (opaque bytes to this package), and deletes
// the entries up to Trimmed = min(Seq, every progress mark), in one
// transaction that holds only if no progress mark changed since they were
// read. A node whose data directory is new loads the snapshot and applies
// the entries after Seq; it first publishes a progress mark (of 0), so no
// trim can take the entries it is about to read.

// ErrTrimmed: the log no longer holds entries this node needs.
var ErrTrimmed = errors.New("ebbtable: the schema log was trimmed past this node's progress")

// Snapshot is the schema after the log's entries up to Seq; the entries up
// to Trimmed are gone.
type Snapshot struct {
	Seq     uint64 `json:"seq"`
	Trimmed uint64 `json:"trimmed"`
	Data    []byte `json:"data"`
	rev     int64
}

func (m *Member) progressKey(id string) string { return m.key("progress", id) }
func (m *Member) snapshotKey() string          { return m.key("schema", "snapshot") }

// PublishProgress records durably that this node applied the log up to seq.
func (m *Member) PublishProgress(ctx context.Context, seq uint64) error {
	if _, err := m.cli.Put(ctx, m.progressKey(m.opts.NodeID), strconv.FormatUint(seq, 10)); err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return nil
}

// ForgetProgress removes a node's progress mark: the log no longer keeps
// entries for it (a node given up for good; if it returns with its data
// directory it is refused, ErrTrimmed, once the log is trimmed).
func (m *Member) ForgetProgress(ctx context.Context, id string) error {
	if _, err := m.cli.Delete(ctx, m.progressKey(id)); err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return nil
}

// Progress lists every node's durable progress mark.
func (m *Member) Progress(ctx context.Context) (map[string]uint64, int64, error) {
	resp, err := m.cli.Get(ctx, m.key("progress")+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	out := map[string]uint64{}
	for _, kv := range resp.Kvs {
		v, err := strconv.ParseUint(string(kv.Value), 10, 64)
		if err != nil {
			continue
		}
		out[string(kv.Key[len(m.key("progress"))+1:])] = v
	}
	return out, resp.Header.Revision, nil
}

// ReadSnapshot returns the last snapshot, if the log was ever trimmed.
func (m *Member) ReadSnapshot(ctx context.Context) (Snapshot, bool, error) {
	resp, err := m.cli.Get(ctx, m.snapshotKey())
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return Snapshot{}, false, nil
	}
	var s Snapshot
	if err := json.Unmarshal(resp.Kvs[0].Value, &s); err != nil {
		return s, false, fmt.Errorf("ebbtable: undecodable schema snapshot: %w", err)
	}
	s.rev = resp.Kvs[0].ModRevision
	return s, true, nil
}

// Trim replaces the snapshot with data, the schema after the log up to
// seq (unless the snapshot there is as new), and deletes the entries every
// node has applied (up to the snapshot's seq at most).
// It returns the entries now trimmed (up to), or 0 with no error when
// there was nothing to trim or another node's change got in the way (try
// again later).
func (m *Member) Trim(ctx context.Context, seq uint64, data []byte) (uint64, error) {
	old, had, err := m.ReadSnapshot(ctx)
	if err != nil {
		return 0, err
	}
	if had && old.Seq >= seq {
		// No newer snapshot here: keep the one there is, trim up to it
		// if every node has caught up since.
		seq, data = old.Seq, old.Data
	}
	prog, rev, err := m.Progress(ctx)
	if err != nil {
		return 0, err
	}
	upto := seq
	for _, p := range prog {
		upto = min(upto, p)
	}
	if upto <= old.Trimmed {
		return 0, nil
	}
	enc, err := json.Marshal(Snapshot{Seq: seq, Trimmed: upto, Data: data})
	if err != nil {
		return 0, err
	}
	pk := m.key("progress") + "/"
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(m.snapshotKey()), "=", old.rev),
		clientv3.Compare(clientv3.ModRevision(pk), "<", rev+1).WithPrefix(),
	}
	resp, err := m.cli.Txn(ctx).If(cmps...).Then(
		clientv3.OpPut(m.snapshotKey(), string(enc)),
		clientv3.OpDelete(m.logKey(1), clientv3.WithRange(m.logKey(upto+1))),
	).Commit()
	if err != nil {
		return 0, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if !resp.Succeeded {
		return 0, nil
	}
	return upto, nil
}
