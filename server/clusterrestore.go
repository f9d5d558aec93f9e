package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/backup"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Restores in cluster mode (docs/scale-out.md, "Backups"): a long-running
// operation, run by the node that took the call (the coordinator), with
// only three small entries in the schema log, so a large restore holds no
// later schema change up.
//
//  1. RestoreTableBegin, appended in one etcd transaction with the new
//     table's directory (one tablet per part of the backup, placed like a
//     created table's; the entry's sequence number is the table id):
//     every node reserves the name and id (table.Restoring: nothing of
//     the table is visible yet). The name is taken cluster-wide from then.
//  2. Outside the log, the coordinator asks the owner of every tablet, in
//     parallel (Cluster/RestoreRows), to fetch its parts from the shared
//     store and ingest them into its reservation. An owner that is down or
//     no longer owns its rows is asked again (after the directory changes:
//     a failover take-over, a drain) until ClusterOptions.RestorePartWait
//     (--restore-part-wait) passes. The
//     operation's metadata shows the share of tablets done.
//  3. RestoreTableCommit: every node makes the table visible with the
//     backup's schema. A node that lacks some of its tablets' rows (it
//     restarted since it ingested them: an unfinished restore's cells are
//     removed at open) ingests them there first, so a node that failed
//     midway is recovered.
//
// If step 2 fails, RestoreTableAbort drops the directory and every node
// gives its reservation up (its ingested cells deleted): nothing of the
// table was ever visible. A coordinator that dies midway is found by the
// other nodes' backup expiry loop (its NODE/TOKEN no longer runs), which
// appends the abort.

// The schema log methods of a cluster restore. "RestoreTable" is the one
// entry older versions wrote (applied whole, inside the log).
const (
	restoreBegin  = "RestoreTableBegin"
	restoreCommit = "RestoreTableCommit"
	restoreAbort  = "RestoreTableAbort"
)

// restoreParallel bounds the tablets a coordinator asks for at once.
const restoreParallel = 8

// restoreEntry is the payload of the restore's schema log entries: the
// backup's record as it was when the restore was asked for (so a node
// needs only the backup's files), and the coordinator's NODE/TOKEN.
type restoreEntry struct {
	Instance  string          `json:"instance"`
	TableID   string          `json:"table_id"`
	Record    []byte          `json:"record"`
	Retention table.Retention `json:"retention"`
	Maker     string          `json:"maker,omitempty"`
	// ID is the table id the begin entry gave (in commit and abort).
	ID uint64 `json:"id,omitempty"`
	// Op names the restore's operation record in etcd
	// (clusterrestoreop.go); empty in older versions' entries.
	Op string `json:"op,omitempty"`
}

// localRestore is this node's part of a cluster restore under way.
type localRestore struct {
	ent restoreEntry
	mf  *backup.Manifest
	// mu: ingests hold it shared, commit and abort exclusively.
	mu   sync.RWMutex
	r    *table.Restoring // nil once committed or aborted
	done []backup.RowSpan // rows this process ingested
}

// RestoreTable restores a backup into a new table of the cluster.
func (a *clusterAdmin) RestoreTable(ctx context.Context, req *adminpb.RestoreTableRequest) (*longrunningpb.Operation, error) {
	c := a.c
	inst, err := parseInstance(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	name, err := parseBackup(req.GetBackup())
	if err != nil {
		return nil, toStatus(err)
	}
	if !tableIDRE.MatchString(req.GetTableId()) {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: table id %q must be 1-50 characters of [_a-zA-Z0-9][-_.a-zA-Z0-9]*", req.GetTableId())
	}
	retention, err := restoreRetention(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := c.needStore(); err != nil {
		return nil, err
	}
	ref := tableRef{instance: inst, table: req.GetTableId()}
	if _, ok := c.m.Directory(ref.name()); ok {
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: table %s already exists", ref.table)
	}
	if _, err := a.s.engine.Table(ref.instance, ref.table); err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: table %s already exists", ref.table)
	}
	token := randomID()
	maker := c.opts.NodeID + "/" + token
	runningBackups.Store(maker, true)
	rec, err := c.markRestoring(ctx, name, maker, true)
	if err != nil {
		runningBackups.Delete(maker)
		return nil, err
	}
	// Until the restore is committed everywhere (or given up), the backup
	// is marked as being read.
	unmark := func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := c.markRestoring(uctx, name, maker, false); err != nil && status.Code(err) != codes.NotFound {
			c.s.log.Warn("unmark a restored backup", "backup", name.String(), "err", err)
		}
		runningBackups.Delete(maker)
	}
	mf, _, err := backup.DecodeRecord(rec)
	if err != nil {
		unmark()
		return nil, status.Errorf(codes.DataLoss, "%v", err)
	}
	tableName := ref.name()
	opName := tableName + restoreOpMark + token
	ent := restoreEntry{Instance: inst, TableID: req.GetTableId(), Record: rec, Retention: retention, Maker: maker, Op: opName}
	payload, err := json.Marshal(ent)
	if err != nil {
		unmark()
		return nil, toStatus(err)
	}
	// One tablet per part of the backup, so each node fetches only its
	// tablets' files.
	var splits [][]byte
	for _, p := range mf.Parts {
		if len(p.Start) > 0 {
			splits = append(splits, p.Start)
		}
	}
	meta := &adminpb.RestoreTableMetadata{
		Name:       tableName,
		SourceType: adminpb.RestoreSourceType_BACKUP,
		SourceInfo: &adminpb.RestoreTableMetadata_BackupInfo{BackupInfo: backupInfoProto(mf)},
		Progress:   &adminpb.OperationProgress{StartTime: timestamppb.New(a.s.opts.Clock.Now())},
	}
	// The begin entry is appended before the call returns, so a name
	// taken meanwhile fails the call itself.
	e, err := c.m.AppendEntry(ctx, clusteretcd.SchemaEntry{Method: restoreBegin, Table: tableName, Request: payload, Origin: c.opts.NodeID},
		clusteretcd.DirOp{Create: func(seq uint64) (tablets.Directory, error) {
			owners, err := tablets.Place(len(splits)+1, c.m.Nodes(), c.m.Directories())
			if err != nil {
				return tablets.Directory{}, err
			}
			return tablets.NewDirectory(tableName, seq, splits, owners)
		},
			// The operation's record, in the same transaction: the
			// restore is never under way without it.
			Op: func(seq uint64) (string, []byte, error) {
				withID := ent
				withID.ID = seq
				v, err := newRestoreOp(opName, maker, withID, meta)
				return opName, v, err
			}})
	if err != nil {
		unmark()
	}
	switch {
	case errors.Is(err, clusteretcd.ErrTableExists):
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: table %s already exists", ref.table)
	case errors.Is(err, tablets.ErrNoNodes):
		return nil, status.Error(codes.Unavailable, err.Error())
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	ent.ID = e.TableID
	op, err := a.s.ops.pendingNamed(opName, meta)
	if err != nil {
		c.failRestore(ctx, ent, maker, err)
		unmark()
		return nil, err
	}
	var metaMu sync.Mutex
	if err := a.s.backups.Go(func(ctx context.Context) {
		t, err := c.runRestore(ctx, ref, e, ent, func(done, total int) {
			metaMu.Lock()
			defer metaMu.Unlock()
			p := &adminpb.OperationProgress{StartTime: meta.Progress.StartTime, ProgressPercent: int32(done * 100 / max(total, 1))}
			if p.ProgressPercent < meta.Progress.ProgressPercent {
				return
			}
			meta.Progress = p
			op.setMetadata(meta)
			if err := c.opProgress(ctx, opName, maker, meta); err != nil {
				c.s.log.Warn("write a restore's progress", "table", tableName, "err", err)
			}
		})
		// Unmarked before the operation ends: a client that deletes the
		// backup once its restore is done is not refused.
		unmark()
		a.s.backups.CountOp("restore", err)
		metaMu.Lock()
		defer metaMu.Unlock()
		if err != nil {
			c.s.log.Error("cluster restore failed", "table", tableName, "backup", mf.Name, "err", err)
			op.finish(nil, nil, toStatus(err))
			return
		}
		meta.Progress = &adminpb.OperationProgress{ProgressPercent: 100, StartTime: meta.Progress.StartTime, EndTime: timestamppb.New(a.s.opts.Clock.Now())}
		op.finish(t, meta, nil)
	}); err != nil {
		c.failRestore(ctx, ent, maker, err)
		unmark()
		return nil, toStatus(err)
	}
	return op.wait(a.s.opWait), nil
}

// setMetadata replaces a running operation's metadata (its progress).
func (p *pendingOp) setMetadata(meta *adminpb.RestoreTableMetadata) {
	m, err := anypb.New(meta)
	if err != nil {
		return
	}
	p.o.mu.Lock()
	defer p.o.mu.Unlock()
	if old, ok := p.o.ops[p.name]; ok && !old.Done {
		p.o.ops[p.name] = &longrunningpb.Operation{Name: p.name, Metadata: m}
	}
}

// runRestore is the coordinator's restore after the begin entry: the
// owners' ingests, then the commit (or, if they fail, the abort). Its
// operation record (clusterrestoreop.go) moves along: once it is moved to
// committing, the restore is committed, here or (if this node dies) by
// another node; a restore given up meanwhile by another node's sweep
// (this node was taken for gone) is not committed.
func (c *clusterMember) runRestore(ctx context.Context, ref tableRef, begin clusteretcd.SchemaEntry, ent restoreEntry, progress func(done, total int)) (*adminpb.Table, error) {
	res, err := c.waitApplied(ctx, begin.Seq)
	if err == nil {
		err = res.err
	}
	if err != nil {
		c.failRestore(ctx, ent, ent.Maker, err)
		return nil, err
	}
	return c.finishRestore(ctx, ref, begin, ent, progress)
}

// finishRestore is a restore's coordination once its begin entry is
// applied here: the owners' ingests, then the commit (or the abort). A
// node that takes over the restore of a dead coordinator starts here
// (resumeRestore, clusterrestoreop.go).
func (c *clusterMember) finishRestore(ctx context.Context, ref tableRef, begin clusteretcd.SchemaEntry, ent restoreEntry, progress func(done, total int)) (*adminpb.Table, error) {
	err := c.restoreParts(ctx, ref, begin, progress)
	if err == nil {
		err = c.opCommit(ctx, ent.Op, ent.Maker)
	}
	if err != nil {
		c.failRestore(ctx, ent, ent.Maker, err)
		return nil, err
	}
	if h := c.s.knobs().restoreCommitting.get(); h != nil { // tests
		h(c.opts.NodeID)
	}
	t, err := c.commitRestoreEntry(ctx, ref, ent)
	if ferr := c.opFinish(context.WithoutCancel(ctx), ent.Op, ent.Maker, t, err); ferr != nil {
		c.s.log.Warn("finish a restore's operation", "table", ref.name(), "err", ferr)
	}
	return t, err
}

// failRestore gives up a restore the coordinator (maker) runs: its
// operation fails (unless another node moved it on meanwhile), then the
// abort entry.
func (c *clusterMember) failRestore(ctx context.Context, ent restoreEntry, maker string, why error) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.opFinish(fctx, ent.Op, maker, nil, why); err != nil && !errors.Is(err, errOpMoved) {
		c.s.log.Warn("fail a restore's operation", "table", ent.TableID, "err", err)
	}
	rec, err := c.m.GetOpRecord(fctx, ent.Op)
	if err == nil {
		var r restoreOp
		if json.Unmarshal(rec.Value, &r) == nil && r.State != opFailed {
			return // taken over and committed by another node
		}
	}
	c.abortRestore(ctx, ent, why)
}

// abortRestore gives a restore up: its abort entry drops the directory
// and every node its reservation. Best effort (a restore left behind by
// a coordinator that could not append it is aborted by sweepRestores).
func (c *clusterMember) abortRestore(ctx context.Context, ent restoreEntry, why error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	ent.Record = nil // not needed to give up
	payload, err := json.Marshal(ent)
	if err != nil {
		return
	}
	name := tableRef{instance: ent.Instance, table: ent.TableID}.name()
	if d, ok := c.m.Directory(name); !ok || d.TableID != ent.ID {
		return // given up already
	}
	e, err := c.m.AppendEntry(ctx, clusteretcd.SchemaEntry{Method: restoreAbort, Table: name, TableID: ent.ID, Request: payload, Origin: c.opts.NodeID}, clusteretcd.DirOp{Drop: true, IfTableID: ent.ID})
	if errors.Is(err, clusteretcd.ErrDirectoryGone) {
		return // given up already
	}
	if err != nil {
		c.s.log.Warn("give up a cluster restore", "table", name, "err", err)
		return
	}
	c.s.log.Info("gave up a cluster restore", "table", name, "why", why)
	if _, err := c.waitApplied(ctx, e.Seq); err == nil {
		c.m.WaitFor(ctx, func() bool { return c.m.AllApplied(e.Seq) })
	}
}

// forgetFailed drops the directory of a restored table that failed here,
// as propose does for a failed create.
func (c *clusterMember) forgetFailed(ctx context.Context, ref tableRef, e clusteretcd.SchemaEntry) {
	if d, ok := c.m.Directory(ref.name()); ok && d.TableID == e.TableID {
		// DeleteTable, not ForgetTable: other nodes may have restored it.
		req := &adminpb.DeleteTableRequest{Name: ref.name()}
		if _, err := c.propose(context.WithoutCancel(ctx), "DeleteTable", ref, req, clusteretcd.DirOp{Drop: true}); err != nil && status.Code(err) != codes.NotFound {
			c.s.log.Warn("drop a table whose restore failed", "table", ref.name(), "err", err)
		}
	}
}

// restoreParts has the owner of every tablet of the restored table ingest
// its rows, reporting the tablets done.
func (c *clusterMember) restoreParts(ctx context.Context, ref tableRef, begin clusteretcd.SchemaEntry, progress func(done, total int)) error {
	d, ok := c.m.Directory(ref.name())
	if !ok || d.TableID != begin.TableID {
		return status.Errorf(codes.Aborted, "ebbtable: the restore of %s was given up", ref.table)
	}
	var (
		first error
		mu    sync.Mutex
		wg    sync.WaitGroup
		done  atomic.Int64
		sem   = make(chan struct{}, restoreParallel)
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := time.Now().Add(c.opts.RestorePartWait)
	total := len(d.Tablets)
	progress(0, total)
	for _, t := range d.Tablets {
		wg.Add(1)
		go func(s rowSpan) {
			defer wg.Done()
			err := c.restoreSpan(ctx, ref, begin, s, sem, deadline)
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
				return
			}
			progress(int(done.Add(1)), total)
		}(rowSpan{t.Start, t.End})
	}
	wg.Wait()
	return first
}

// restoreSpan has the owners of a span's rows ingest them, cutting the
// span again by a newer directory when an owner is down or no longer holds
// its piece, until deadline.
func (c *clusterMember) restoreSpan(ctx context.Context, ref tableRef, begin clusteretcd.SchemaEntry, s rowSpan, sem chan struct{}, deadline time.Time) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, ok := c.m.Directory(ref.name())
		if !ok || d.TableID != begin.TableID {
			return status.Errorf(codes.Aborted, "ebbtable: the restore of %s was given up", ref.table)
		}
		var failed []tablets.Tablet
		var last error
		for _, p := range piecesOf(d, s) {
			err := c.askRestoreRows(ctx, ref, begin, p, d.Revision, sem)
			if err == nil {
				continue
			}
			if code := status.Code(err); code != codes.Unavailable && code != codes.Aborted {
				return err
			}
			failed, last = append(failed, p), err
		}
		if len(failed) == 0 {
			return nil
		}
		if !time.Now().Before(deadline) {
			return status.Errorf(codes.Unavailable, "ebbtable: restore of %s: rows [%q, %q) could not be restored within %s: %v", ref.table, failed[0].Start, failed[0].End, c.opts.RestorePartWait, last)
		}
		// Wait (briefly) for the directory or the nodes to change (a node
		// back, a take-over), then ask again for the failed pieces only.
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		c.m.WaitFor(wctx, func() bool { return c.m.Revision() > d.Revision })
		cancel()
		if len(failed) == 1 {
			s = rowSpan{failed[0].Start, failed[0].End}
			continue
		}
		for _, p := range failed {
			if err := c.restoreSpan(ctx, ref, begin, rowSpan{p.Start, p.End}, sem, deadline); err != nil {
				return err
			}
		}
		return nil
	}
}

// askRestoreRows has the owner of one piece (here or another node) ingest
// it.
func (c *clusterMember) askRestoreRows(ctx context.Context, ref tableRef, begin clusteretcd.SchemaEntry, p tablets.Tablet, rev int64, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-sem }()
	req := &clusterpb.RestoreRowsRequest{Table: ref.name(), TableId: begin.TableID, Start: p.Start, End: p.End, Revision: rev, Entry: begin.Request}
	if p.Owner == c.opts.NodeID {
		_, err := c.restoreRows(ctx, req)
		return err
	}
	n, ok := c.m.Node(p.Owner)
	if !ok {
		return status.Errorf(codes.Unavailable, "ebbtable: %s: its node %s is down", p, p.Owner)
	}
	cc, err := c.conn(n.Addr)
	if err != nil {
		return status.Errorf(codes.Unavailable, "ebbtable: node %s: %v", n.ID, err)
	}
	_, err = clusterpb.NewClusterClient(cc).RestoreRows(clusterForward(ctx), req)
	return err
}

// RestoreRows is an owner's part of a cluster restore (restoreRows).
func (s *clusterService) RestoreRows(ctx context.Context, req *clusterpb.RestoreRowsRequest) (*clusterpb.RestoreRowsResponse, error) {
	return s.c.restoreRows(ctx, req)
}

// restoreRows is an owner's part of a restore: the rows' cells from the
// backup's files, ingested into this node's reservation of the table.
func (c *clusterMember) restoreRows(ctx context.Context, req *clusterpb.RestoreRowsRequest) (*clusterpb.RestoreRowsResponse, error) {
	if err := c.needStore(); err != nil {
		return nil, err
	}
	var ent restoreEntry
	if err := json.Unmarshal(req.Entry, &ent); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: restore entry: %v", err)
	}
	c.catchUpTo(ctx, req.Revision)
	d, ok := c.m.Directory(req.Table)
	if !ok || d.TableID != req.TableId {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: table %s is not being restored under id %d", req.Table, req.TableId)
	}
	// This node must have applied the begin entry (so the name is
	// reserved in log order, after any delete of an older table of the
	// name): its reservation is made here if a restart lost it.
	if err := c.waitAppliedSeq(ctx, req.TableId); err != nil {
		return nil, status.Errorf(codes.Unavailable, "ebbtable: node %s has not applied the restore's entry: %v", c.opts.NodeID, err)
	}
	var spans []backup.RowSpan
	for _, p := range piecesOf(d, rowSpan{req.Start, req.End}) {
		if p.Owner != c.opts.NodeID {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: %s is not owned by node %s; retry", p, c.opts.NodeID)
		}
		spans = append(spans, backup.RowSpan{Start: p.Start, End: p.End})
	}
	if !c.m.Live() {
		return nil, status.Errorf(codes.Unavailable, "ebbtable: node %s does not hold its lease now; retry", c.opts.NodeID)
	}
	if h := c.s.knobs().restoreRows.get(); h != nil { // tests
		if err := h(c.opts.NodeID, req.Start, req.End); err != nil {
			return nil, err
		}
	}
	ent.ID = req.TableId
	lr, committed, err := c.localRestore(ent, true)
	if err != nil {
		return nil, err
	}
	if committed {
		return &clusterpb.RestoreRowsResponse{Node: c.opts.NodeID}, nil
	}
	// Given up meanwhile (the abort entry drops the directory in the same
	// etcd revision): no reservation may outlive it here.
	if d, ok := c.m.Directory(req.Table); !ok || d.TableID != req.TableId {
		c.giveUpLocal(req.TableId)
		return nil, status.Errorf(codes.Aborted, "ebbtable: the restore of %s was given up", req.Table)
	}
	lr.mu.RLock()
	defer lr.mu.RUnlock()
	if lr.r == nil {
		return nil, status.Errorf(codes.Aborted, "ebbtable: the restore of %s was given up here", req.Table)
	}
	// Asked again (a coordinator that took the restore over asks for
	// every tablet): only what this process has not ingested yet.
	c.restoreMu.Lock()
	spans = uncovered(spans, lr.done)
	c.restoreMu.Unlock()
	if len(spans) == 0 {
		return &clusterpb.RestoreRowsResponse{Node: c.opts.NodeID}, nil
	}
	cells, n, err := c.ingestSpans(ctx, lr, spans)
	if err != nil {
		return nil, err
	}
	return &clusterpb.RestoreRowsResponse{Cells: cells, Bytes: n, Node: c.opts.NodeID}, nil
}

// waitAppliedSeq waits (up to 10 s) until this node applied the schema
// log up to seq.
func (c *clusterMember) waitAppliedSeq(ctx context.Context, seq uint64) error {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for c.appliedSeq() < seq {
		c.applyMu.Lock()
		ch := c.progress
		c.applyMu.Unlock()
		if c.appliedSeq() >= seq {
			break
		}
		select {
		case <-ch:
		case <-wctx.Done():
			return wctx.Err()
		case <-c.stop:
			return clusteretcd.ErrClosed
		}
	}
	return nil
}

// localRestore returns this node's part of the restore ent describes,
// reserving the table here if create is set and it is not yet (this node
// restarted since, say). committed: the table is here already, whole.
func (c *clusterMember) localRestore(ent restoreEntry, create bool) (*localRestore, bool, error) {
	c.restoreMu.Lock()
	defer c.restoreMu.Unlock()
	if lr := c.restores[ent.ID]; lr != nil {
		return lr, false, nil
	}
	if m, err := c.s.engine.Table(ent.Instance, ent.TableID); err == nil {
		if m.ID == ent.ID {
			return nil, true, nil
		}
		return nil, false, status.Errorf(codes.AlreadyExists, "ebbtable: table %s already exists", ent.TableID)
	}
	if !create {
		return nil, false, nil
	}
	mf, _, err := backup.DecodeRecord(ent.Record)
	if err != nil {
		return nil, false, status.Errorf(codes.DataLoss, "%v", err)
	}
	r, err := c.s.engine.BeginRestoreID(ent.Instance, ent.TableID, ent.ID)
	if err != nil {
		return nil, false, toStatus(err)
	}
	lr := &localRestore{ent: ent, mf: mf, r: r}
	if c.restores == nil {
		c.restores = map[uint64]*localRestore{}
	}
	c.restores[ent.ID] = lr
	return lr, false, nil
}

// giveUpLocal aborts this node's part of a restore, if it has one: its
// cells are deleted and the name released.
func (c *clusterMember) giveUpLocal(id uint64) {
	c.restoreMu.Lock()
	lr := c.restores[id]
	c.restoreMu.Unlock()
	if lr == nil {
		return
	}
	lr.mu.Lock()
	if lr.r != nil {
		if err := lr.r.Abort(); err != nil {
			c.s.log.Warn("give up a restore's reservation", "table", lr.ent.TableID, "err", err)
		}
		lr.r = nil
	}
	lr.mu.Unlock()
	c.dropLocalRestore(id)
}

// dropLocalRestore forgets a finished part.
func (c *clusterMember) dropLocalRestore(id uint64) {
	c.restoreMu.Lock()
	defer c.restoreMu.Unlock()
	delete(c.restores, id)
}

// ingestSpans fetches the backup files of the parts overlapping spans and
// ingests the spans' rows into the reservation (lr.mu held, either way).
func (c *clusterMember) ingestSpans(ctx context.Context, lr *localRestore, spans []backup.RowSpan) (cells, fetched int64, err error) {
	files := lr.mf.PartsIn(spans)
	if len(files) > 0 && c.store == nil {
		return 0, 0, status.Error(codes.FailedPrecondition, backupObjectsNeeded)
	}
	root := filepath.Join(c.s.opts.DataDir, "backups")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return 0, 0, toStatus(err)
	}
	// A ".tmp-" directory at the backups root is removed at the next start
	// if the process dies first.
	tmp, err := os.MkdirTemp(root, ".tmp-cluster-restore-")
	if err != nil {
		return 0, 0, toStatus(err)
	}
	defer os.RemoveAll(tmp)
	dir, work := filepath.Join(tmp, "fetched"), filepath.Join(tmp, "work")
	if err := errors.Join(os.Mkdir(dir, 0o755), os.Mkdir(work, 0o755)); err != nil {
		return 0, 0, toStatus(err)
	}
	for _, f := range files {
		if err := c.download(ctx, lr.mf.Objects+f.Name, filepath.Join(dir, f.Name), f.Bytes); err != nil {
			return 0, 0, status.Errorf(codes.Unavailable, "ebbtable: restore %s: fetch %s: %v", lr.mf.Name, f.Name, err)
		}
		fetched += f.Bytes
	}
	cells, err = backup.IngestRows(ctx, c.s.engine, dir, files, spans, lr.r, work, 0)
	if err != nil {
		return 0, 0, toStatus(err)
	}
	c.restoreMu.Lock()
	lr.done = append(lr.done, spans...)
	c.restoreMu.Unlock()
	return cells, fetched, nil
}

// applyRestoreEntry applies one of a cluster restore's schema log entries
// on this node.
func (c *clusterMember) applyRestoreEntry(ctx context.Context, e clusteretcd.SchemaEntry) applyResult {
	var ent restoreEntry
	if err := json.Unmarshal(e.Request, &ent); err != nil {
		return applyResult{err: status.Errorf(codes.InvalidArgument, "ebbtable: restore entry: %v", err)}
	}
	switch e.Method {
	case restoreBegin:
		ent.ID = e.TableID
		if _, _, err := c.localRestore(ent, true); err != nil {
			return applyResult{err: err}
		}
		return applyResult{resp: &emptypb.Empty{}}
	case restoreAbort:
		c.giveUpLocal(ent.ID)
		return applyResult{resp: &emptypb.Empty{}}
	case restoreCommit:
	default: // "RestoreTable" of older versions: all at once, here
		ent.ID = e.TableID
	}
	return c.commitRestore(ctx, e, ent)
}

// commitRestore makes a restored table visible here, ingesting first the
// rows of the tablets this node owns that it has not ingested (it
// restarted since, or the entry is an older version's one-step restore).
func (c *clusterMember) commitRestore(ctx context.Context, e clusteretcd.SchemaEntry, ent restoreEntry) applyResult {
	a := &adminServer{s: c.s}
	lr, committed, err := c.localRestore(ent, true)
	if committed {
		m, err := c.s.engine.Table(ent.Instance, ent.TableID)
		if err != nil {
			return applyResult{err: toStatus(err)}
		}
		return applyResult{resp: a.tableToProto(m, adminpb.Table_SCHEMA_VIEW)} // applied before a crash
	}
	if err != nil {
		return applyResult{err: err}
	}
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if lr.r == nil {
		return applyResult{err: status.Errorf(codes.Aborted, "ebbtable: the restore of %s was given up", e.Table)}
	}
	var owned []backup.RowSpan
	if d, ok := c.m.Directory(e.Table); ok && d.TableID == ent.ID {
		for _, t := range d.Tablets {
			if t.Owner == c.opts.NodeID {
				owned = append(owned, backup.RowSpan{Start: t.Start, End: t.End})
			}
		}
	}
	c.restoreMu.Lock()
	missing := uncovered(owned, lr.done)
	c.restoreMu.Unlock()
	fail := func(err error) applyResult {
		// Nothing of it stays reserved here: the coordinator drops the
		// table cluster-wide when its own commit fails.
		if aerr := lr.r.Abort(); aerr != nil {
			err = errors.Join(err, aerr)
		}
		lr.r = nil
		c.dropLocalRestore(ent.ID)
		return applyResult{err: toStatus(err)}
	}
	if len(missing) > 0 {
		if e.Method == restoreCommit {
			c.s.log.Info("restore: ingesting at commit the rows of tablets this node was not asked for since it started", "table", e.Table, "spans", len(missing))
		}
		if _, _, err := c.ingestSpans(ctx, lr, missing); err != nil {
			return fail(err)
		}
	}
	meta, err := backup.CommitRestore(lr.mf, lr.r, ent.Retention)
	if err != nil {
		return fail(err)
	}
	lr.r = nil
	c.dropLocalRestore(ent.ID)
	return applyResult{resp: a.tableToProto(meta, adminpb.Table_SCHEMA_VIEW)}
}

// uncovered returns the spans of want (whole) not covered by the union of
// have.
func uncovered(want, have []backup.RowSpan) []backup.RowSpan {
	hs := append([]backup.RowSpan(nil), have...)
	sort.Slice(hs, func(i, j int) bool { return bytes.Compare(hs[i].Start, hs[j].Start) < 0 })
	var out []backup.RowSpan
	for _, w := range want {
		at, whole := w.Start, false
		for _, h := range hs {
			if bytes.Compare(h.Start, at) > 0 {
				break
			}
			if len(h.End) == 0 {
				whole = true
				break
			}
			if bytes.Compare(h.End, at) > 0 {
				at = h.End
				if len(w.End) > 0 && bytes.Compare(at, w.End) >= 0 {
					whole = true
					break
				}
			}
		}
		if !whole {
			out = append(out, w)
		}
	}
	return out
}

// sweepRestores gives up the restores under way here whose coordinator
// is gone (its node left, or this node restarted): run by the backup
// expiry loop. Only with every schema entry applied, so no commit of the
// restore is in the log.
func (c *clusterMember) sweepRestores(ctx context.Context) {
	c.sweepRestoreOps(ctx) // clusterrestoreop.go
	if c.appliedSeq() < c.m.SchemaSeq() {
		return
	}
	c.restoreMu.Lock()
	var orphans []restoreEntry
	for _, lr := range c.restores {
		// A restore with an operation record is moved on by
		// sweepRestoreOps.
		if lr.ent.Maker != "" && lr.ent.Op == "" && !c.backupRunning(lr.ent.Maker) {
			orphans = append(orphans, lr.ent)
		}
	}
	c.restoreMu.Unlock()
	for _, ent := range orphans {
		name := tableRef{instance: ent.Instance, table: ent.TableID}.name()
		if d, ok := c.m.Directory(name); !ok || d.TableID != ent.ID {
			// Given up already (a part asked for as the abort passed).
			c.giveUpLocal(ent.ID)
			continue
		}
		c.abortRestore(ctx, ent, fmt.Errorf("its coordinator %s is gone", ent.Maker))
	}
}

// restoreUnderWay reports whether a table is being restored (reserved
// here, not committed) with every schema entry applied here, so no commit
// of it is in the log: no node has served a write to it, and a failover
// take-over of its tablets has nothing to rebuild (the coordinator asks
// the tablets' new owner for their rows).
func (c *clusterMember) restoreUnderWay(name string) bool {
	d, ok := c.m.Directory(name)
	if !ok || c.appliedSeq() < c.m.SchemaSeq() {
		return false
	}
	c.restoreMu.Lock()
	defer c.restoreMu.Unlock()
	lr := c.restores[d.TableID]
	return lr != nil && tableRef{instance: lr.ent.Instance, table: lr.ent.TableID}.name() == name
}

// takeOverRestoring takes a dead node's tablets of a table being restored:
// only the directory's owner changes (the fenced flip of any take-over).
func (c *clusterMember) takeOverRestoring(ctx context.Context, g tablets.TakeOver) error {
	if err := c.flipTakeOver(ctx, g); err != nil {
		return err
	}
	c.s.log.Info("took over a dead node's tablets of a table being restored", "dead", g.Dead, "table", g.Table, "tablets", len(g.Tablets))
	return nil
}
