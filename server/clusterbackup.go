package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/backup"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/storage"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Backups in cluster mode (docs/scale-out.md, "Backups"). A table's
// tablets are spread over the nodes, so:
//
//   - CreateBackup, on any node (the coordinator), records the backup in
//     etcd (state CREATING, so two nodes cannot both create it), asks the
//     owner of every tablet, in parallel, to write its tablet's cells from
//     one snapshot into the shared object store (Cluster/BackupRows), and
//     records the parts (state READY). A part whose owner changed meanwhile
//     (a move, a split) is cut again by the new directory and asked again.
//   - GetBackup, ListBackups, UpdateBackup and DeleteBackup read and change
//     the records in etcd, so every node sees the same backups, whichever
//     node made them and whether it is still up.
//   - RestoreTable, on any node, is a long-running operation outside the
//     schema log but for its three small entries (clusterrestore.go).
//
// Consistency: each part is one snapshot of its tablet taken by its owner
// under the tablet's gate; the parts' snapshots are taken at about the
// same time (all asked at once), not at one instant. Every write
// acknowledged before CreateBackup was called is in the backup; a write
// concurrent with it may be in some tablets' parts and not others'. The
// backup's version time is its earliest part's snapshot.

// backupObjectsNeeded explains why cluster backups need shared storage.
const backupObjectsNeeded = "ebbtable: backups of a cluster need shared storage (--shared-storage), where every node reaches their files"

// backupRowsParallel bounds the parts a coordinator asks for at once.
const backupRowsParallel = 8

// backupRetryEvery is the longest a backup waits between two asks for a
// tablet whose owner failed (sooner if the directory changes or the owner
// comes back).
const backupRetryEvery = time.Second

var tableIDRE = regexp.MustCompile(`^[_a-zA-Z0-9][-_.a-zA-Z0-9]{0,49}$`)

func (c *clusterMember) needStore() error {
	if c.store == nil {
		return status.Error(codes.FailedPrecondition, backupObjectsNeeded)
	}
	return nil
}

// recordStatus maps the backup record errors of etcd to gRPC codes.
func recordStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, clusteretcd.ErrRecordExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, clusteretcd.ErrRecordNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, clusteretcd.ErrRecordChanged):
		return status.Error(codes.Aborted, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Unavailable, "%v", err)
}

// readBackup reads a backup's record from etcd.
func (c *clusterMember) readBackup(ctx context.Context, name backup.Name) (*backup.Manifest, string, int64, error) {
	r, err := c.m.GetBackupRecord(ctx, name.String())
	if err != nil {
		return nil, "", 0, recordStatus(err)
	}
	mf, node, err := backup.DecodeRecord(r.Value)
	if err != nil {
		return nil, "", 0, status.Errorf(codes.DataLoss, "%v", err)
	}
	return mf, node, r.Revision, nil
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// CreateBackup backs up every tablet of the table, wherever it lives.
func (a *clusterAdmin) CreateBackup(ctx context.Context, req *adminpb.CreateBackupRequest) (*longrunningpb.Operation, error) {
	c := a.c
	cb, err := parseCreateBackup(req)
	if err != nil {
		return nil, err
	}
	src, expire, opt, name := cb.src, cb.expire, cb.opt, cb.name
	var op *pendingOp
	finish := func(done *backup.Manifest, err error) {
		if err != nil {
			op.finish(nil, nil, toStatus(err))
			return
		}
		op.finish(backupToProto(done, a.s.opts.Clock.Now()), &adminpb.CreateBackupMetadata{
			Name: done.Name, SourceTable: done.SourceTable, StartTime: ts(done.StartTime), EndTime: ts(done.EndTime),
		}, nil)
	}
	_, err = c.startBackup(ctx, name, src, expire, opt, true, func(mf *backup.Manifest, opName string) error {
		op, err = a.s.ops.pendingNamed(opName, createBackupMeta(mf))
		return err
	}, finish)
	if err != nil {
		return nil, err
	}
	return op.wait(a.s.opWait), nil
}

// createBackupMeta is a CreateBackup operation's metadata (EndTime set
// once done).
func createBackupMeta(mf *backup.Manifest) *adminpb.CreateBackupMetadata {
	meta := &adminpb.CreateBackupMetadata{Name: mf.Name, SourceTable: mf.SourceTable, StartTime: ts(mf.StartTime)}
	if mf.State == backup.Ready {
		meta.EndTime = ts(mf.EndTime)
	}
	return meta
}

// startBackup checks a backup's request, records it CREATING (with its
// operation in etcd, if withOp: clusterbackupop.go) and starts making it
// in the background: started runs once it is recorded, with the
// operation's name (an error from it abandons the backup), finish with
// the outcome.
func (c *clusterMember) startBackup(ctx context.Context, name backup.Name, src tableRef, expire time.Time, opt backup.CreateOptions,
	withOp bool, started func(mf *backup.Manifest, opName string) error, finish func(*backup.Manifest, error)) (*backup.Manifest, error) {
	if err := c.needStore(); err != nil {
		return nil, err
	}
	if _, ok := c.m.Directory(src.name()); !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: table %s not found", src.table)
	}
	meta, err := c.s.engine.Table(src.instance, src.table)
	if err != nil {
		return nil, toStatus(err)
	}
	mf, err := backup.NewClusterManifest(name, src.table, meta, name.ObjectPrefix(randomID()), c.s.opts.Clock.Now(), expire, opt)
	if err != nil {
		return nil, toStatus(err)
	}
	kind := ""
	if withOp {
		kind = opKindBackup
	}
	maker, opName, rev, err := c.createBackupWithOp(ctx, mf, kind, createBackupMeta(mf))
	if err != nil {
		return nil, err
	}
	var bop *backupOp
	if withOp {
		bop = &backupOp{name: opName, maker: maker, result: func(done *backup.Manifest) (proto.Message, proto.Message) {
			return backupToProto(done, c.s.opts.Clock.Now()), createBackupMeta(done)
		}}
	}
	if err = started(mf, opName); err == nil {
		err = c.s.backups.Go(func(ctx context.Context) {
			defer runningBackups.Delete(maker)
			done, err := c.makeBackup(ctx, src, mf, rev, bop)
			if err != nil {
				c.s.log.Error("cluster backup failed", "backup", mf.Name, "err", err)
			}
			c.s.backups.CountOp("create", err)
			c.forgetBackupTotals()
			finish(done, err)
		})
	}
	if err != nil {
		c.abandonBackup(context.WithoutCancel(ctx), mf, rev, bop, err)
		runningBackups.Delete(maker)
		return nil, toStatus(err)
	}
	return mf, nil
}

// createBackupAndWait makes a backup and waits for it (automated backups).
func (c *clusterMember) createBackupAndWait(ctx context.Context, name backup.Name, src tableRef, expire time.Time, opt backup.CreateOptions) error {
	ch := make(chan error, 1)
	_, err := c.startBackup(ctx, name, src, expire, opt, false, func(*backup.Manifest, string) error { return nil },
		func(_ *backup.Manifest, err error) { ch <- err })
	if err != nil {
		return err
	}
	return <-ch
}

// listBackups decodes the records of an instance's backups in one
// cluster id or all ("-").
func (c *clusterMember) listBackups(ctx context.Context, inst, cluster string) ([]*backup.Manifest, error) {
	recs, err := c.m.ListBackupRecords(ctx, inst+"/clusters/")
	if err != nil {
		return nil, recordStatus(err)
	}
	var list []*backup.Manifest
	for _, r := range recs {
		mf, _, err := backup.DecodeRecord(r.Value)
		if err != nil {
			c.s.log.Warn("skipping an undecodable backup record", "name", r.Name, "err", err)
			continue
		}
		if n := mf.BackupName(); n.Instance == inst && (cluster == "-" || cluster == n.Cluster) {
			list = append(list, mf)
		}
	}
	return list, nil
}

// makeBackup collects the parts and records the backup READY; on failure
// it removes the record and whatever files were written.
func (c *clusterMember) makeBackup(ctx context.Context, src tableRef, mf *backup.Manifest, rev int64, bop *backupOp) (*backup.Manifest, error) {
	parts, err := c.backupParts(ctx, src, mf.Objects)
	if err != nil {
		c.abandonBackup(context.WithoutCancel(ctx), mf, rev, bop, err)
		return nil, err
	}
	return c.recordDone(ctx, mf, mf.Complete(parts, c.s.opts.Clock.Now()), rev, bop)
}

// recordDone replaces the record of mf (at revision rev) with done, its
// finished form, ending its operation (if any) in the same transaction;
// when that fails it removes the backup as abandonBackup does.
func (c *clusterMember) recordDone(ctx context.Context, mf, done *backup.Manifest, rev int64, bop *backupOp) (*backup.Manifest, error) {
	err := c.endBackup(ctx, mf, done, rev, bop, nil)
	if err == nil {
		return done, nil
	}
	err = recordStatus(err)
	c.abandonBackup(context.WithoutCancel(ctx), mf, rev, bop, err)
	return nil, err
}

// abandonBackup removes a backup that was not finished, failing its
// operation (if any) with why.
func (c *clusterMember) abandonBackup(ctx context.Context, mf *backup.Manifest, rev int64, bop *backupOp, why error) {
	if err := c.endBackup(ctx, mf, nil, rev, bop, why); err != nil {
		c.s.log.Warn("remove the record of a failed backup", "backup", mf.Name, "err", err)
	}
}

// removeObjects deletes the files of a backup from the shared store.
func (c *clusterMember) removeObjects(prefix string) {
	dir := prefix
	if c.store == nil || dir == "" {
		return
	}
	names, err := c.store.List(dir, "")
	if err != nil {
		c.s.log.Warn("list the files of a backup", "objects", dir, "err", err)
		return
	}
	for _, n := range names {
		// The shared-directory store lists whole names, the S3 one trims
		// the prefix; a file's own name never starts with "backup.".
		if !strings.HasPrefix(n, dir) {
			n = dir + n
		}
		if err := c.store.Delete(n); err != nil {
			c.s.log.Warn("delete a file of a backup", "object", n, "err", err)
		}
	}
}

// rowSpan is rows [start, end) of a table; an empty end is the table's end.
type rowSpan struct{ start, end []byte }

// piecesOf cuts a span by a directory's tablets.
func piecesOf(d tablets.Directory, s rowSpan) []tablets.Tablet {
	var out []tablets.Tablet
	for i := d.Locate(s.start); i < len(d.Tablets); i++ {
		t := d.Tablets[i]
		if len(s.end) > 0 && bytes.Compare(t.Start, s.end) >= 0 {
			break
		}
		p := t
		if bytes.Compare(p.Start, s.start) < 0 {
			p.Start = s.start
		}
		if len(s.end) > 0 && (len(p.End) == 0 || bytes.Compare(p.End, s.end) > 0) {
			p.End = s.end
		}
		out = append(out, p)
	}
	return out
}

// backupParts has every tablet's owner write its part and returns the
// parts in key order.
func (c *clusterMember) backupParts(ctx context.Context, src tableRef, objects string) ([]backup.Part, error) {
	d, ok := c.m.Directory(src.name())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: table %s not found", src.table)
	}
	var (
		mu    sync.Mutex
		parts []backup.Part
		first error
		wg    sync.WaitGroup
		seq   atomic.Int64
		sem   = make(chan struct{}, backupRowsParallel)
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := time.Now().Add(c.opts.BackupPartWait)
	for _, t := range d.Tablets {
		wg.Add(1)
		go func(s rowSpan) {
			defer wg.Done()
			got, err := c.backupSpan(ctx, src, s, objects, &seq, sem, deadline)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = err
				}
				cancel()
				return
			}
			parts = append(parts, got...)
		}(rowSpan{t.Start, t.End})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	sort.Slice(parts, func(i, j int) bool { return bytes.Compare(parts[i].Start, parts[j].Start) < 0 })
	return parts, nil
}

// backupSpan has the owners of a span's rows write them, cutting the span
// again by a newer directory when an owner no longer holds its piece
// (after a move, a split, a failover take-over) and asking an owner that
// is down again once it is back, until deadline.
func (c *clusterMember) backupSpan(ctx context.Context, src tableRef, s rowSpan, objects string, seq *atomic.Int64, sem chan struct{}, deadline time.Time) ([]backup.Part, error) {
	var out []backup.Part
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d, ok := c.m.Directory(src.name())
		if !ok {
			return nil, status.Errorf(codes.NotFound, "ebbtable: table %s was deleted during the backup", src.table)
		}
		var failed []tablets.Tablet
		var last error
		for _, p := range piecesOf(d, s) {
			part, err := c.askBackupRows(ctx, src, p, d.Revision, objects, fmt.Sprintf("p%05d-", seq.Add(1)), sem)
			if err == nil {
				out = append(out, part)
				continue
			}
			if code := status.Code(err); code != codes.Unavailable && code != codes.Aborted {
				return nil, err
			}
			failed, last = append(failed, p), err
		}
		if len(failed) == 0 {
			return out, nil
		}
		if !time.Now().Before(deadline) {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: backup of %s: %s could not be read within %s (the backup needs every tablet; retry once its node is back, or taken over by failover): %v",
				src.table, failed[0], c.opts.BackupPartWait, last)
		}
		// Wait (briefly) for the directory to change (a move, a take-over)
		// or a down owner to come back, then ask again for the failed
		// pieces only.
		down := map[string]bool{}
		for _, p := range failed {
			if _, live := c.m.Node(p.Owner); !live {
				down[p.Owner] = true
			}
		}
		wctx, cancel := context.WithTimeout(ctx, c.s.knobs().backupRetryEvery.or(backupRetryEvery))
		c.m.WaitFor(wctx, func() bool {
			if nd, ok := c.m.Directory(src.name()); !ok || nd.Revision != d.Revision {
				return true
			}
			for id := range down {
				if _, live := c.m.Node(id); live {
					return true
				}
			}
			return false
		})
		cancel()
		if len(failed) == 1 {
			s = rowSpan{failed[0].Start, failed[0].End}
			continue
		}
		for _, p := range failed {
			more, err := c.backupSpan(ctx, src, rowSpan{p.Start, p.End}, objects, seq, sem, deadline)
			if err != nil {
				return nil, err
			}
			out = append(out, more...)
		}
		return out, nil
	}
}

// askBackupRows has the owner of one piece (here or another node) write it.
func (c *clusterMember) askBackupRows(ctx context.Context, src tableRef, p tablets.Tablet, rev int64, objects, prefix string, sem chan struct{}) (backup.Part, error) {
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return backup.Part{}, ctx.Err()
	}
	defer func() { <-sem }()
	if h := c.s.knobs().backupRows.get(); h != nil { // tests
		h(p)
	}
	req := &clusterpb.BackupRowsRequest{Table: src.name(), Start: p.Start, End: p.End, Revision: rev, Objects: objects, FilePrefix: prefix}
	var resp *clusterpb.BackupRowsResponse
	var err error
	if p.Owner == c.opts.NodeID {
		resp, err = c.backupRows(ctx, req)
	} else {
		n, ok := c.m.Node(p.Owner)
		if !ok {
			return backup.Part{}, status.Errorf(codes.Unavailable, "ebbtable: %s: its node %s is down; the backup needs every tablet", p, p.Owner)
		}
		cc, cerr := c.conn(n.Addr)
		if cerr != nil {
			return backup.Part{}, status.Errorf(codes.Unavailable, "ebbtable: node %s: %v", n.ID, cerr)
		}
		resp, err = clusterpb.NewClusterClient(cc).BackupRows(clusterForward(ctx), req)
	}
	if err != nil {
		return backup.Part{}, err
	}
	var files []backup.FileInfo
	if err := json.Unmarshal(resp.Files, &files); err != nil {
		return backup.Part{}, status.Errorf(codes.Internal, "ebbtable: node %s's backup part: %v", p.Owner, err)
	}
	return backup.Part{Start: p.Start, End: p.End, Files: files, Node: resp.Node, VersionTime: time.UnixMicro(resp.VersionMicros)}, nil
}

// backupRows is an owner's part of a backup: the rows' cells from one
// snapshot, taken and read while the gates of the tablets holding them are
// held (a move waits), written to the shared store.
func (c *clusterMember) backupRows(ctx context.Context, req *clusterpb.BackupRowsRequest) (*clusterpb.BackupRowsResponse, error) {
	if err := c.needStore(); err != nil {
		return nil, err
	}
	ref, err := parseTable(req.Table)
	if err != nil {
		return nil, toStatus(err)
	}
	if req.Objects == "" || strings.Contains(req.FilePrefix, "/") {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: a backup part needs an object directory and a plain file prefix")
	}
	c.catchUpTo(ctx, req.Revision)
	if h := c.s.knobs().backupOwner.get(); h != nil { // tests
		if err := h(ctx, c.opts.NodeID); err != nil {
			return nil, err
		}
	}
	tmpRoot := filepath.Join(c.s.opts.DataDir, "backups")
	if err := os.MkdirAll(tmpRoot, 0o755); err != nil {
		return nil, toStatus(err)
	}
	// A ".tmp-" directory at the backups root is removed at the next start
	// if the process dies first.
	tmp, err := os.MkdirTemp(tmpRoot, ".tmp-cluster-part-")
	if err != nil {
		return nil, toStatus(err)
	}
	defer os.RemoveAll(tmp)
	files, at, err := c.writeOwnedRows(ctx, ref, rowSpan{req.Start, req.End}, tmp, req.FilePrefix)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if err := c.upload(filepath.Join(tmp, f.Name), req.Objects+f.Name); err != nil {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: write backup file %s to the shared store: %v", f.Name, err)
		}
	}
	enc, err := json.Marshal(files)
	if err != nil {
		return nil, toStatus(err)
	}
	return &clusterpb.BackupRowsResponse{Files: enc, VersionMicros: at.UnixMicro(), Node: c.opts.NodeID}, nil
}

// writeOwnedRows writes the span's cells into dir, if this node owns every
// tablet holding them (else UNAVAILABLE: the coordinator asks again).
func (c *clusterMember) writeOwnedRows(ctx context.Context, ref tableRef, s rowSpan, dir, prefix string) ([]backup.FileInfo, time.Time, error) {
	owned := func() (tablets.Directory, []tablets.Tablet, error) {
		d, ok := c.m.Directory(ref.name())
		if !ok {
			return d, nil, status.Errorf(codes.NotFound, "ebbtable: table %s not found", ref.table)
		}
		ps := piecesOf(d, s)
		for _, p := range ps {
			if p.Owner != c.opts.NodeID {
				return d, nil, status.Errorf(codes.Unavailable, "ebbtable: %s is not owned by node %s; retry", p, c.opts.NodeID)
			}
		}
		return d, ps, nil
	}
	d, ps, err := owned()
	if err != nil {
		return nil, time.Time{}, err
	}
	if !c.m.Live() {
		return nil, time.Time{}, status.Errorf(codes.Unavailable, "ebbtable: node %s does not hold its lease now; retry", c.opts.NodeID)
	}
	for _, p := range ps {
		g := c.gate(d.Table, p.ID)
		g.RLock()
		defer g.RUnlock()
	}
	// Owned still, by the same tablets (a split meanwhile makes a tablet
	// whose gate is not held), now that no move can pass the gates.
	_, again, err := owned()
	if err != nil {
		return nil, time.Time{}, err
	}
	if len(again) != len(ps) {
		return nil, time.Time{}, status.Errorf(codes.Unavailable, "ebbtable: the tablets of rows [%q, %q) changed; retry", s.start, s.end)
	}
	for i := range again {
		if again[i].ID != ps[i].ID {
			return nil, time.Time{}, status.Errorf(codes.Unavailable, "ebbtable: the tablets of rows [%q, %q) changed; retry", s.start, s.end)
		}
	}
	snap, err := c.s.engine.SnapshotTable(ref.instance, ref.table)
	if err != nil {
		return nil, time.Time{}, toStatus(err)
	}
	defer snap.Close()
	if snap.Meta.ID != d.TableID {
		return nil, time.Time{}, status.Errorf(codes.FailedPrecondition, "ebbtable: table %s has id %d here, %d in the cluster", ref.table, snap.Meta.ID, d.TableID)
	}
	files, err := backup.WriteRows(ctx, c.s.engine, snap, s.start, s.end, dir, prefix, 0)
	if err != nil {
		return nil, time.Time{}, toStatus(err)
	}
	return files, snap.Time, nil
}

// upload copies a local file to the shared store.
func (c *clusterMember) upload(path, object string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := c.store.CreateObject(object)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, f); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// download copies an object of the shared store to a local file, checking
// its size.
func (c *clusterMember) download(ctx context.Context, object, path string, want int64) error {
	r, size, err := c.store.ReadObject(ctx, object)
	if err != nil {
		return err
	}
	defer r.Close()
	if size != want {
		return fmt.Errorf("ebbtable: backup file %s is %d bytes, the manifest says %d", object, size, want)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := copyChunks(ctx, r, size, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// sweepBackups deletes the cluster's expired backups and gives up those
// whose maker is gone while CREATING (sweepOrphanBackup), run by every
// node's backup expiry loop; when two nodes race, the record's revision
// lets one delete it.
func (c *clusterMember) sweepBackups(ctx context.Context) {
	if c.store == nil || c.m == nil {
		return
	}
	c.sweepRestores(ctx) // clusterrestore.go
	recs, err := c.m.ListBackupRecords(ctx, "")
	if err != nil {
		c.s.log.Warn("list cluster backups for expiry", "err", err)
		return
	}
	now := c.s.opts.Clock.Now()
	for _, r := range recs {
		mf, maker, err := backup.DecodeRecord(r.Value)
		if err == nil && mf.State != backup.Ready {
			c.sweepOrphanBackup(ctx, r, mf, maker) // clusterbackupsweep.go
			continue
		}
		if err != nil || mf.ExpireTime.After(now) || c.restoring(r.Value) {
			continue
		}
		if err := c.m.DeleteBackupRecord(ctx, r.Name, r.Revision); err != nil {
			continue // changed or deleted by another node meanwhile
		}
		c.removeObjects(mf.Objects)
		if err := c.s.forgetIAM(mf.Name); err != nil {
			c.s.log.Warn("forget an expired backup's IAM policy", "backup", mf.Name, "err", err)
		}
		c.s.backups.CountExpired()
		c.forgetBackupTotals()
		c.s.log.Info("deleted expired backup", "backup", mf.Name, "expired", mf.ExpireTime.UTC().Format(time.RFC3339))
	}
}

// runningBackups holds the tokens of the backups this process is making,
// so a DeleteBackup here can tell a live job from one that died with an
// earlier process of this node.
var runningBackups sync.Map

// GetBackup reads a backup's record.
func (a *clusterAdmin) GetBackup(ctx context.Context, req *adminpb.GetBackupRequest) (*adminpb.Backup, error) {
	name, err := parseBackup(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := a.c.needStore(); err != nil {
		return nil, err
	}
	mf, _, _, err := a.c.readBackup(ctx, name)
	if err != nil {
		return nil, err
	}
	return backupToProto(mf, a.s.opts.Clock.Now()), nil
}

// ListBackups lists the cluster's backups, from etcd.
func (a *clusterAdmin) ListBackups(ctx context.Context, req *adminpb.ListBackupsRequest) (*adminpb.ListBackupsResponse, error) {
	inst, cluster, err := parseCluster(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	if strings.TrimSpace(req.GetFilter()) != "" {
		return nil, status.Errorf(codes.Unimplemented, "ebbtable: ListBackups filters are not supported (got %q); list all and filter on the client", req.GetFilter())
	}
	if err := a.c.needStore(); err != nil {
		return nil, err
	}
	list, err := a.c.listBackups(ctx, inst, cluster)
	if err != nil {
		return nil, err
	}
	return listBackupsPage(list, req, a.s.opts.Clock.Now())
}

// UpdateBackup changes a backup's expire time or hot_to_standard_time in
// its record.
func (a *clusterAdmin) UpdateBackup(ctx context.Context, req *adminpb.UpdateBackupRequest) (*adminpb.Backup, error) {
	name, err := parseBackup(req.GetBackup().GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	paths, err := backupUpdatePaths(req)
	if err != nil {
		return nil, err
	}
	if err := a.c.needStore(); err != nil {
		return nil, err
	}
	r, err := a.c.m.GetBackupRecord(ctx, name.String())
	if err != nil {
		return nil, recordStatus(err)
	}
	mf, node, err := backup.DecodeRecord(r.Value)
	if err != nil {
		return nil, status.Errorf(codes.DataLoss, "%v", err)
	}
	if mf.State != backup.Ready {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: backup %s is still being created", name)
	}
	now := a.s.opts.Clock.Now()
	for _, p := range paths {
		switch p {
		case "expire_time":
			var expire time.Time
			if e := req.GetBackup().GetExpireTime(); e != nil {
				expire = e.AsTime()
			}
			mf, err = mf.WithExpiry(expire, now)
		case "hot_to_standard_time":
			var at *time.Time
			if h := req.GetBackup().GetHotToStandardTime(); h != nil {
				t := h.AsTime()
				at = &t
			}
			mf, err = mf.WithHotToStandard(at, now)
		}
		if err != nil {
			return nil, toStatus(err)
		}
	}
	enc, err := backup.EncodeRecord(mf, node, backup.RecordRestoring(r.Value)...)
	if err != nil {
		return nil, toStatus(err)
	}
	if _, err := a.c.m.UpdateBackupRecord(ctx, name.String(), enc, r.Revision); err != nil {
		return nil, recordStatus(err)
	}
	return backupToProto(mf, now), nil
}

// backupRunning reports whether the maker of a backup in state CREATING
// ("NODE/TOKEN") may still be making it: a live other node, or this
// process's own job. A backup whose maker died (the node left, or this
// node restarted) can be deleted.
func (c *clusterMember) backupRunning(maker string) bool {
	node, _, _ := strings.Cut(maker, "/")
	if node == c.opts.NodeID {
		_, ok := runningBackups.Load(maker)
		return ok
	}
	_, live := c.m.Node(node)
	return live
}

// restoring reports whether a restore that may still be at work reads the
// backup of an encoded record.
func (c *clusterMember) restoring(rec []byte) bool {
	for _, m := range backup.RecordRestoring(rec) {
		if c.backupRunning(m) {
			return true
		}
	}
	return false
}

// markRestoring adds (or removes) a restore to a backup's record, so
// DeleteBackup and the expiry sweep leave the backup alone meanwhile.
// Adding checks the backup can be restored and returns its record as
// marked. Makers that are no longer running are dropped on the way.
func (c *clusterMember) markRestoring(ctx context.Context, name backup.Name, maker string, add bool) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		r, err := c.m.GetBackupRecord(ctx, name.String())
		if err != nil {
			return nil, recordStatus(err)
		}
		mf, node, err := backup.DecodeRecord(r.Value)
		if err != nil {
			return nil, status.Errorf(codes.DataLoss, "%v", err)
		}
		if add {
			if mf.State != backup.Ready {
				return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: backup %s is still being created", name)
			}
			if !mf.ExpireTime.After(c.s.opts.Clock.Now()) {
				return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: backup %s expired at %s", name, mf.ExpireTime.UTC().Format(time.RFC3339))
			}
		}
		var list []string
		for _, m := range backup.RecordRestoring(r.Value) {
			if m != maker && c.backupRunning(m) {
				list = append(list, m)
			}
		}
		if add {
			list = append(list, maker)
		}
		enc, err := backup.EncodeRecord(mf, node, list...)
		if err != nil {
			return nil, toStatus(err)
		}
		_, err = c.m.UpdateBackupRecord(ctx, name.String(), enc, r.Revision)
		if err == nil {
			return enc, nil
		}
		if !errors.Is(err, clusteretcd.ErrRecordChanged) || attempt >= 8 {
			return nil, recordStatus(err)
		}
	}
}

// DeleteBackup removes a backup's record, then its files. A backup being
// created cannot be deleted while its maker may still be at work.
func (a *clusterAdmin) DeleteBackup(ctx context.Context, req *adminpb.DeleteBackupRequest) (*emptypb.Empty, error) {
	name, err := parseBackup(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := a.c.needStore(); err != nil {
		return nil, err
	}
	r, err := a.c.m.GetBackupRecord(ctx, name.String())
	if err != nil {
		return nil, recordStatus(err)
	}
	mf, node, err := backup.DecodeRecord(r.Value)
	if err != nil {
		return nil, status.Errorf(codes.DataLoss, "%v", err)
	}
	if mf.State != backup.Ready && a.c.backupRunning(node) {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: backup %s is still being created (by node %s)", name, node)
	}
	if a.c.restoring(r.Value) {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: backup %s is being restored", name)
	}
	if err := a.c.m.DeleteBackupRecord(ctx, name.String(), r.Revision); err != nil {
		return nil, recordStatus(err)
	}
	a.c.removeObjects(mf.Objects)
	a.c.forgetBackupTotals()
	if err := a.s.forgetIAM(req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &emptypb.Empty{}, nil
}

// CopyBackup copies a backup's files in the shared store to a new backup
// (of any cluster id or instance), recorded in etcd like any other.
func (a *clusterAdmin) CopyBackup(ctx context.Context, req *adminpb.CopyBackupRequest) (*longrunningpb.Operation, error) {
	c := a.c
	src, dst, expire, err := parseCopyBackup(req)
	if err != nil {
		return nil, err
	}
	if err := c.needStore(); err != nil {
		return nil, err
	}
	orig, _, _, err := c.readBackup(ctx, src)
	if err != nil {
		return nil, err
	}
	now := a.s.opts.Clock.Now()
	if orig.State != backup.Ready {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: backup %s is still being created", src)
	}
	if !orig.ExpireTime.After(now) {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: backup %s expired at %s", src, orig.ExpireTime.UTC().Format(time.RFC3339))
	}
	mf, err := orig.CopyAs(dst, dst.ObjectPrefix(randomID()), now, expire)
	if err != nil {
		return nil, toStatus(err)
	}
	meta := &adminpb.CopyBackupMetadata{Name: mf.Name, SourceBackupInfo: backupInfoProto(orig), Progress: &adminpb.OperationProgress{StartTime: ts(now)}}
	maker, opName, rev, err := c.createBackupWithOp(ctx, mf, opKindCopy, meta)
	if err != nil {
		return nil, err
	}
	bop := &backupOp{name: opName, maker: maker, result: func(done *backup.Manifest) (proto.Message, proto.Message) {
		m := proto.Clone(meta).(*adminpb.CopyBackupMetadata)
		m.Progress = &adminpb.OperationProgress{ProgressPercent: 100, StartTime: ts(done.StartTime), EndTime: ts(done.EndTime)}
		return backupToProto(done, c.s.opts.Clock.Now()), m
	}}
	op, err := a.s.ops.pendingNamed(opName, meta)
	if err == nil {
		err = a.s.backups.Go(func(ctx context.Context) {
			defer runningBackups.Delete(maker)
			done, err := c.copyBackup(ctx, orig, mf, rev, bop)
			c.s.backups.CountOp("copy", err)
			c.forgetBackupTotals()
			if err != nil {
				c.s.log.Error("cluster backup copy failed", "backup", mf.Name, "err", err)
				op.finish(nil, nil, toStatus(err))
				return
			}
			meta.Progress = &adminpb.OperationProgress{ProgressPercent: 100, StartTime: ts(done.StartTime), EndTime: ts(done.EndTime)}
			op.finish(backupToProto(done, a.s.opts.Clock.Now()), meta, nil)
		})
	}
	if err != nil {
		c.abandonBackup(context.WithoutCancel(ctx), mf, rev, bop, err)
		runningBackups.Delete(maker)
		return nil, toStatus(err)
	}
	return op.wait(a.s.opWait), nil
}

// copyBackup copies the files and records the copy READY; on failure it
// removes the record and the files copied.
func (c *clusterMember) copyBackup(ctx context.Context, orig, mf *backup.Manifest, rev int64, bop *backupOp) (*backup.Manifest, error) {
	var err error
	for _, f := range orig.AllFiles() {
		if err = c.copyObject(ctx, orig.Objects+f.Name, mf.Objects+f.Name, f.Bytes); err != nil {
			err = status.Errorf(codes.Unavailable, "ebbtable: copy backup file %s: %v", f.Name, err)
			break
		}
	}
	if err != nil {
		c.abandonBackup(context.WithoutCancel(ctx), mf, rev, bop, err)
		return nil, err
	}
	return c.recordDone(ctx, mf, mf.Copied(c.s.opts.Clock.Now()), rev, bop)
}

// copyObject copies one object of the shared store to a new name.
func (c *clusterMember) copyObject(ctx context.Context, from, to string, want int64) error {
	r, size, err := c.store.ReadObject(ctx, from)
	if err != nil {
		return err
	}
	defer r.Close()
	if size != want {
		return fmt.Errorf("ebbtable: backup file %s is %d bytes, the manifest says %d", from, size, want)
	}
	w, err := c.store.CreateObject(to)
	if err != nil {
		return err
	}
	if err := copyChunks(ctx, r, size, w); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// copyChunks copies an object's size bytes to w, a MiB at a time.
func copyChunks(ctx context.Context, r storage.ObjectReader, size int64, w io.Writer) error {
	buf := make([]byte, min(size, 1<<20))
	for off := int64(0); off < size; {
		n := min(int64(len(buf)), size-off)
		if err := r.ReadAt(ctx, buf[:n], off); err != nil {
			return err
		}
		if _, err := w.Write(buf[:n]); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// listBackupsPage orders and pages a list of backups as ListBackups asks.
func listBackupsPage(list []*backup.Manifest, req *adminpb.ListBackupsRequest, now time.Time) (*adminpb.ListBackupsResponse, error) {
	if ob := strings.Fields(req.GetOrderBy()); len(ob) > 0 {
		less, ok := backupOrder[ob[0]]
		desc := len(ob) == 2 && strings.EqualFold(ob[1], "desc")
		if !ok || len(ob) > 2 || (len(ob) == 2 && !desc && !strings.EqualFold(ob[1], "asc")) {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: order_by %q: want one of name, source_table, expire_time, start_time, end_time, size_bytes, state, optionally followed by desc", req.GetOrderBy())
		}
		sort.SliceStable(list, func(i, j int) bool {
			if desc {
				return less(list[j], list[i])
			}
			return less(list[i], list[j])
		})
	}
	start, end, next, err := page(req.GetPageToken(), req.GetPageSize(), len(list))
	if err != nil {
		return nil, err
	}
	resp := &adminpb.ListBackupsResponse{NextPageToken: next}
	for _, mf := range list[start:end] {
		resp.Backups = append(resp.Backups, backupToProto(mf, now))
	}
	return resp, nil
}

// backupUpdatePaths checks an UpdateBackup's mask.
func backupUpdatePaths(req *adminpb.UpdateBackupRequest) ([]string, error) {
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: update_mask must name expire_time or hot_to_standard_time")
	}
	for _, p := range paths {
		if p != "expire_time" && p != "hot_to_standard_time" {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: %q cannot be updated (expire_time and hot_to_standard_time can)", p)
		}
	}
	return paths, nil
}

// BackupRows is an owner's part of a cluster backup (backupRows).
func (s *clusterService) BackupRows(ctx context.Context, req *clusterpb.BackupRowsRequest) (*clusterpb.BackupRowsResponse, error) {
	return s.c.backupRows(ctx, req)
}

// createBackupRecord writes the etcd record of a backup this node makes
// (its maker: this node and a random id, counted as running here), and
// returns the maker and the record's revision; a gRPC status on error.
func (c *clusterMember) createBackupRecord(ctx context.Context, name string, mf *backup.Manifest) (maker string, rev int64, err error) {
	maker = c.opts.NodeID + "/" + randomID()
	enc, err := backup.EncodeRecord(mf, maker)
	if err != nil {
		return "", 0, toStatus(err)
	}
	runningBackups.Store(maker, true)
	rev, err = c.m.CreateBackupRecord(ctx, name, enc)
	if err != nil {
		runningBackups.Delete(maker)
		return "", 0, recordStatus(err)
	}
	return maker, rev, nil
}
