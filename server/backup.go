package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/backup"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// MetaRestoreRetention is the request metadata key with which RestoreTable
// chooses what the restored table does with the backup's row deletion
// policy: drop (the default), pause or apply. The Admin API has no field
// for it, so any client that can attach gRPC metadata can set it.
const MetaRestoreRetention = "x-ebbtable-restore-retention"

// defaultOpWait is how long a backup RPC waits for its operation to finish
// before it returns the operation still running: small backups and
// restores come back done, so clients need not poll; big ones are polled
// through GetOperation. (Real time: it paces a response, it decides nothing.)
const defaultOpWait = 2 * time.Second

// parseCluster checks "projects/P/instances/I/clusters/C". Any cluster id
// is accepted for now; "-" only where listing allows it.
func parseCluster(name string) (instance, cluster string, err error) {
	i := strings.Index(name, "/clusters/")
	if i < 0 {
		return "", "", fmt.Errorf("%w: %q is not a cluster name (projects/PROJECT/instances/INSTANCE/clusters/CLUSTER)", errInvalid, name)
	}
	if instance, err = parseInstance(name[:i]); err != nil {
		return "", "", err
	}
	cluster = name[i+len("/clusters/"):]
	if cluster == "" || strings.Contains(cluster, "/") {
		return "", "", fmt.Errorf("%w: %q is not a cluster name", errInvalid, name)
	}
	return instance, cluster, nil
}

// parseBackup checks "projects/P/instances/I/clusters/C/backups/B".
func parseBackup(name string) (backup.Name, error) {
	i := strings.Index(name, "/backups/")
	if i < 0 {
		return backup.Name{}, fmt.Errorf("%w: %q is not a backup name (projects/PROJECT/instances/INSTANCE/clusters/CLUSTER/backups/BACKUP)", errInvalid, name)
	}
	inst, cluster, err := parseCluster(name[:i])
	if err != nil {
		return backup.Name{}, err
	}
	id := name[i+len("/backups/"):]
	if id == "" || strings.Contains(id, "/") || cluster == "-" {
		return backup.Name{}, fmt.Errorf("%w: %q is not a backup name", errInvalid, name)
	}
	return backup.Name{Instance: inst, Cluster: cluster, ID: id}, nil
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// backupToProto renders a manifest as the API's Backup.
// A hot backup reports HOT until its hot_to_standard_time, STANDARD after.
func backupToProto(mf *backup.Manifest, now time.Time) *adminpb.Backup {
	b := &adminpb.Backup{
		Name:         mf.Name,
		SourceTable:  mf.SourceTable,
		SourceBackup: mf.SourceBackup,
		ExpireTime:   ts(mf.ExpireTime),
		StartTime:    ts(mf.StartTime),
		EndTime:      ts(mf.EndTime),
		SizeBytes:    mf.SizeBytes,
		State:        adminpb.Backup_READY,
		BackupType:   adminpb.Backup_STANDARD,
		EncryptionInfo: &adminpb.EncryptionInfo{
			EncryptionType: adminpb.EncryptionInfo_GOOGLE_DEFAULT_ENCRYPTION,
		},
	}
	if mf.State == backup.Creating {
		b.State = adminpb.Backup_CREATING
	}
	if mf.HotToStandard != nil {
		b.HotToStandardTime = ts(*mf.HotToStandard)
	}
	if mf.Hot && (mf.HotToStandard == nil || now.Before(*mf.HotToStandard)) {
		b.BackupType = adminpb.Backup_HOT
	}
	return b
}

func backupInfoProto(mf *backup.Manifest) *adminpb.BackupInfo {
	return &adminpb.BackupInfo{
		Backup:       mf.Name,
		StartTime:    ts(mf.StartTime),
		EndTime:      ts(mf.EndTime),
		SourceTable:  mf.SourceTable,
		SourceBackup: mf.SourceBackup,
	}
}

// restoreInfoProto is a restored table's RestoreInfo.
func restoreInfoProto(r *table.Restored) *adminpb.RestoreInfo {
	return &adminpb.RestoreInfo{
		SourceType: adminpb.RestoreSourceType_BACKUP,
		SourceInfo: &adminpb.RestoreInfo_BackupInfo{BackupInfo: &adminpb.BackupInfo{
			Backup:       r.Backup,
			StartTime:    timestamppb.New(time.UnixMicro(r.StartMicros)),
			EndTime:      timestamppb.New(time.UnixMicro(r.EndMicros)),
			SourceTable:  r.SourceTable,
			SourceBackup: r.SourceBackup,
		}},
	}
}

// createBackupArgs is a CreateBackupRequest checked: the source table, the
// backup's name, expiry and options.
type createBackupArgs struct {
	src    tableRef
	name   backup.Name
	expire time.Time
	opt    backup.CreateOptions
}

// parseCreateBackup checks a CreateBackupRequest's names and options (the
// expiry is the backup manager's to check); errors are statuses.
func parseCreateBackup(req *adminpb.CreateBackupRequest) (createBackupArgs, error) {
	var out createBackupArgs
	inst, cluster, err := parseCluster(req.GetParent())
	if err != nil {
		return out, toStatus(err)
	}
	src, err := parseTable(req.GetBackup().GetSourceTable())
	if err != nil {
		return out, toStatus(err)
	}
	if src.instance != inst {
		return out, status.Errorf(codes.InvalidArgument, "ebbtable: source table %s is not in instance %s", src.name(), inst)
	}
	out.src = src
	out.opt = backup.CreateOptions{Hot: req.GetBackup().GetBackupType() == adminpb.Backup_HOT}
	if h := req.GetBackup().GetHotToStandardTime(); h != nil {
		if !out.opt.Hot {
			return out, status.Error(codes.InvalidArgument, "ebbtable: hot_to_standard_time needs backup_type HOT")
		}
		out.opt.HotToStandard = h.AsTime()
	}
	if e := req.GetBackup().GetExpireTime(); e != nil {
		out.expire = e.AsTime()
	}
	out.name = backup.Name{Instance: inst, Cluster: cluster, ID: req.GetBackupId()}
	return out, nil
}

// CreateBackup takes a consistent image of the table now and writes it in
// the background; the operation finishes when the backup is READY.
func (a *adminServer) CreateBackup(ctx context.Context, req *adminpb.CreateBackupRequest) (*longrunningpb.Operation, error) {
	cb, err := parseCreateBackup(req)
	if err != nil {
		return nil, err
	}
	src, expire, opt, name := cb.src, cb.expire, cb.opt, cb.name
	mf, job, err := a.s.backups.CreateWith(name, src.table, expire, opt)
	if err != nil {
		return nil, toStatus(err)
	}
	a.s.attachProgress(ctx, job.Progress())
	meta := &adminpb.CreateBackupMetadata{Name: mf.Name, SourceTable: mf.SourceTable, StartTime: ts(mf.StartTime)}
	op, err := a.s.ops.pending(mf.Name, meta)
	if err != nil {
		return nil, err
	}
	go func() {
		done, err := job.Result()
		if err != nil {
			op.finish(nil, nil, toStatus(err))
			return
		}
		op.finish(backupToProto(done, a.s.opts.Clock.Now()), &adminpb.CreateBackupMetadata{
			Name: done.Name, SourceTable: done.SourceTable, StartTime: ts(done.StartTime), EndTime: ts(done.EndTime),
		}, nil)
	}()
	return op.wait(a.s.opWait), nil
}

// GetBackup returns one backup.
func (a *adminServer) GetBackup(ctx context.Context, req *adminpb.GetBackupRequest) (*adminpb.Backup, error) {
	name, err := parseBackup(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	mf, err := a.s.backups.Get(name)
	if err != nil {
		return nil, toStatus(err)
	}
	return backupToProto(mf, a.s.opts.Clock.Now()), nil
}

// UpdateBackup changes a backup's expire time, the only field that can be
// updated.
func (a *adminServer) UpdateBackup(ctx context.Context, req *adminpb.UpdateBackupRequest) (*adminpb.Backup, error) {
	name, err := parseBackup(req.GetBackup().GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	paths, err := backupUpdatePaths(req)
	if err != nil {
		return nil, err
	}
	var mf *backup.Manifest
	for _, p := range paths {
		switch p {
		case "expire_time":
			var expire time.Time
			if e := req.GetBackup().GetExpireTime(); e != nil {
				expire = e.AsTime()
			}
			mf, err = a.s.backups.UpdateExpiry(name, expire)
		case "hot_to_standard_time":
			var at *time.Time
			if h := req.GetBackup().GetHotToStandardTime(); h != nil {
				t := h.AsTime()
				at = &t
			}
			mf, err = a.s.backups.UpdateHotToStandard(name, at)
		}
		if err != nil {
			return nil, toStatus(err)
		}
	}
	return backupToProto(mf, a.s.opts.Clock.Now()), nil
}

// DeleteBackup removes a backup.
func (a *adminServer) DeleteBackup(ctx context.Context, req *adminpb.DeleteBackupRequest) (*emptypb.Empty, error) {
	name, err := parseBackup(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := a.s.backups.Delete(name); err != nil {
		return nil, toStatus(err)
	}
	if err := a.s.forgetIAM(req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &emptypb.Empty{}, nil
}

// backupOrder sorts listed backups by an order_by clause.
var backupOrder = map[string]func(a, b *backup.Manifest) bool{
	"name":         func(a, b *backup.Manifest) bool { return a.Name < b.Name },
	"source_table": func(a, b *backup.Manifest) bool { return a.SourceTable < b.SourceTable },
	"expire_time":  func(a, b *backup.Manifest) bool { return a.ExpireTime.Before(b.ExpireTime) },
	"start_time":   func(a, b *backup.Manifest) bool { return a.StartTime.Before(b.StartTime) },
	"end_time":     func(a, b *backup.Manifest) bool { return a.EndTime.Before(b.EndTime) },
	"size_bytes":   func(a, b *backup.Manifest) bool { return a.SizeBytes < b.SizeBytes },
	"state":        func(a, b *backup.Manifest) bool { return a.State < b.State },
}

// ListBackups lists the backups of one cluster, or of all ("-"), ordered
// by name or by order_by (one field, optionally " desc"). Filters are not
// supported.
func (a *adminServer) ListBackups(ctx context.Context, req *adminpb.ListBackupsRequest) (*adminpb.ListBackupsResponse, error) {
	inst, cluster, err := parseCluster(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	if strings.TrimSpace(req.GetFilter()) != "" {
		return nil, status.Errorf(codes.Unimplemented, "ebbtable: ListBackups filters are not supported (got %q); list all and filter on the client", req.GetFilter())
	}
	return listBackupsPage(a.s.backups.List(inst, cluster), req, a.s.opts.Clock.Now())
}

// restoreRetention reads the retention choice of a RestoreTable request.
func restoreRetention(ctx context.Context) (table.Retention, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(MetaRestoreRetention)
	if len(v) == 0 {
		return table.RetentionDrop, nil
	}
	return table.ParseRetention(strings.TrimSpace(v[len(v)-1]))
}

// RestoreTable creates a new table from a backup. The operation finishes
// when the table is visible, complete.
func (a *adminServer) RestoreTable(ctx context.Context, req *adminpb.RestoreTableRequest) (*longrunningpb.Operation, error) {
	inst, err := parseInstance(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	name, err := parseBackup(req.GetBackup())
	if err != nil {
		return nil, toStatus(err)
	}
	retention, err := restoreRetention(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	mf, job, err := a.s.backups.Restore(name, inst, req.GetTableId(), retention)
	if err != nil {
		return nil, toStatus(err)
	}
	a.s.attachProgress(ctx, job.Progress())
	tableName := inst + "/tables/" + req.GetTableId()
	meta := &adminpb.RestoreTableMetadata{
		Name:       tableName,
		SourceType: adminpb.RestoreSourceType_BACKUP,
		SourceInfo: &adminpb.RestoreTableMetadata_BackupInfo{BackupInfo: backupInfoProto(mf)},
		Progress:   &adminpb.OperationProgress{StartTime: timestamppb.New(a.s.opts.Clock.Now())},
	}
	op, err := a.s.ops.pending(tableName, meta)
	if err != nil {
		return nil, err
	}
	go func() {
		m, err := job.Result()
		if err != nil {
			op.finish(nil, nil, toStatus(err))
			return
		}
		meta.Progress = &adminpb.OperationProgress{ProgressPercent: 100, StartTime: meta.Progress.StartTime, EndTime: timestamppb.New(a.s.opts.Clock.Now())}
		op.finish(a.tableToProto(m, adminpb.Table_SCHEMA_VIEW), meta, nil)
	}()
	return op.wait(a.s.opWait), nil
}

// parseCopyBackup reads a CopyBackup request: the source backup, the new
// backup's name and its expiry; INVALID_ARGUMENT when a name is malformed.
func parseCopyBackup(req *adminpb.CopyBackupRequest) (src, dst backup.Name, expire time.Time, err error) {
	inst, cluster, err := parseCluster(req.GetParent())
	if err != nil {
		return src, dst, expire, toStatus(err)
	}
	if src, err = parseBackup(req.GetSourceBackup()); err != nil {
		return src, dst, expire, toStatus(err)
	}
	if e := req.GetExpireTime(); e != nil {
		expire = e.AsTime()
	}
	return src, backup.Name{Instance: inst, Cluster: cluster, ID: req.GetBackupId()}, expire, nil
}

// CopyBackup copies a backup, to any cluster of any instance.
func (a *adminServer) CopyBackup(ctx context.Context, req *adminpb.CopyBackupRequest) (*longrunningpb.Operation, error) {
	src, dst, expire, err := parseCopyBackup(req)
	if err != nil {
		return nil, err
	}
	mf, job, err := a.s.backups.Copy(src, dst, expire)
	if err != nil {
		return nil, toStatus(err)
	}
	srcInfo, err := a.s.backups.Get(src)
	if err != nil {
		srcInfo = mf
	}
	meta := &adminpb.CopyBackupMetadata{
		Name:             mf.Name,
		SourceBackupInfo: backupInfoProto(srcInfo),
		Progress:         &adminpb.OperationProgress{StartTime: ts(mf.StartTime)},
	}
	op, err := a.s.ops.pending(mf.Name, meta)
	if err != nil {
		return nil, err
	}
	go func() {
		done, err := job.Result()
		if err != nil {
			op.finish(nil, nil, toStatus(err))
			return
		}
		meta.Progress = &adminpb.OperationProgress{ProgressPercent: 100, StartTime: ts(done.StartTime), EndTime: ts(done.EndTime)}
		op.finish(backupToProto(done, a.s.opts.Clock.Now()), meta, nil)
	}()
	return op.wait(a.s.opWait), nil
}
