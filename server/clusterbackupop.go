package server

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/backup"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// A cluster backup's operation (CreateBackup, CopyBackup) is kept in etcd
// like a restore's (clusterrestoreop.go), under ops/NAME with NAME
// BACKUP/operations/backup-TOKEN: created in the transaction that records
// the backup CREATING, and ended in the transaction that records it READY
// (or removes it), so GetOperation through any node, before or after the
// coordinator died, agrees with GetBackup.
//
// A backup whose coordinator died is failed, not resumed (docs/scale-out.md,
// "Backups"): a sweep (sweepRestoreOps, every node's backup expiry loop)
// that finds its maker gone ends the operation ABORTED, removes the CREATING
// record in the same transaction, then the files written so far. The name
// is free at once; the client creates the backup again. Resuming would take
// the backup minutes after the call (the dead owner's tablets are taken over
// first), holding writes made long after the point in time the client
// asked for, and the parts written so far are listed only in the dead
// coordinator's memory: a resumed backup would redo every part anyway.

// backupOpMark marks the names of backup operations kept in etcd.
const backupOpMark = "/operations/backup-"

// The kinds of backup operation records (restoreOp.Kind; "" is a restore).
const (
	opKindBackup = "backup"
	opKindCopy   = "copy"
)

// backupOpEntry is a backup operation record's Entry.
type backupOpEntry struct {
	Backup  string `json:"backup"`
	Objects string `json:"objects"`
}

// backupOp is the operation of a backup this node makes (nil for an
// automated backup, which has none).
type backupOp struct {
	name, maker string
	// result gives the operation's response and metadata once the
	// backup is done.
	result func(done *backup.Manifest) (resp, meta proto.Message)
}

// createBackupWithOp records a backup this node makes CREATING and, if
// kind is set, its operation (running, with meta) in the same
// transaction. The maker (this node and a random id) is counted as
// running here. A gRPC status on error.
func (c *clusterMember) createBackupWithOp(ctx context.Context, mf *backup.Manifest, kind string, meta proto.Message) (maker, opName string, rev int64, err error) {
	if kind == "" {
		maker, rev, err = c.createBackupRecord(ctx, mf.Name, mf)
		return maker, "", rev, err
	}
	token := randomID()
	maker = c.opts.NodeID + "/" + token
	opName = mf.Name + backupOpMark + token
	enc, err := backup.EncodeRecord(mf, maker)
	if err != nil {
		return "", "", 0, toStatus(err)
	}
	ent, err := json.Marshal(backupOpEntry{Backup: mf.Name, Objects: mf.Objects})
	if err != nil {
		return "", "", 0, toStatus(err)
	}
	m, err := anypb.New(meta)
	if err != nil {
		return "", "", 0, toStatus(err)
	}
	op, err := proto.Marshal(&longrunningpb.Operation{Name: opName, Metadata: m})
	if err != nil {
		return "", "", 0, toStatus(err)
	}
	opv, err := json.Marshal(restoreOp{State: opRunning, Maker: maker, Kind: kind, Entry: ent, Op: op})
	if err != nil {
		return "", "", 0, toStatus(err)
	}
	runningBackups.Store(maker, true)
	rev, err = c.m.CreateBackupWithOp(ctx, mf.Name, enc, opName, opv)
	if err != nil {
		runningBackups.Delete(maker)
		return "", "", 0, recordStatus(err)
	}
	return maker, opName, rev, nil
}

// endOp ends an operation record: done with resp, or failed with failure
// (a status error); meta, if not nil, replaces the metadata.
func endOp(r *restoreOp, now time.Time, resp, meta proto.Message, failure error) error {
	op, err := r.operation()
	if err != nil {
		return err
	}
	op.Done = true
	r.State = opDone
	if meta != nil {
		if op.Metadata, err = anypb.New(meta); err != nil {
			return err
		}
	}
	if failure == nil {
		a, err := anypb.New(resp)
		if err != nil {
			return err
		}
		op.Result = &longrunningpb.Operation_Response{Response: a}
	} else {
		r.State = opFailed
		op.Result = &longrunningpb.Operation_Error{Error: status.Convert(failure).Proto()}
	}
	r.Ended = now
	r.Op, err = proto.Marshal(op)
	return err
}

// endBackupOp ends backup operation opName while maker runs it (errOpMoved
// if not: a sweep ended it), writing in the same transaction the backup's
// record: value (nil: removed) at revision rev. If the backup's record
// changed meanwhile (removed by another node that took this one for gone)
// a failure ends the operation alone, and a success is refused
// (ErrRecordChanged).
func (c *clusterMember) endBackupOp(ctx context.Context, opName, maker, name string, value []byte, rev int64, resp, meta proto.Message, failure error) error {
	now := c.s.opts.Clock.Now()
	for {
		r, opRev, err := c.readOp(ctx, opName)
		if err != nil {
			return err
		}
		if r.State != opRunning || r.Maker != maker {
			return errOpMoved
		}
		if err := endOp(&r, now, resp, meta, failure); err != nil {
			return err
		}
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		err = c.m.EndBackupOp(ctx, name, value, rev, opName, b, opRev)
		if !errors.Is(err, clusteretcd.ErrRecordChanged) || rev == 0 {
			return err
		}
		if br, gerr := c.m.GetBackupRecord(ctx, name); gerr == nil && br.Revision == rev {
			continue // the operation changed: read again
		}
		if value != nil {
			return err
		}
		rev = 0
	}
}

// endBackup writes a backup's outcome: its record replaced by done (READY),
// or removed with its files if done is nil (why says why); with its
// operation ended in the same transaction if it has one.
func (c *clusterMember) endBackup(ctx context.Context, mf, done *backup.Manifest, rev int64, bop *backupOp, why error) error {
	if done != nil {
		enc, err := backup.EncodeRecord(done, "")
		if err != nil {
			return err
		}
		if bop == nil {
			_, err = c.m.UpdateBackupRecord(ctx, mf.Name, enc, rev)
			return err
		}
		resp, meta := bop.result(done)
		err = c.endBackupOp(ctx, bop.name, bop.maker, mf.Name, enc, rev, resp, meta, nil)
		if errors.Is(err, clusteretcd.ErrRecordNotFound) {
			// The client deleted the operation: the backup alone.
			_, err = c.m.UpdateBackupRecord(ctx, mf.Name, enc, rev)
		}
		return err
	}
	defer c.removeObjects(mf.Objects)
	if bop != nil {
		err := c.endBackupOp(ctx, bop.name, bop.maker, mf.Name, nil, rev, nil, nil, toStatus(why))
		if err == nil || errors.Is(err, errOpMoved) {
			return nil // removed, by this node or a sweep
		}
		if !errors.Is(err, clusteretcd.ErrRecordNotFound) {
			return err
		}
	}
	return c.m.DeleteBackupRecord(ctx, mf.Name, rev)
}

// sweepBackupOp moves on a backup's operation record (sweepRestoreOps): a
// running one whose maker is gone is failed and its backup removed; a
// finished one is deleted restoreOpRetention after it ended.
func (c *clusterMember) sweepBackupOp(ctx context.Context, rec clusteretcd.BackupRecord, r restoreOp, now time.Time) {
	switch r.State {
	case opRunning:
		if c.backupRunning(r.Maker) {
			return
		}
		var ent backupOpEntry
		if json.Unmarshal(r.Entry, &ent) != nil {
			return
		}
		var rev int64
		br, err := c.m.GetBackupRecord(ctx, ent.Backup)
		switch {
		case err == nil:
			if mf, node, err := backup.DecodeRecord(br.Value); err == nil && node == r.Maker && mf.State != backup.Ready {
				rev = br.Revision
			}
		case !errors.Is(err, clusteretcd.ErrRecordNotFound):
			return
		}
		why := status.Errorf(codes.Aborted, "ebbtable: the backup %s was given up: its coordinator %s is gone; create it again", ent.Backup, r.Maker)
		if err := c.endBackupOp(ctx, rec.Name, r.Maker, ent.Backup, nil, rev, nil, nil, why); err != nil {
			return // moved on by another node meanwhile
		}
		c.removeObjects(ent.Objects)
		c.forgetBackupTotals()
		c.s.log.Info("gave up a backup whose coordinator is gone", "backup", ent.Backup, "coordinator", r.Maker)
	case opDone, opFailed:
		if !r.Ended.IsZero() && now.Sub(r.Ended) > restoreOpRetention {
			c.m.DeleteOpRecord(ctx, rec.Name, rec.Revision)
		}
	}
}
