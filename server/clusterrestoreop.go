package server

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/backup"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A cluster restore's operation is kept in etcd (clusteretcd/ops.go,
// docs/scale-out.md "Backups"), written in the begin entry's transaction,
// so GetOperation answers through any node and the restore outlives its
// coordinator. The record's state decides who moves the restore on; each
// change compares the record's revision, so of a coordinator and a sweep
// racing, one wins:
//
//	running     the coordinator (Maker) has the owners ingest their parts.
//	            A sweep that finds Maker gone takes it over (Maker
//	            becomes the sweeping node's) and coordinates the rest
//	            itself (resumeRestore): the owners ingest what they lack,
//	            then the commit.
//	committing  every part was ingested; the commit entry is (being)
//	            appended. A sweep that finds Maker gone takes it over
//	            (Maker becomes the sweeping node's) and appends the commit
//	            itself: every node ingests at commit what it lacks.
//	failed      done, with an error. Until the table's directory (of the
//	            restore's table id) is dropped, sweeps append the abort.
//	done        done, with the table.
//
// Finished records are deleted restoreOpRetention after they ended.
const (
	opRunning    = "running"
	opCommitting = "committing"
	opFailed     = "failed"
	opDone       = "done"
)

// restoreOpRetention is how long a finished restore's operation stays
// readable.
const restoreOpRetention = 24 * time.Hour

// restoreOpMark marks the operation names kept in etcd.
const restoreOpMark = "/operations/restore-"

// restoreOp is a restore operation's record in etcd.
type restoreOp struct {
	State string `json:"state"`
	Maker string `json:"maker"`
	// Kind is "" for a restore, opKindBackup or opKindCopy for a
	// backup's operation (clusterbackupop.go).
	Kind string `json:"kind,omitempty"`
	// Entry is the begin entry's payload (restoreEntry, its ID and Op
	// set).
	Entry []byte `json:"entry"`
	// Op is the operation as GetOperation answers it (protobuf).
	Op    []byte    `json:"op"`
	Ended time.Time `json:"ended,omitzero"`
}

// newRestoreOp is the record the begin entry writes.
func newRestoreOp(name, maker string, ent restoreEntry, meta *adminpb.RestoreTableMetadata) ([]byte, error) {
	payload, err := json.Marshal(ent)
	if err != nil {
		return nil, err
	}
	m, err := anypb.New(meta)
	if err != nil {
		return nil, err
	}
	op, err := proto.Marshal(&longrunningpb.Operation{Name: name, Metadata: m})
	if err != nil {
		return nil, err
	}
	return json.Marshal(restoreOp{State: opRunning, Maker: maker, Entry: payload, Op: op})
}

func (r *restoreOp) operation() (*longrunningpb.Operation, error) {
	var op longrunningpb.Operation
	if err := proto.Unmarshal(r.Op, &op); err != nil {
		return nil, status.Errorf(codes.DataLoss, "ebbtable: undecodable operation record: %v", err)
	}
	return &op, nil
}

func (r *restoreOp) entry() (restoreEntry, error) {
	var ent restoreEntry
	err := json.Unmarshal(r.Entry, &ent)
	return ent, err
}

// errOpMoved: the record is no longer the caller's to change.
var errOpMoved = status.Error(codes.Aborted, "ebbtable: the restore was taken over or given up by another node")

// readOp reads operation record name and its revision.
func (c *clusterMember) readOp(ctx context.Context, name string) (restoreOp, int64, error) {
	var r restoreOp
	rec, err := c.m.GetOpRecord(ctx, name)
	if err != nil {
		return r, 0, err
	}
	if err := json.Unmarshal(rec.Value, &r); err != nil {
		return r, 0, status.Errorf(codes.DataLoss, "ebbtable: undecodable operation record %s: %v", name, err)
	}
	return r, rec.Revision, nil
}

// updateOp changes operation record name by f (read, f, compare-and-put,
// again on a race). f returns an error to leave the record alone.
func (c *clusterMember) updateOp(ctx context.Context, name string, f func(*restoreOp) error) error {
	for {
		r, rev, err := c.readOp(ctx, name)
		if err != nil {
			return err
		}
		if err := f(&r); err != nil {
			return err
		}
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = c.m.UpdateOpRecord(ctx, name, b, rev)
		if !errors.Is(err, clusteretcd.ErrRecordChanged) {
			return err
		}
	}
}

// opProgress writes a running restore's metadata (its progress) to its
// record, while maker runs it.
func (c *clusterMember) opProgress(ctx context.Context, name, maker string, meta *adminpb.RestoreTableMetadata) error {
	m, err := anypb.New(meta)
	if err != nil {
		return err
	}
	return c.updateOp(ctx, name, func(r *restoreOp) error {
		if r.State != opRunning || r.Maker != maker {
			return errOpMoved
		}
		op, err := r.operation()
		if err != nil {
			return err
		}
		op.Metadata = m
		r.Op, err = proto.Marshal(op)
		return err
	})
}

// opCommit moves a restore maker runs from running to committing: from
// then on it is committed, by maker or a node that takes it over.
func (c *clusterMember) opCommit(ctx context.Context, name, maker string) error {
	return c.updateOp(ctx, name, func(r *restoreOp) error {
		if r.State != opRunning || r.Maker != maker {
			return errOpMoved
		}
		r.State = opCommitting
		return nil
	})
}

// opFinish ends a restore's operation, with the table or with failure
// (a status error), while maker runs it (in any state but done; maker ""
// for any maker). The metadata's progress is completed.
func (c *clusterMember) opFinish(ctx context.Context, name, maker string, resp proto.Message, failure error) error {
	now := c.s.opts.Clock.Now()
	return c.updateOp(ctx, name, func(r *restoreOp) error {
		if r.State == opDone || r.State == opFailed || (maker != "" && r.Maker != maker) {
			return errOpMoved
		}
		op, err := r.operation()
		if err != nil {
			return err
		}
		var meta proto.Message // nil: the metadata stays as it is
		var rm adminpb.RestoreTableMetadata
		if op.GetMetadata().UnmarshalTo(&rm) == nil {
			p := rm.GetProgress()
			if p == nil {
				p = &adminpb.OperationProgress{}
			}
			if failure == nil {
				p.ProgressPercent = 100
			}
			p.EndTime = timestamppb.New(now)
			rm.Progress = p
			meta = &rm
		}
		return endOp(r, now, resp, meta, failure)
	})
}

// keptInEtcd reports whether an operation's name is one kept in etcd (a
// restore's or a backup's).
func keptInEtcd(name string) bool {
	return strings.Contains(name, restoreOpMark) || strings.Contains(name, backupOpMark) || strings.Contains(name, instantOpMark) // clustermetaops.go
}

// remoteOperation answers GetOperation for the operations kept in etcd
// (ok false for the other names).
func (c *clusterMember) remoteOperation(ctx context.Context, name string) (*longrunningpb.Operation, bool, error) {
	if !keptInEtcd(name) || c.m == nil {
		return nil, false, nil
	}
	rec, err := c.m.GetOpRecord(ctx, name)
	if errors.Is(err, clusteretcd.ErrRecordNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, status.Errorf(codes.Unavailable, "%v", err)
	}
	var r restoreOp
	if err := json.Unmarshal(rec.Value, &r); err != nil {
		return nil, false, status.Errorf(codes.DataLoss, "ebbtable: undecodable operation record %s: %v", name, err)
	}
	op, err := r.operation()
	return op, err == nil, err
}

// listRemoteOperations lists the operations kept in etcd whose names start
// with prefix.
func (c *clusterMember) listRemoteOperations(ctx context.Context, prefix string) ([]*longrunningpb.Operation, error) {
	if c.m == nil {
		return nil, nil
	}
	recs, err := c.m.ListOpRecordsUnder(ctx, prefix)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	var out []*longrunningpb.Operation
	for _, rec := range recs {
		var r restoreOp
		if json.Unmarshal(rec.Value, &r) != nil {
			continue
		}
		if op, err := r.operation(); err == nil {
			out = append(out, op)
		}
	}
	return out, nil
}

// deleteRemoteOperation forgets an operation kept in etcd.
func (c *clusterMember) deleteRemoteOperation(ctx context.Context, name string) (bool, error) {
	if !keptInEtcd(name) || c.m == nil {
		return false, nil
	}
	err := c.m.DeleteOpRecord(ctx, name, 0)
	if errors.Is(err, clusteretcd.ErrRecordChanged) {
		return false, nil
	}
	return err == nil, err
}

// sweepRestoreOps moves on the restores whose coordinator is gone (run by
// every node's backup expiry loop): a running one fails and is given up,
// a committing one is committed here; a failed one whose directory is
// still there is given up (again); finished ones past their retention
// are deleted.
func (c *clusterMember) sweepRestoreOps(ctx context.Context) {
	recs, err := c.m.ListOpRecords(ctx)
	if err != nil {
		c.s.log.Warn("list restore operations", "err", err)
		return
	}
	now := c.s.opts.Clock.Now()
	for _, rec := range recs {
		var r restoreOp
		if json.Unmarshal(rec.Value, &r) != nil {
			continue
		}
		if r.Kind != "" {
			c.sweepBackupOp(ctx, rec, r, now) // clusterbackupop.go
			continue
		}
		ent, err := r.entry()
		if err != nil {
			continue
		}
		switch r.State {
		case opRunning:
			if c.backupRunning(r.Maker) {
				continue
			}
			c.resumeRestore(ctx, rec.Name, r.Maker, ent)
		case opCommitting:
			if c.backupRunning(r.Maker) {
				continue
			}
			c.resumeCommit(ctx, rec.Name, r.Maker, ent)
		case opFailed:
			if d, ok := c.m.Directory(tableRef{instance: ent.Instance, table: ent.TableID}.name()); ok && d.TableID == ent.ID {
				c.abortRestore(ctx, ent, errors.New("its operation failed"))
			}
			fallthrough
		case opDone:
			if !r.Ended.IsZero() && now.Sub(r.Ended) > restoreOpRetention {
				c.m.DeleteOpRecord(ctx, rec.Name, rec.Revision)
			}
		}
	}
}

// resumeRestore takes over a running restore whose coordinator (dead) is
// gone: the record's maker becomes this node's, the backup is marked as
// being read by it, and this node coordinates the rest in the background
// (finishRestore: every owner is asked for its tablets again and ingests
// what it lacks, then the commit), so the client's operation completes.
// A restore whose directory is gone (given up) only has its operation
// failed.
func (c *clusterMember) resumeRestore(ctx context.Context, name, dead string, ent restoreEntry) {
	ref := tableRef{instance: ent.Instance, table: ent.TableID}
	if d, ok := c.m.Directory(ref.name()); !ok || d.TableID != ent.ID {
		why := status.Errorf(codes.Aborted, "ebbtable: the restore of %s was given up: its coordinator %s is gone", ent.TableID, dead)
		c.opFinish(ctx, name, dead, nil, why)
		return
	}
	maker := c.opts.NodeID + "/" + randomID()
	var meta adminpb.RestoreTableMetadata
	if err := c.updateOp(ctx, name, func(r *restoreOp) error {
		if r.State != opRunning || r.Maker != dead {
			return errOpMoved
		}
		if op, err := r.operation(); err == nil {
			op.GetMetadata().UnmarshalTo(&meta)
		}
		r.Maker = maker
		return nil
	}); err != nil {
		return
	}
	runningBackups.Store(maker, true)
	ent.Maker = maker
	c.s.log.Info("resuming a restore whose coordinator is gone", "table", ref.name(), "coordinator", dead)
	err := c.s.backups.Go(func(ctx context.Context) {
		defer runningBackups.Delete(maker)
		t, err := c.resumedRestore(ctx, ref, ent, &meta)
		c.s.backups.CountOp("restore", err)
		if err != nil {
			c.s.log.Error("resumed cluster restore failed", "table", ref.name(), "err", err)
		} else {
			c.s.log.Info("resumed cluster restore done", "table", t.GetName())
		}
	})
	if err != nil {
		// This node is stopping: its maker is gone with it, so another
		// node's sweep takes the restore over again.
		runningBackups.Delete(maker)
		c.s.log.Info("not resuming a restore: this node is stopping", "table", ref.name())
	}
}

// resumedRestore is resumeRestore's background part.
func (c *clusterMember) resumedRestore(ctx context.Context, ref tableRef, ent restoreEntry, meta *adminpb.RestoreTableMetadata) (*adminpb.Table, error) {
	fail := func(err error) (*adminpb.Table, error) {
		c.failRestore(ctx, ent, ent.Maker, err)
		return nil, err
	}
	mf, _, err := backup.DecodeRecord(ent.Record)
	if err != nil {
		return fail(status.Errorf(codes.DataLoss, "%v", err))
	}
	bn, err := parseBackup(mf.Name)
	if err != nil {
		return fail(err)
	}
	// The backup is read again: marked so (it fails if the backup was
	// deleted once its first coordinator was gone).
	if _, err := c.markRestoring(ctx, bn, ent.Maker, true); err != nil {
		return fail(err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		c.markRestoring(uctx, bn, ent.Maker, false)
	}()
	if err := c.waitAppliedSeq(ctx, ent.ID); err != nil {
		return fail(status.Errorf(codes.Unavailable, "ebbtable: node %s has not applied the restore's entry: %v", c.opts.NodeID, err))
	}
	payload, err := json.Marshal(ent)
	if err != nil {
		return fail(err)
	}
	begin := clusteretcd.SchemaEntry{Seq: ent.ID, TableID: ent.ID, Method: restoreBegin, Table: ref.name(), Request: payload}
	var mu sync.Mutex
	start := meta.GetProgress().GetStartTime()
	return c.finishRestore(ctx, ref, begin, ent, func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		pct := int32(done * 100 / max(total, 1))
		if pct < meta.GetProgress().GetProgressPercent() {
			return
		}
		meta.Progress = &adminpb.OperationProgress{StartTime: start, ProgressPercent: pct}
		if err := c.opProgress(ctx, ent.Op, ent.Maker, meta); err != nil {
			c.s.log.Warn("write a restore's progress", "table", ref.name(), "err", err)
		}
	})
}

// resumeCommit commits a restore whose coordinator died after every part
// was ingested: the record is taken over (maker becomes this node's), the
// commit entry appended (every node ingests at commit the rows it lacks),
// and the operation finished.
func (c *clusterMember) resumeCommit(ctx context.Context, name, dead string, ent restoreEntry) {
	maker := c.opts.NodeID + "/" + randomID()
	if err := c.updateOp(ctx, name, func(r *restoreOp) error {
		if r.State != opCommitting || r.Maker != dead {
			return errOpMoved
		}
		r.Maker = maker
		return nil
	}); err != nil {
		return
	}
	runningBackups.Store(maker, true)
	defer runningBackups.Delete(maker)
	c.s.log.Info("committing a restore whose coordinator is gone", "table", ent.TableID, "coordinator", dead)
	mf, _, err := backup.DecodeRecord(ent.Record)
	if err == nil {
		// The backup is being read again (by the commit's ingests).
		if bn, perr := parseBackup(mf.Name); perr == nil {
			if _, err := c.markRestoring(ctx, bn, maker, true); err == nil {
				defer func() {
					uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
					defer cancel()
					c.markRestoring(uctx, bn, maker, false)
				}()
			}
		}
	}
	ref := tableRef{instance: ent.Instance, table: ent.TableID}
	t, err := c.commitRestoreEntry(ctx, ref, ent)
	if err := c.opFinish(ctx, name, maker, t, err); err != nil {
		c.s.log.Warn("finish a restore's operation", "table", ref.name(), "err", err)
	}
}

// commitRestoreEntry appends a restore's commit entry (while its directory
// holds its table id) and waits until it is applied here. A commit that
// fails here drops the table cluster-wide.
func (c *clusterMember) commitRestoreEntry(ctx context.Context, ref tableRef, ent restoreEntry) (*adminpb.Table, error) {
	payload, err := json.Marshal(ent)
	if err != nil {
		return nil, toStatus(err)
	}
	ce, err := c.m.AppendEntry(ctx, clusteretcd.SchemaEntry{Method: restoreCommit, Table: ref.name(), TableID: ent.ID, Request: payload, Origin: c.opts.NodeID}, clusteretcd.DirOp{IfTableID: ent.ID})
	if errors.Is(err, clusteretcd.ErrDirectoryGone) {
		return nil, status.Errorf(codes.Aborted, "ebbtable: the restore of %s was given up, or its table dropped", ref.table)
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	res, err := c.waitApplied(ctx, ce.Seq)
	if err == nil {
		err = res.err
	}
	if err != nil {
		// Committed elsewhere perhaps, not here: drop it cluster-wide.
		c.forgetFailed(ctx, ref, clusteretcd.SchemaEntry{TableID: ent.ID})
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, allAppliedWait)
	if err := c.m.WaitFor(wctx, func() bool { return c.m.AllApplied(ce.Seq) }); err != nil && ctx.Err() == nil {
		c.s.log.Warn("restore not yet committed on every live node", "seq", ce.Seq, "table", ref.name())
	}
	cancel()
	t, _ := res.resp.(*adminpb.Table)
	if t == nil {
		return nil, status.Errorf(codes.Internal, "ebbtable: restore of %s: no table", ref.table)
	}
	return t, nil
}
