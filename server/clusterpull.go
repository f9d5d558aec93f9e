package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Pulling into a cluster of several nodes (docs/replication.md, "Pulling
// into a cluster of several nodes").
//
// One node pulls for the whole cluster: the live node with the smallest id
// (as the backup totals are reported, clusterbackupmetrics.go). Its
// replication.Replicator runs the pullers as a process alone does, but
// applies through a clusterSink:
//   - records are cut by tablet and sent to each tablet's owner
//     (Cluster/ApplyReplicated, node credential), which applies them
//     last-writer-wins under the tablet's gate, syncs its WAL and answers;
//     a tablet that moved or split meanwhile is routed again;
//   - the checkpoints (per peer and table) are kept in etcd
//     (clusteretcd.PutReplCheckpoint) and advanced only after every owner
//     acknowledged; a new puller (the old one died or left) starts from
//     them, and records applied twice change nothing;
//   - a peer's schema changes go through the schema log (ReplCreateTable,
//     ReplModifyFamilies, ReplDeleteTable, carrying the peer's stamp), so
//     every node applies each once, in log order, with the same stamp;
//   - the commit time below which tombstones may go is published in etcd
//     (repl/trim) and every node trims its own.
// The other nodes' pullers wait (replication.Options.Pulls).

// Schema log methods of a peer's schema changes.
const (
	replCreateTable    = "ReplCreateTable"
	replModifyFamilies = "ReplModifyFamilies"
	replDeleteTable    = "ReplDeleteTable"
)

// ckptSaveEvery bounds how often a checkpoint that only moved past an
// empty stretch is written to etcd (one with records is written at once).
const ckptSaveEvery = time.Second

// applyRetries is how often records whose tablet moved are routed again
// within one pull.
const applyRetries = 20

// clusterSink is a cluster's replication.Sink.
type clusterSink struct {
	s *Server
	c *clusterMember

	mu      sync.Mutex
	leading bool
	// loaded: the origin's checkpoints were read from etcd since this node
	// became the puller.
	loaded map[string]bool
	ckpt   map[ckptKey]ckptValue
	// trimmed is the tombstone bound this node last trimmed at.
	trimmed int64
	// What this node shared with the others, or took from etcd
	// (clusterreplshare.go).
	thruShared map[string]time.Time
	metaShared map[string]string
	metaRevs   map[string]int64
	// iamSeen: the stamp of each peer policy last adopted or passed over
	// (clusteriamrepl.go).
	iamSeen map[string]storage.Stamp
}

type ckptKey struct{ origin, table string }

// ckptValue is a checkpoint as etcd keeps it: the table id (a table
// created again under the name starts over) and the position.
type ckptValue struct {
	TableID  uint64                `json:"table_id"`
	Position changestream.Position `json:"position"`
	saved    time.Time
}

// pullSink is the replication sink of a cluster of several nodes, nil
// for a process alone.
func (s *Server) pullSink() (replication.Sink, func() bool) {
	if s.cluster == nil {
		return nil, nil
	}
	k := &clusterSink{s: s, c: s.cluster, loaded: map[string]bool{}, ckpt: map[ckptKey]ckptValue{},
		thruShared: map[string]time.Time{}, metaShared: map[string]string{}, metaRevs: map[string]int64{}}
	s.cluster.sink = k
	return k, k.pulls
}

// pullsHere: this node is the live node with the smallest id.
func (c *clusterMember) pullsHere() bool {
	if c.m == nil || !c.m.Live() {
		return false
	}
	if _, live := c.m.Node(c.opts.NodeID); !live {
		return false
	}
	for _, n := range c.m.Nodes() {
		if n.ID < c.opts.NodeID {
			return false
		}
	}
	return true
}

// pulls says whether this node pulls now; on becoming the puller it
// forgets what it knew of the checkpoints (another node advanced them).
func (k *clusterSink) pulls() bool {
	lead := k.c.pullsHere()
	k.mu.Lock()
	defer k.mu.Unlock()
	if lead != k.leading {
		k.leading = lead
		k.loaded = map[string]bool{}
		k.ckpt = map[ckptKey]ckptValue{}
		if lead {
			k.s.log.Info("replication: this node pulls for the cluster", "node", k.c.opts.NodeID)
		}
	}
	return lead
}

func (k *clusterSink) Tables(instance string) []*table.Meta { return k.s.engine.Tables(instance) }
func (k *clusterSink) Table(instance, name string) (*table.Meta, error) {
	return k.s.engine.Table(instance, name)
}
func (k *clusterSink) DroppedTables() ([]table.DroppedTable, error) {
	return k.s.engine.DroppedTables()
}

func etcdCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// Checkpoint is the cluster's checkpoint of a table for a peer, from etcd.
func (k *clusterSink) Checkpoint(m *table.Meta, origin string) (changestream.Position, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.loaded[origin] {
		ctx, cancel := etcdCtx()
		all, err := k.c.m.ReplCheckpoints(ctx, origin)
		cancel()
		if err != nil {
			return changestream.Position{}, false, err
		}
		for name, b := range all {
			var v ckptValue
			if err := json.Unmarshal(b, &v); err != nil {
				return changestream.Position{}, false, fmt.Errorf("ebbtable: replication checkpoint of %s for %s in etcd: %w", name, origin, err)
			}
			v.saved = k.s.opts.Clock.Now()
			k.ckpt[ckptKey{origin, name}] = v
		}
		k.loaded[origin] = true
	}
	v, ok := k.ckpt[ckptKey{origin, tableRef{instance: m.Instance, table: m.Name}.name()}]
	if !ok || v.TableID != m.ID {
		return changestream.Position{}, false, nil
	}
	return v.Position, true, nil
}

// ApplyReplicated sends a table's records to their owners and, once every
// owner answered, advances the table's checkpoint.
func (k *clusterSink) ApplyReplicated(m *table.Meta, origin string, recs []changestream.Record, through changestream.Position) (table.ReplicaStats, error) {
	name := tableRef{instance: m.Instance, table: m.Name}.name()
	var st table.ReplicaStats
	if len(recs) > 0 {
		var err error
		if st, err = k.route(name, origin, recs); err != nil {
			return st, err
		}
	}
	return st, k.save(origin, name, m.ID, through, len(recs) > 0)
}

// save records a checkpoint: in etcd at once after records were applied,
// at most every ckptSaveEvery when it only moved past an empty stretch
// (a new puller then pulls that stretch again, which is empty).
func (k *clusterSink) save(origin, name string, id uint64, p changestream.Position, now bool) error {
	key := ckptKey{origin, name}
	at := k.s.opts.Clock.Now()
	k.mu.Lock()
	old, had := k.ckpt[key]
	v := ckptValue{TableID: id, Position: p, saved: old.saved}
	if !now && had && old.TableID == id && at.Sub(old.saved) < ckptSaveEvery {
		k.ckpt[key] = v
		k.mu.Unlock()
		return nil
	}
	k.mu.Unlock()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := etcdCtx()
	defer cancel()
	if err := k.c.m.PutReplCheckpoint(ctx, origin, name, b); err != nil {
		return err
	}
	v.saved = at
	k.mu.Lock()
	k.ckpt[key] = v
	k.mu.Unlock()
	return nil
}

// route sends records to the owners of their rows' tablets, all tablets at
// once, and routes those of a tablet that moved or split again.
func (k *clusterSink) route(name, origin string, recs []changestream.Record) (table.ReplicaStats, error) {
	var (
		mu    sync.Mutex
		total table.ReplicaStats
	)
	err := routeToOwners(k.c, name, recs,
		status.Errorf(codes.Unavailable, "ebbtable: table %s has no tablets in the cluster yet", name),
		func(r changestream.Record) ([]byte, error) { return r.RowKey, nil },
		func(d tablets.Directory, i int, group []changestream.Record) error {
			st, err := k.send(d, d.Tablets[i], origin, group)
			if err == nil {
				mu.Lock()
				total.Applied += st.Applied
				total.Superseded += st.Superseded
				total.Skipped += st.Skipped
				mu.Unlock()
			}
			return err
		})
	return total, err
}

// send has one tablet's owner apply records of its rows.
func (k *clusterSink) send(d tablets.Directory, t tablets.Tablet, origin string, recs []changestream.Record) (table.ReplicaStats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if t.Owner == k.c.opts.NodeID {
		return k.c.applyOwned(ctx, d.Table, t.ID, d.Revision, origin, recs)
	}
	n, ok := k.c.m.Node(t.Owner)
	if !ok {
		return table.ReplicaStats{}, status.Errorf(codes.Unavailable, "ebbtable: %s: its node is down; replication into this cluster waits for it", t)
	}
	cc, err := k.c.conn(n.Addr)
	if err != nil {
		return table.ReplicaStats{}, status.Errorf(codes.Unavailable, "ebbtable: node %s at %s: %v", n.ID, n.Addr, err)
	}
	req := &clusterpb.ApplyReplicatedRequest{Table: d.Table, Tablet: t.ID, Revision: d.Revision, Origin: origin,
		Records: make([]*clusterpb.ChangeRecord, 0, len(recs))}
	for _, r := range recs {
		req.Records = append(req.Records, &clusterpb.ChangeRecord{Commit: r.Commit, Tiebreaker: r.Tiebreaker, Index: r.Index, Record: r.Encode()})
	}
	resp, err := clusterpb.NewClusterClient(cc).ApplyReplicated(ctx, req)
	if err != nil {
		return table.ReplicaStats{}, err
	}
	return table.ReplicaStats{Applied: int(resp.GetApplied()), Superseded: int(resp.GetSuperseded()), Skipped: int(resp.GetSkipped())}, nil
}

// ApplyReplicated is an owner's half: a peer's records of rows of a tablet
// this node owns.
func (s *clusterService) ApplyReplicated(ctx context.Context, req *clusterpb.ApplyReplicatedRequest) (*clusterpb.ApplyReplicatedResponse, error) {
	if s.c.m == nil {
		return nil, status.Error(codes.Unavailable, "ebbtable: this node has not joined its cluster yet; retry")
	}
	if req.GetOrigin() == "" || len(req.GetRecords()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: ApplyReplicated needs an origin and records")
	}
	recs := make([]changestream.Record, 0, len(req.GetRecords()))
	for _, r := range req.GetRecords() {
		rec, err := changestream.Decode(r.GetRecord())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: change record: %v", err)
		}
		rec.Position = changestream.Position{Commit: r.GetCommit(), Tiebreaker: r.GetTiebreaker(), Index: r.GetIndex()}
		recs = append(recs, rec)
	}
	st, err := s.c.applyOwned(ctx, req.GetTable(), req.GetTablet(), req.GetRevision(), req.GetOrigin(), recs)
	if err != nil {
		return nil, err
	}
	return &clusterpb.ApplyReplicatedResponse{Applied: int64(st.Applied), Superseded: int64(st.Superseded), Skipped: int64(st.Skipped)}, nil
}

// applyOwned applies records of rows of one tablet this node owns, holding
// the tablet's gate (a move waits for them), and makes them durable.
func (c *clusterMember) applyOwned(ctx context.Context, name string, tablet uint64, rev int64, origin string, recs []changestream.Record) (table.ReplicaStats, error) {
	var st table.ReplicaStats
	ref, err := parseTable(name)
	if err != nil {
		return st, toStatus(err)
	}
	c.catchUpTo(ctx, rev)
	owned := func() (tablets.Tablet, error) {
		d, ok := c.m.Directory(name)
		if ok {
			for _, t := range d.Tablets {
				if t.ID == tablet && t.Owner == c.opts.NodeID {
					return t, nil
				}
			}
		}
		return tablets.Tablet{}, status.Errorf(codes.Unavailable, "ebbtable: tablet %d of %s is not owned by node %s (it moved or split); route again", tablet, name, c.opts.NodeID)
	}
	t, err := owned()
	if err != nil {
		return st, err
	}
	for _, r := range recs {
		if !t.Contains(r.RowKey) {
			return st, status.Errorf(codes.Unavailable, "ebbtable: row %q is not in %s; route again", r.RowKey, t)
		}
	}
	if !c.m.Live() {
		return st, status.Errorf(codes.Unavailable, "ebbtable: node %s does not hold its lease now; retry", c.opts.NodeID)
	}
	g := c.gate(name, tablet)
	g.RLock()
	defer g.RUnlock()
	if _, err := owned(); err != nil {
		return st, err
	}
	m, err := c.s.engine.Table(ref.instance, ref.table)
	if err != nil {
		return st, status.Errorf(codes.Unavailable, "ebbtable: %v (this node has not applied the schema change yet); retry", err)
	}
	if st, err = c.s.engine.ApplyReplicated(m, origin, recs, recs[len(recs)-1].Position); err != nil {
		return st, toStatus(err)
	}
	// The puller advances the cluster's checkpoint once this answers.
	return st, toStatus(c.s.engine.SyncWAL())
}

// TrimTombstones publishes the bound for every node and trims here.
func (k *clusterSink) TrimTombstones(below int64) (int, error) {
	ctx, cancel := etcdCtx()
	defer cancel()
	if err := k.c.m.PutReplTrim(ctx, below); err != nil {
		return 0, err
	}
	return k.trimTo(below)
}

func (k *clusterSink) trimTo(below int64) (int, error) {
	k.mu.Lock()
	if below <= k.trimmed {
		k.mu.Unlock()
		return 0, nil
	}
	k.trimmed = below
	k.mu.Unlock()
	return k.s.engine.TrimTombstones(below)
}

// trimFromEtcd trims this node's tombstones to the bound the puller
// published (clusterPeerLoop calls it).
func (k *clusterSink) trimFromEtcd(ctx context.Context) error {
	below, err := k.c.m.ReplTrim(ctx)
	if err != nil || below <= 0 {
		return err
	}
	_, err = k.trimTo(below)
	return err
}

// The schema changes a peer brings, through the schema log.

// replSchemaChange is the payload of the Repl* schema log entries.
type replSchemaChange struct {
	Spec  *table.TableSpec  `json:"spec,omitempty"`
	Mods  []table.FamilyMod `json:"mods,omitempty"`
	Stamp storage.Stamp     `json:"stamp"`
}

func (k *clusterSink) propose(instance, name, method string, ch replSchemaChange, op clusteretcd.DirOp) error {
	b, err := json.Marshal(ch)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), allAppliedWait+10*time.Second)
	defer cancel()
	_, err = k.c.propose(ctx, method, tableRef{instance: instance, table: name}, wrapperspb.Bytes(b), op)
	switch status.Code(err) {
	case codes.AlreadyExists:
		return fmt.Errorf("%w: %v", table.ErrTableExists, err)
	case codes.NotFound:
		return fmt.Errorf("%w: %v", table.ErrTableNotFound, err)
	}
	return err
}

// CreateTable creates a table a peer created, with a directory placed
// as CreateTable places one.
func (k *clusterSink) CreateTable(instance, name string, spec table.TableSpec) (*table.Meta, error) {
	ref := tableRef{instance: instance, table: name}
	err := k.propose(instance, name, replCreateTable, replSchemaChange{Spec: &spec, Stamp: spec.Stamp}, clusteretcd.DirOp{Create: func(seq uint64) (tablets.Directory, error) {
		owners, err := tablets.Place(len(spec.Splits)+1, k.c.m.Nodes(), k.c.m.Directories())
		if err != nil {
			return tablets.Directory{}, err
		}
		return tablets.NewDirectory(ref.name(), seq, spec.Splits, owners)
	}})
	if err != nil {
		return nil, err
	}
	return k.s.engine.Table(instance, name)
}

// ModifyFamiliesAt changes a table's families as a peer did.
func (k *clusterSink) ModifyFamiliesAt(instance, name string, mods []table.FamilyMod, st storage.Stamp) (*table.Meta, error) {
	if err := k.propose(instance, name, replModifyFamilies, replSchemaChange{Mods: mods, Stamp: st}, clusteretcd.DirOp{}); err != nil {
		return nil, err
	}
	return k.s.engine.Table(instance, name)
}

// DeleteTableAt drops a table a peer dropped (its directory is kept for an
// undelete, as DeleteTable keeps it).
func (k *clusterSink) DeleteTableAt(instance, name string, st storage.Stamp) error {
	return k.propose(instance, name, replDeleteTable, replSchemaChange{Stamp: st},
		clusteretcd.DirOp{Drop: true, Keep: true, KeepFor: k.c.keepDeletedFor()})
}

// applyReplSchema applies a Repl* schema log entry on this node; ok false:
// not one.
func (c *clusterMember) applyReplSchema(e clusteretcd.SchemaEntry) (applyResult, bool) {
	switch e.Method {
	case replCreateTable, replModifyFamilies, replDeleteTable:
	case replImportTable:
		return c.applyReplImport(e), true // clusterjoin.go
	default:
		return applyResult{}, false
	}
	var w wrapperspb.BytesValue
	if err := proto.Unmarshal(e.Request, &w); err != nil {
		return applyResult{err: err}, true
	}
	var ch replSchemaChange
	if err := json.Unmarshal(w.GetValue(), &ch); err != nil {
		return applyResult{err: err}, true
	}
	ref, err := parseTable(e.Table)
	if err != nil {
		return applyResult{err: err}, true
	}
	eng := c.s.engine
	m, merr := eng.Table(ref.instance, ref.table)
	switch e.Method {
	case replCreateTable:
		if ch.Spec == nil {
			return applyResult{err: fmt.Errorf("%w: %s without a table", errInvalid, e.Method)}, true
		}
		if merr == nil && m.ID == e.TableID {
			break // the same entry applied again
		}
		spec := *ch.Spec
		spec.ID = e.TableID
		if _, err := eng.CreateTable(ref.instance, ref.table, spec); err != nil {
			return applyResult{err: toStatus(err)}, true
		}
		if err := c.s.forgetTableMeta(ref); err != nil {
			return applyResult{err: toStatus(err)}, true
		}
	case replModifyFamilies:
		if merr != nil {
			return applyResult{err: toStatus(merr)}, true
		}
		if !m.Stamp.Less(ch.Stamp) {
			break // this node has it already, or a later change
		}
		if _, err := eng.ModifyFamiliesAt(ref.instance, ref.table, ch.Mods, ch.Stamp); err != nil {
			return applyResult{err: toStatus(err)}, true
		}
	case replDeleteTable:
		if errors.Is(merr, table.ErrTableNotFound) || merr == nil && !m.Stamp.Less(ch.Stamp) {
			break
		}
		if err := eng.DeleteTableAt(ref.instance, ref.table, ch.Stamp); err != nil {
			return applyResult{err: toStatus(err)}, true
		}
	}
	return applyResult{resp: &emptypb.Empty{}}, true
}

// ingestTombstones keeps a moved span's replication tombstones (the
// target's half of a move), so a peer's write older than a delete made
// before the move, arriving after it, stays deleted here as on the source.
func (c *clusterMember) ingestTombstones(req *clusterpb.IngestSpanRequest) error {
	if len(req.GetTombstones()) == 0 {
		return nil
	}
	ref, err := parseTable(req.GetTable())
	if err != nil {
		return toStatus(err)
	}
	return toStatus(c.s.engine.PutTombstones(ref.instance, ref.table, []table.RowSpan{{Start: req.GetStart(), End: req.GetEnd()}}, req.GetTombstones()))
}

// replCheckpoint is where this cluster has applied a peer's records of a
// table (what consistency checks, replication status and diff ask): the
// engine's checkpoint, or in a cluster of several nodes the cluster's.
func (s *Server) replCheckpoint(m *table.Meta, origin string) (changestream.Position, bool, error) {
	if s.cluster == nil || s.cluster.sink == nil {
		return s.engine.Checkpoint(m, origin)
	}
	return s.cluster.sink.current(m, origin)
}

// current is the cluster's checkpoint of a table: this node's own when it
// pulls (ahead of etcd by at most an empty stretch), else etcd's.
func (k *clusterSink) current(m *table.Meta, origin string) (changestream.Position, bool, error) {
	name := tableRef{instance: m.Instance, table: m.Name}.name()
	k.mu.Lock()
	if k.leading && k.loaded[origin] {
		v, ok := k.ckpt[ckptKey{origin, name}]
		k.mu.Unlock()
		return v.Position, ok && v.TableID == m.ID, nil
	}
	k.mu.Unlock()
	ctx, cancel := etcdCtx()
	defer cancel()
	b, err := k.c.m.ReplCheckpoint(ctx, origin, name)
	if err != nil || b == nil {
		return changestream.Position{}, false, err
	}
	var v ckptValue
	if err := json.Unmarshal(b, &v); err != nil {
		return changestream.Position{}, false, err
	}
	return v.Position, v.TableID == m.ID, nil
}
