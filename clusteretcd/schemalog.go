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
//
// A snapshot is stored as a header (schema/snapshot) holding the data
// itself when it is small (up to snapshotInline bytes), else naming a
// generation of chunks (schema/snapshot-data/GEN/NNNNNN, each at most
// snapshotChunk bytes), so a schema of any size fits etcd's request limit
// (1.5 MiB by default) and every node reads the same one: the chunks are
// written first, each in its own request, then the header in the trim's
// transaction, which also deletes every other generation. A trim that
// loses its transaction deletes its chunks; chunks a crash left behind
// are deleted by the next trim.
type Snapshot struct {
	Seq     uint64 `json:"seq"`
	Trimmed uint64 `json:"trimmed"`
	Data    []byte `json:"data,omitempty"`
	// Gen, Chunks and Size name the chunks of a large snapshot (Data is
	// then empty in the header, and filled by ReadSnapshot).
	Gen    string `json:"gen,omitempty"`
	Chunks int    `json:"chunks,omitempty"`
	Size   int    `json:"size,omitempty"`
	rev    int64
}

// Sizes of a snapshot's parts (variables: tests lower them).
var (
	snapshotInline = 256 << 10
	snapshotChunk  = 512 << 10
)

func (m *Member) snapshotDataPrefix() string { return m.key("schema", "snapshot-data") + "/" }
func (m *Member) snapshotChunkKey(gen string, i int) string {
	return fmt.Sprintf("%s%s/%06d", m.snapshotDataPrefix(), gen, i)
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

// ReadSnapshot returns the last snapshot, if the log was ever trimmed,
// with its data whole.
func (m *Member) ReadSnapshot(ctx context.Context) (Snapshot, bool, error) {
	for attempt := 0; ; attempt++ {
		s, ok, rev, err := m.readSnapshotHeader(ctx)
		if err != nil || !ok || s.Chunks == 0 {
			return s, ok, err
		}
		// The chunks as of the header's revision: a newer trim may have
		// deleted them since.
		resp, err := m.cli.Get(ctx, m.snapshotChunkKey(s.Gen, 0), clientv3.WithRange(m.snapshotChunkKey(s.Gen, s.Chunks)), clientv3.WithRev(rev))
		if err != nil {
			if attempt < 3 {
				continue // compacted meanwhile: read the header again
			}
			return s, false, fmt.Errorf("ebbtable: etcd: %w", err)
		}
		if len(resp.Kvs) != s.Chunks {
			return s, false, fmt.Errorf("ebbtable: schema snapshot %s has %d of its %d chunks", s.Gen, len(resp.Kvs), s.Chunks)
		}
		data := make([]byte, 0, s.Size)
		for _, kv := range resp.Kvs {
			data = append(data, kv.Value...)
		}
		if len(data) != s.Size {
			return s, false, fmt.Errorf("ebbtable: schema snapshot %s is %d bytes, its header says %d", s.Gen, len(data), s.Size)
		}
		s.Data = data
		return s, true, nil
	}
}

// readSnapshotHeader reads the snapshot's header (its data only if
// inline) and the store revision it was read at.
func (m *Member) readSnapshotHeader(ctx context.Context) (Snapshot, bool, int64, error) {
	resp, err := m.cli.Get(ctx, m.snapshotKey())
	if err != nil {
		return Snapshot{}, false, 0, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return Snapshot{}, false, resp.Header.Revision, nil
	}
	var s Snapshot
	if err := json.Unmarshal(resp.Kvs[0].Value, &s); err != nil {
		return s, false, 0, fmt.Errorf("ebbtable: undecodable schema snapshot: %w", err)
	}
	s.rev = resp.Kvs[0].ModRevision
	return s, true, resp.Header.Revision, nil
}

// Trim replaces the snapshot with data, the schema after the log up to
// seq (unless the snapshot there is as new), and deletes the entries every
// node has applied (up to the snapshot's seq at most).
// It returns the entries now trimmed (up to), or 0 with no error when
// there was nothing to trim or another node's change got in the way (try
// again later).
func (m *Member) Trim(ctx context.Context, seq uint64, data []byte) (uint64, error) {
	old, had, _, err := m.readSnapshotHeader(ctx)
	if err != nil {
		return 0, err
	}
	keepOld := had && old.Seq >= seq
	if keepOld {
		// No newer snapshot here: keep the one there is (its chunks
		// too), trim up to it if every node has caught up since.
		seq = old.Seq
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
	hdr := Snapshot{Seq: seq, Trimmed: upto}
	wrote := ""
	switch {
	case keepOld:
		hdr = old
		hdr.Trimmed = upto
	case len(data) <= snapshotInline:
		hdr.Data = data
	default:
		hdr.Gen, hdr.Size = fmt.Sprintf("%016x-%s-%d", seq, m.opts.NodeID, m.opts.Clock.Now().UnixNano()), len(data)
		wrote = hdr.Gen
		for off := 0; off < len(data); off += snapshotChunk {
			chunk := data[off:min(off+snapshotChunk, len(data))]
			if _, err := m.cli.Put(ctx, m.snapshotChunkKey(hdr.Gen, hdr.Chunks), string(chunk)); err != nil {
				m.dropSnapshotGen(ctx, wrote)
				return 0, fmt.Errorf("ebbtable: etcd: write schema snapshot chunk: %w", err)
			}
			hdr.Chunks++
		}
	}
	enc, err := json.Marshal(hdr)
	if err != nil {
		m.dropSnapshotGen(ctx, wrote)
		return 0, err
	}
	pk := m.key("progress") + "/"
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(m.snapshotKey()), "=", old.rev),
		clientv3.Compare(clientv3.ModRevision(pk), "<", rev+1).WithPrefix(),
	}
	ops := []clientv3.Op{
		clientv3.OpPut(m.snapshotKey(), string(enc)),
		clientv3.OpDelete(m.logKey(1), clientv3.WithRange(m.logKey(upto+1))),
	}
	// Every generation of chunks but the header's goes.
	dp := m.snapshotDataPrefix()
	if hdr.Gen == "" {
		ops = append(ops, clientv3.OpDelete(dp, clientv3.WithPrefix()))
	} else {
		g := dp + hdr.Gen + "/"
		ops = append(ops, clientv3.OpDelete(dp, clientv3.WithRange(g)), clientv3.OpDelete(clientv3.GetPrefixRangeEnd(g), clientv3.WithRange(clientv3.GetPrefixRangeEnd(dp))))
	}
	resp, err := m.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return 0, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if !resp.Succeeded {
		m.dropSnapshotGen(ctx, wrote)
		return 0, nil
	}
	return upto, nil
}

// dropSnapshotGen deletes the chunks of a snapshot generation that no
// header names (best effort: the next trim deletes what is left).
func (m *Member) dropSnapshotGen(ctx context.Context, gen string) {
	if gen == "" {
		return
	}
	m.cli.Delete(context.WithoutCancel(ctx), m.snapshotDataPrefix()+gen+"/", clientv3.WithPrefix())
}
