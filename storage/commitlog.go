package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// A node's shared commit log (docs/scale-out.md, "Automatic failover"). In
// a cluster with failover on, every batch of user writes a node commits is
// first written to the shared object store, under the node's name, and the
// write is acknowledged only after that object exists: so a node that dies
// with its disk leaves behind, in the shared store, everything it
// acknowledged since its tablets' last checkpoints. Another node rebuilds
// each tablet from its checkpoint (a span export: shared SSTables by
// reference plus the local levels' keys) and the log records after it.
//
// Object stores cannot append, so the log is a sequence of objects, each
// holding one group of records (concurrent appends share one object, as
// they share one WAL sync): "ebbtable-log-NODE-FIRST-LAST", FIRST and LAST
// the group's sequence numbers in 16 hex digits. Records are numbered from
// 1 without gaps, except where a group's write failed (its appends were
// refused, so nothing in it was acknowledged). Names are flat (no
// slashes): a shared directory lists one level only.
//
// A catalog ("ebbtable-catalog-NODE-ROUND") lists the node's checkpoints;
// each round writes a new one under a higher number, so a crash in the
// middle of writing leaves the previous one whole.

// CommitLogOptions configures OpenCommitLog.
type CommitLogOptions struct {
	// Store is the shared object store. Required.
	Store ObjectStore
	// Node names the log's owner; no slashes, spaces or dashes are needed,
	// but the name must not be a prefix of another node's followed by a
	// dash (node ids are whole words, so "n1" and "n10" are told apart).
	Node string
	// Fence, when set, is asked after each group is durable: an error
	// refuses the group's appends (they are in the log, but not
	// acknowledged), so a node whose lease may have expired acknowledges
	// nothing another node's recovery could miss.
	Fence func() error
	// Tag, when set, is asked at each append and stored with the record
	// (a cluster node's applied schema log position: a take-over learns
	// which schema changes the dead node had applied).
	Tag func() uint64
}

// CommitLog is one node's commit log in the shared store. Append is safe
// for concurrent use.
type CommitLog struct {
	st    ObjectStore
	node  string
	fence func() error
	tag   func() uint64

	mu       sync.Mutex
	next     uint64 // the next sequence number
	queue    []*logAppend
	flushing bool
	// applied tracks records finished (applied to the engine, or failed)
	// above the watermark done: every record <= done is finished.
	done     uint64
	finished map[uint64]bool
	appended uint64 // records appended in all (for tests and metrics)
	groups   uint64
	bytes    uint64
}

type logAppend struct {
	seq  uint64
	tag  uint64
	repr []byte
	err  chan error
}

// Object name prefixes.
func logPrefix(node string) string     { return "ebbtable-log-" + node + "-" }
func catalogPrefix(node string) string { return "ebbtable-catalog-" + node + "-" }

// CheckpointName names checkpoint i of a round of node's.
func CheckpointName(node string, round uint64, i int) string {
	return fmt.Sprintf("ebbtable-ckpt-%s-%016x-%d", node, round, i)
}

func checkpointPrefix(node string) string { return "ebbtable-ckpt-" + node + "-" }

// OpenCommitLog opens node's log, continuing after its newest record (or
// the newest catalog's Next, when the log was truncated whole).
func OpenCommitLog(opts CommitLogOptions) (*CommitLog, error) {
	if opts.Store == nil || opts.Node == "" {
		return nil, errors.New("ebbtable: commit log: a store and a node id are required")
	}
	l := &CommitLog{st: opts.Store, node: opts.Node, fence: opts.Fence, tag: opts.Tag, finished: map[uint64]bool{}}
	objs, err := listLog(opts.Store, opts.Node)
	if err != nil {
		return nil, err
	}
	last := uint64(0)
	for _, o := range objs {
		last = max(last, o.last)
	}
	// The newest object may be torn (the last process died writing it;
	// nothing in it was acknowledged): delete it, so that it does not sit
	// between whole objects once the log goes on. Its numbers stay used.
	if n := len(objs); n > 0 {
		b, err := GetObject(context.Background(), opts.Store, objs[n-1].name)
		if err == nil {
			_, err = decodeLogObject(b)
		}
		if err != nil {
			if derr := opts.Store.Delete(objs[n-1].name); derr != nil && !opts.Store.IsNotExistError(derr) {
				return nil, fmt.Errorf("ebbtable: commit log: remove torn %s: %w", objs[n-1].name, derr)
			}
		}
	}
	cat, ok, err := ReadCatalog(opts.Store, opts.Node)
	if err != nil {
		return nil, err
	}
	if ok && cat.Next > last+1 {
		last = cat.Next - 1
	}
	l.next, l.done = last+1, last
	return l, nil
}

// Append writes repr as the log's next record and returns its sequence
// number once it is durable in the shared store (and the fence held).
// The caller applies the batch, then calls Finished.
func (l *CommitLog) Append(repr []byte) (uint64, error) {
	a := &logAppend{repr: repr, err: make(chan error, 1)}
	if l.tag != nil {
		a.tag = l.tag()
	}
	l.mu.Lock()
	a.seq = l.next
	l.next++
	l.queue = append(l.queue, a)
	lead := !l.flushing
	if lead {
		l.flushing = true
	}
	l.mu.Unlock()
	if lead {
		l.flush(a)
	}
	if err := <-a.err; err != nil {
		l.Finished(a.seq)
		return 0, err
	}
	return a.seq, nil
}

// flush writes queued groups, one flusher at a time, so groups are
// written in order. A writer that became the flusher (self) writes the
// group holding its own record, then hands the rest to a new flusher, so
// it is not kept writing others' records under a steady load.
func (l *CommitLog) flush(self *logAppend) {
	for {
		l.mu.Lock()
		group := l.queue
		l.queue = nil
		if len(group) == 0 {
			l.flushing = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		err := l.writeGroup(group)
		if err == nil && l.fence != nil {
			err = l.fence()
		}
		mine := false
		for _, a := range group {
			a.err <- err
			mine = mine || a == self
		}
		if mine {
			l.mu.Lock()
			if len(l.queue) == 0 {
				l.flushing = false
			} else {
				go l.flush(nil)
			}
			l.mu.Unlock()
			return
		}
	}
}

// logMagic starts a log object: the magic, then records (uvarint seq,
// uvarint tag, uvarint length, bytes), then a CRC-32C of everything
// before it.
const logMagic = "ebblog2\n"

func (l *CommitLog) writeGroup(group []*logAppend) error {
	n := len(logMagic) + 4
	for _, a := range group {
		n += len(a.repr) + 3*binary.MaxVarintLen64
	}
	buf := make([]byte, 0, n)
	buf = append(buf, logMagic...)
	for _, a := range group {
		buf = binary.AppendUvarint(buf, a.seq)
		buf = binary.AppendUvarint(buf, a.tag)
		buf = binary.AppendUvarint(buf, uint64(len(a.repr)))
		buf = append(buf, a.repr...)
	}
	buf = binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
	name := fmt.Sprintf("%s%016x-%016x", logPrefix(l.node), group[0].seq, group[len(group)-1].seq)
	if err := PutObject(l.st, name, buf); err != nil {
		// A partial object would sit between whole ones: remove it (its
		// records are refused, so none was acknowledged).
		l.st.Delete(name)
		return fmt.Errorf("ebbtable: commit log: %w", err)
	}
	l.mu.Lock()
	l.appended += uint64(len(group))
	l.groups++
	l.bytes += uint64(len(buf))
	l.mu.Unlock()
	return nil
}

// Finished records that record seq is applied to the engine (or will
// never be): CommittedThrough moves past it.
func (l *CommitLog) Finished(seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq <= l.done {
		return
	}
	l.finished[seq] = true
	for l.finished[l.done+1] {
		delete(l.finished, l.done+1)
		l.done++
	}
}

// CommittedThrough is the highest sequence number s such that every
// record up to s is applied to the engine: a checkpoint taken after
// reading it holds every one of them.
func (l *CommitLog) CommittedThrough() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// Next is the sequence number the next record will get.
func (l *CommitLog) Next() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// CommitLogStats counts a log's appends since it opened.
type CommitLogStats struct {
	Records, Groups, Bytes uint64
}

// Stats returns the log's counts.
func (l *CommitLog) Stats() CommitLogStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return CommitLogStats{Records: l.appended, Groups: l.groups, Bytes: l.bytes}
}

// Truncate deletes the log objects holding only records up to upTo.
func (l *CommitLog) Truncate(upTo uint64) error {
	objs, err := listLog(l.st, l.node)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if o.last <= upTo {
			if err := l.st.Delete(o.name); err != nil && !l.st.IsNotExistError(err) {
				return err
			}
		}
	}
	return nil
}

type logObject struct {
	name        string
	first, last uint64
}

// listLog lists node's log objects in sequence order.
func listLog(st ObjectStore, node string) ([]logObject, error) {
	p := logPrefix(node)
	names, err := st.List(p, "")
	if err != nil {
		return nil, fmt.Errorf("ebbtable: commit log: list: %w", err)
	}
	var out []logObject
	for _, n := range names {
		n = strings.TrimPrefix(n, p) // stores trim it; a shared directory does not
		a, b, ok := strings.Cut(n, "-")
		if !ok || len(a) != 16 || len(b) != 16 {
			continue
		}
		first, err1 := strconv.ParseUint(a, 16, 64)
		last, err2 := strconv.ParseUint(b, 16, 64)
		if err1 != nil || err2 != nil || last < first {
			continue
		}
		out = append(out, logObject{name: p + n, first: first, last: last})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].first < out[j].first })
	return out, nil
}

// ErrLogDamaged: a log object other than the newest is unreadable, so
// acknowledged writes may be missing.
var ErrLogDamaged = errors.New("ebbtable: commit log damaged")

// ReadCommitLog calls fn with each record of node's log numbered above
// after, in order, with its tag. The newest object may be incomplete (its writer died
// while writing it, so nothing in it was acknowledged): it is skipped. An
// earlier damaged object is ErrLogDamaged.
func ReadCommitLog(ctx context.Context, st ObjectStore, node string, after uint64, fn func(seq, tag uint64, repr []byte) error) error {
	objs, err := listLog(st, node)
	if err != nil {
		return err
	}
	for i, o := range objs {
		if o.last <= after {
			continue
		}
		b, err := GetObject(ctx, st, o.name)
		if err != nil {
			return fmt.Errorf("ebbtable: commit log: read %s: %w", o.name, err)
		}
		recs, err := decodeLogObject(b)
		if err != nil {
			if i == len(objs)-1 {
				return nil
			}
			return fmt.Errorf("%w: %s: %v", ErrLogDamaged, o.name, err)
		}
		for _, r := range recs {
			if r.seq > after {
				if err := fn(r.seq, r.tag, r.repr); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

type logRecord struct {
	seq  uint64
	tag  uint64
	repr []byte
}

func decodeLogObject(b []byte) ([]logRecord, error) {
	if len(b) < len(logMagic)+4 || !bytes.HasPrefix(b, []byte(logMagic)) {
		return nil, errors.New("not a log object")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errors.New("checksum mismatch")
	}
	body = body[len(logMagic):]
	var out []logRecord
	for len(body) > 0 {
		seq, k := binary.Uvarint(body)
		if k <= 0 {
			return nil, errors.New("bad record")
		}
		body = body[k:]
		tag, k := binary.Uvarint(body)
		if k <= 0 {
			return nil, errors.New("bad record")
		}
		body = body[k:]
		n, k := binary.Uvarint(body)
		if k <= 0 || n > uint64(len(body)-k) {
			return nil, errors.New("bad record")
		}
		out = append(out, logRecord{seq: seq, tag: tag, repr: body[k : k+int(n)]})
		body = body[k+int(n):]
	}
	return out, nil
}

// CommitCatalog lists a node's tablet checkpoints: with its log after
// each entry's After, everything the node acknowledged in the entry's
// span.
type CommitCatalog struct {
	Node  string `json:"node"`
	Round uint64 `json:"round"`
	// Truncated: the log's records up to it may be deleted. A span no
	// entry covers had no rows the node held at the round (a tablet it
	// got since came with a checkpoint of its own, or was new): its base
	// is empty and its records are those after Truncated.
	Truncated uint64 `json:"truncated"`
	// Next is the log's next sequence number when the catalog was written.
	Next uint64 `json:"next"`
	// Tag is the log's tag read before the round's checkpoints were taken
	// (their content reflects at least it).
	Tag     uint64         `json:"tag"`
	Entries []CatalogEntry `json:"entries"`
}

// CatalogEntry is one tablet checkpoint.
type CatalogEntry struct {
	Table    string `json:"table"` // "projects/P/instances/I/tables/T"
	TableID  uint64 `json:"table_id"`
	StartRow []byte `json:"start"`
	EndRow   []byte `json:"end"` // empty: to the table's end
	// After: the checkpoint holds every record up to After (some later
	// ones too; replaying those again changes nothing).
	After  uint64 `json:"after"`
	Object string `json:"object"`
	// Tombstones names the object holding the span's replication
	// tombstones (outside the cell space, so not in the export), if any.
	Tombstones string `json:"tombstones,omitempty"`
	// Changes names the object holding the span's change-stream records
	// (read after After, with their positions), if any.
	Changes string `json:"changes,omitempty"`
	// ChangesPrev names the span's earlier objects of records, oldest
	// first: a round writes only the records committed past the last
	// round's ChangesClosed (server/clusterfailchanges.go). Records may
	// repeat across objects (the same position and value).
	ChangesPrev []string `json:"changes_prev,omitempty"`
	// ChangesClosed is the change streams' closed timestamp taken before
	// Changes was read: every record committed at or before it is in
	// Changes or ChangesPrev.
	ChangesClosed int64 `json:"changes_closed,omitempty"`
	// Deleted marks the checkpoint of a table deleted within its undelete
	// retention (kept for an undelete).
	Deleted bool `json:"deleted,omitempty"`
}

// WriteCatalog stores cat as node's newest catalog, then deletes the
// older ones.
func WriteCatalog(st ObjectStore, cat CommitCatalog) error {
	b, err := json.Marshal(cat)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s%016x", catalogPrefix(cat.Node), cat.Round)
	if err := PutObject(st, name, b); err != nil {
		return fmt.Errorf("ebbtable: commit catalog: %w", err)
	}
	rounds, err := listCatalogs(st, cat.Node)
	if err != nil {
		return err
	}
	for _, r := range rounds {
		if r.round < cat.Round {
			st.Delete(r.name)
		}
	}
	return nil
}

type catalogObject struct {
	name  string
	round uint64
}

func listCatalogs(st ObjectStore, node string) ([]catalogObject, error) {
	p := catalogPrefix(node)
	names, err := st.List(p, "")
	if err != nil {
		return nil, fmt.Errorf("ebbtable: commit catalog: list: %w", err)
	}
	var out []catalogObject
	for _, n := range names {
		n = strings.TrimPrefix(n, p)
		if r, err := strconv.ParseUint(n, 16, 64); err == nil && len(n) == 16 {
			out = append(out, catalogObject{name: p + n, round: r})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].round > out[j].round })
	return out, nil
}

// ReadCatalog returns node's newest readable catalog; ok false: none.
func ReadCatalog(st ObjectStore, node string) (CommitCatalog, bool, error) {
	rounds, err := listCatalogs(st, node)
	if err != nil {
		return CommitCatalog{}, false, err
	}
	for _, r := range rounds {
		b, err := GetObject(context.Background(), st, r.name)
		if err != nil {
			continue
		}
		var cat CommitCatalog
		if json.Unmarshal(b, &cat) == nil && cat.Node == node {
			return cat, true, nil
		}
	}
	return CommitCatalog{}, false, nil
}

// DeleteCatalogs deletes node's catalogs: a node that runs without
// failover says so, since its tablets cannot be rebuilt from what it
// wrote before.
func DeleteCatalogs(st ObjectStore, node string) error {
	cs, err := listCatalogs(st, node)
	if err != nil {
		return err
	}
	for _, c := range cs {
		if err := st.Delete(c.name); err != nil && !st.IsNotExistError(err) {
			return err
		}
	}
	return nil
}

// DeleteCheckpoints deletes node's checkpoint objects not in keep.
func DeleteCheckpoints(st ObjectStore, node string, keep map[string]bool) error {
	p := checkpointPrefix(node)
	names, err := st.List(p, "")
	if err != nil {
		return err
	}
	for _, n := range names {
		full := p + strings.TrimPrefix(n, p)
		if !keep[full] {
			if err := st.Delete(full); err != nil && !st.IsNotExistError(err) {
				return err
			}
		}
	}
	return nil
}

// PutObject writes an object whole.
func PutObject(st ObjectStore, name string, b []byte) error {
	w, err := st.CreateObject(name)
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// GetObject reads an object whole.
func GetObject(ctx context.Context, st ObjectStore, name string) ([]byte, error) {
	r, n, err := st.ReadObject(ctx, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b := make([]byte, n)
	if n > 0 {
		if err := r.ReadAt(ctx, b, 0); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	return b, nil
}
