package server

import (
	"context"
	"encoding/json"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// RestoreTable in cluster mode. A backup lives in the data directory of
// the node that took it (backups are not cluster-aware yet), so the node
// that receives the restore runs it, and owns every tablet of the new
// table until tablets move. Two schema log entries:
//
//   - RestoreTable creates the table's directory (one tablet, owned by the
//     receiving node) and its id; the receiving node starts the restore
//     under that id, the others do nothing yet (requests for the table are
//     forwarded to the receiving node, which answers NotFound until the
//     restore commits).
//   - RestoredTable, appended by the receiving node once the restore
//     committed, carries the restored schema: every other node creates the
//     table, empty, under the same id (so tablets can move to it). The
//     operation finishes after that.
//
// A restore that fails drops the directory again. A receiving node that
// dies during the restore leaves the directory without a table
// (docs/scale-out.md).

func (a *clusterAdmin) RestoreTable(ctx context.Context, req *adminpb.RestoreTableRequest) (*longrunningpb.Operation, error) {
	inst, err := parseInstance(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	name, err := parseBackup(req.GetBackup())
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetTableId() == "" {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: table_id is required")
	}
	retention, err := restoreRetention(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	if _, err := a.s.backups.Get(name); err != nil {
		return nil, toStatus(err)
	}
	ref := tableRef{instance: inst, table: req.GetTableId()}
	if _, err := a.s.engine.Table(ref.instance, ref.table); err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: table %s already exists", ref.table)
	}
	self := a.c.opts.NodeID
	return proposeOp(a.c.proposeArgs(ctx, "RestoreTable", ref, req, clusteretcd.DirOp{Create: func(seq uint64) (tablets.Directory, error) {
		return tablets.NewDirectory(ref.name(), seq, nil, []string{self})
	}}, map[string]string{"retention": string(retention)}))
}

// applyRestore starts the restore on the node that received it.
func (c *clusterMember) applyRestore(e clusteretcd.SchemaEntry) applyResult {
	if e.Origin != c.opts.NodeID {
		return applyResult{resp: &emptypb.Empty{}}
	}
	var req adminpb.RestoreTableRequest
	if err := proto.Unmarshal(e.Request, &req); err != nil {
		return applyResult{err: err}
	}
	inst, err := parseInstance(req.GetParent())
	if err != nil {
		return applyResult{err: toStatus(err)}
	}
	name, err := parseBackup(req.GetBackup())
	if err != nil {
		return applyResult{err: toStatus(err)}
	}
	mf, job, err := c.s.backups.RestoreAs(name, inst, req.GetTableId(), table.Retention(e.Args["retention"]), e.TableID)
	if err != nil {
		return applyResult{err: toStatus(err)}
	}
	ref := tableRef{instance: inst, table: req.GetTableId()}
	meta := &adminpb.RestoreTableMetadata{
		Name:       ref.name(),
		SourceType: adminpb.RestoreSourceType_BACKUP,
		SourceInfo: &adminpb.RestoreTableMetadata_BackupInfo{BackupInfo: backupInfoProto(mf)},
		Progress:   &adminpb.OperationProgress{StartTime: timestamppb.New(c.s.opts.Clock.Now())},
	}
	op, err := c.s.ops.pending(ref.name(), meta)
	if err != nil {
		return applyResult{err: err}
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		a := &adminServer{s: c.s}
		ctx := context.Background()
		m, err := job.Result()
		if err == nil {
			// The others install the table, empty, as it is here (its
			// families' ids are the backup's).
			var enc []byte
			if enc, err = json.Marshal(m); err == nil {
				_, err = c.proposeArgs(ctx, "RestoredTable", ref, &adminpb.CreateTableRequest{Parent: inst, TableId: ref.table},
					clusteretcd.DirOp{}, map[string]string{"meta": string(enc)})
			}
		}
		if err != nil {
			if d, ok := c.m.Directory(ref.name()); ok && d.TableID == e.TableID {
				if _, derr := c.m.AppendEntry(ctx, clusteretcd.SchemaEntry{Method: "ForgetTable", Table: ref.name(), Origin: c.opts.NodeID}, clusteretcd.DirOp{Drop: true}); derr != nil {
					c.s.log.Warn("drop the directory of a table not restored", "table", ref.name(), "err", derr)
				}
			}
			op.finish(nil, nil, toStatus(err))
			return
		}
		meta.Progress = &adminpb.OperationProgress{ProgressPercent: 100, StartTime: meta.Progress.StartTime, EndTime: timestamppb.New(c.s.opts.Clock.Now())}
		op.finish(a.tableToProto(m, adminpb.Table_SCHEMA_VIEW), meta, nil)
	}()
	return applyResult{resp: op.wait(0)}
}

// applyRestored installs a restored table, empty, where it was not
// restored (the receiving node has it under the same id already).
func (c *clusterMember) applyRestored(e clusteretcd.SchemaEntry) applyResult {
	var m table.Meta
	if err := json.Unmarshal([]byte(e.Args["meta"]), &m); err != nil || m.ID == 0 {
		return applyResult{err: status.Errorf(codes.InvalidArgument, "ebbtable: schema change %d: restored table %s without its schema", e.Seq, e.Table)}
	}
	a := &adminServer{s: c.s}
	if cur, err := c.s.engine.Table(m.Instance, m.Name); err == nil && cur.ID == m.ID {
		return applyResult{resp: a.tableToProto(cur, adminpb.Table_SCHEMA_VIEW)}
	}
	if _, err := c.s.engine.InstallTable(&m); err != nil {
		return applyResult{err: toStatus(err)}
	}
	if err := c.s.forgetTableMeta(tableRef{instance: m.Instance, table: m.Name}); err != nil {
		return applyResult{err: toStatus(err)}
	}
	return applyResult{resp: a.tableToProto(&m, adminpb.Table_SCHEMA_VIEW)}
}
