package server

import (
	"context"
	"fmt"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/server/convert"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// adminServer serves the Bigtable Table Admin API v2.
type adminServer struct {
	adminpb.UnimplementedBigtableTableAdminServer
	s *Server
}

// tableToProto renders a table's schema in the requested view.
func (a *adminServer) tableToProto(m *table.Meta, view adminpb.Table_View) *adminpb.Table {
	t := &adminpb.Table{
		Name:               m.Instance + "/tables/" + m.Name,
		Granularity:        adminpb.Table_MILLIS,
		DeletionProtection: m.DeletionProtection,
	}
	if m.Micros {
		t.Granularity = adminpb.Table_MICROS
	}
	if m.Restored != nil {
		t.RestoreInfo = restoreInfoProto(m.Restored)
	}
	if view == adminpb.Table_NAME_ONLY {
		return t
	}
	if cs := m.ChangeStream; cs != nil {
		t.ChangeStreamConfig = &adminpb.ChangeStreamConfig{RetentionPeriod: durationpb.New(cs.Retention)}
	}
	t.ColumnFamilies = map[string]*adminpb.ColumnFamily{}
	for _, f := range m.Families {
		t.ColumnFamilies[f.Name] = &adminpb.ColumnFamily{GcRule: convert.GCRuleToProto(f.GC), ValueType: convert.ValueTypeToProto(f.ValueType)}
	}
	if view == adminpb.Table_REPLICATION_VIEW || view == adminpb.Table_FULL || view == adminpb.Table_ENCRYPTION_VIEW {
		t.ClusterStates = a.s.clusterStates()
	}
	if view == adminpb.Table_ENCRYPTION_VIEW || view == adminpb.Table_FULL {
		// Data is stored unencrypted by ebbtable itself (use disk
		// encryption); reported as Bigtable's default, with no KMS key.
		for _, cs := range t.ClusterStates {
			cs.EncryptionInfo = []*adminpb.EncryptionInfo{{EncryptionType: adminpb.EncryptionInfo_GOOGLE_DEFAULT_ENCRYPTION}}
		}
	}
	a.s.addTableExt(m, t)
	return t
}

// CreateTable creates a table with its families and initial splits.
func (a *adminServer) CreateTable(ctx context.Context, req *adminpb.CreateTableRequest) (*adminpb.Table, error) {
	return a.createTable(req, 0)
}

// createTable creates the table req describes under table id id (zero: the
// engine's next id; cluster mode passes the id the cluster gave).
func (a *adminServer) createTable(req *adminpb.CreateTableRequest, id uint64) (*adminpb.Table, error) {
	inst, err := parseInstance(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	spec := table.TableSpec{ID: id, DeletionProtection: req.GetTable().GetDeletionProtection(),
		Micros: req.GetTable().GetGranularity() == adminpb.Table_MICROS}
	if rp := req.GetTable().GetChangeStreamConfig().GetRetentionPeriod(); rp != nil {
		spec.ChangeStreamRetention = rp.AsDuration() // zero: no stream
		if spec.ChangeStreamRetention < 0 {
			return nil, status.Error(codes.InvalidArgument, "ebbtable: change stream retention must be between 1 day and 7 days")
		}
	}
	for name, cf := range req.GetTable().GetColumnFamilies() {
		rule, err := convert.GCRuleFromProto(cf.GetGcRule())
		if err != nil {
			return nil, toStatus(fmt.Errorf("%w: family %q: %w", table.ErrInvalid, name, err))
		}
		vt, agg, err := convert.ValueTypeFromProto(cf.GetValueType())
		if err != nil {
			return nil, toStatus(err)
		}
		spec.Families = append(spec.Families, table.FamilySpec{Name: name, GC: rule, ValueType: vt, Aggregate: agg})
	}
	for _, s := range req.GetInitialSplits() {
		spec.Splits = append(spec.Splits, s.GetKey())
	}
	ext, err := createTableExt(req.GetTable())
	if err != nil {
		return nil, err
	}
	m, err := a.s.engine.CreateTable(inst, req.GetTableId(), spec)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := a.s.forgetTableMeta(tableRef{instance: inst, table: req.GetTableId()}); err != nil {
		return nil, toStatus(err)
	}
	if ext != nil {
		if err := a.s.putTableExt(tableRef{instance: inst, table: req.GetTableId()}, ext); err != nil {
			return nil, toStatus(err)
		}
	}
	return a.tableToProto(m, adminpb.Table_SCHEMA_VIEW), nil
}

// ListTables lists an instance's tables.
func (a *adminServer) ListTables(ctx context.Context, req *adminpb.ListTablesRequest) (*adminpb.ListTablesResponse, error) {
	inst, err := parseInstance(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	view := req.GetView()
	if view == adminpb.Table_VIEW_UNSPECIFIED {
		view = adminpb.Table_NAME_ONLY
	}
	tables := a.s.engine.Tables(inst)
	start, end, next, err := page(req.GetPageToken(), req.GetPageSize(), len(tables))
	if err != nil {
		return nil, err
	}
	resp := &adminpb.ListTablesResponse{NextPageToken: next}
	for _, m := range tables[start:end] {
		resp.Tables = append(resp.Tables, a.tableToProto(m, view))
	}
	return resp, nil
}

// GetTable returns one table's schema.
func (a *adminServer) GetTable(ctx context.Context, req *adminpb.GetTableRequest) (*adminpb.Table, error) {
	_, m, err := a.s.tableByName(req.GetName())
	if err != nil {
		return nil, err
	}
	view := req.GetView()
	if view == adminpb.Table_VIEW_UNSPECIFIED {
		view = adminpb.Table_SCHEMA_VIEW
	}
	return a.tableToProto(m, view), nil
}

// DeleteTable drops a table and its data.
func (a *adminServer) DeleteTable(ctx context.Context, req *adminpb.DeleteTableRequest) (*emptypb.Empty, error) {
	ref, err := parseTable(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := a.s.engine.DeleteTable(ref.instance, ref.table); err != nil {
		return nil, toStatus(err)
	}
	// Its settings, authorized views, schema bundles and IAM policy stay
	// for UndeleteTable; a table created under the name clears them.
	return &emptypb.Empty{}, nil
}

// UpdateTable changes the fields named in the update mask:
// deletion_protection, and change_stream_config (an empty or absent config,
// or a cleared retention, turns the stream off) or
// change_stream_config.retention_period. It completes at once.
func (a *adminServer) UpdateTable(ctx context.Context, req *adminpb.UpdateTableRequest) (*longrunningpb.Operation, error) {
	ref, err := parseTable(req.GetTable().GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: update_mask must name at least one field")
	}
	var m *table.Meta
	for _, p := range paths {
		switch p {
		case "deletion_protection":
			if m, err = a.s.engine.SetDeletionProtection(ref.instance, ref.table, req.GetTable().GetDeletionProtection()); err != nil {
				return nil, toStatus(err)
			}
		case "change_stream_config", "change_stream_config.retention_period":
			// An absent config or retention, or a zero retention (a
			// cleared field), turns the stream off.
			var ret time.Duration
			if rp := req.GetTable().GetChangeStreamConfig().GetRetentionPeriod(); rp != nil {
				if ret = rp.AsDuration(); ret < 0 {
					return nil, status.Error(codes.InvalidArgument, "ebbtable: change stream retention must be between 1 day and 7 days")
				}
			}
			if m, err = a.s.engine.SetChangeStream(ref.instance, ref.table, ret); err != nil {
				return nil, toStatus(err)
			}
		default:
			cur, err := a.s.engine.Table(ref.instance, ref.table)
			if err != nil {
				return nil, toStatus(err)
			}
			ok, err := a.s.updateTableExt(ref, cur, req, p)
			if err != nil {
				return nil, toStatus(err)
			}
			if !ok {
				return nil, status.Errorf(codes.Unimplemented, "ebbtable: updating %q is not supported", p)
			}
			m = cur
		}
	}
	return a.s.ops.done(ref.name(), a.tableToProto(m, adminpb.Table_SCHEMA_VIEW), &adminpb.UpdateTableMetadata{
		Name: ref.name(), StartTime: timestamppb.Now(), EndTime: timestamppb.Now(),
	})
}

// ModifyColumnFamilies creates, updates and drops families atomically.
func (a *adminServer) ModifyColumnFamilies(ctx context.Context, req *adminpb.ModifyColumnFamiliesRequest) (*adminpb.Table, error) {
	ref, err := parseTable(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	var mods []table.FamilyMod
	for _, m := range req.GetModifications() {
		fm := table.FamilyMod{Name: m.GetId(), IgnoreWarnings: req.GetIgnoreWarnings()}
		switch x := m.GetMod().(type) {
		case *adminpb.ModifyColumnFamiliesRequest_Modification_Create:
			fm.Create = true
			if fm.GC, err = convert.GCRuleFromProto(x.Create.GetGcRule()); err != nil {
				return nil, toStatus(fmt.Errorf("%w: family %q: %w", table.ErrInvalid, m.GetId(), err))
			}
			if fm.ValueType, fm.Aggregate, err = convert.ValueTypeFromProto(x.Create.GetValueType()); err != nil {
				return nil, toStatus(err)
			}
		case *adminpb.ModifyColumnFamiliesRequest_Modification_Update:
			fm.Update = true
			paths := m.GetUpdateMask().GetPaths()
			if len(paths) == 0 {
				paths = []string{"gc_rule"}
			}
			fm.KeepGC = true
			for _, p := range paths {
				switch p {
				case "gc_rule":
					fm.KeepGC = false
					if fm.GC, err = convert.GCRuleFromProto(x.Update.GetGcRule()); err != nil {
						return nil, toStatus(fmt.Errorf("%w: family %q: %w", table.ErrInvalid, m.GetId(), err))
					}
				case "value_type":
					fm.SetValueType = true
					if fm.ValueType, fm.Aggregate, err = convert.ValueTypeFromProto(x.Update.GetValueType()); err != nil {
						return nil, toStatus(err)
					}
				default:
					return nil, status.Errorf(codes.InvalidArgument, "ebbtable: family %q: cannot update %q (gc_rule and value_type can be updated)", m.GetId(), p)
				}
			}
		case *adminpb.ModifyColumnFamiliesRequest_Modification_Drop:
			if !x.Drop {
				return nil, status.Errorf(codes.InvalidArgument, "ebbtable: family %q: drop must be true", m.GetId())
			}
			fm.Drop = true
		default:
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: family %q: modification has no create, update or drop", m.GetId())
		}
		mods = append(mods, fm)
	}
	meta, err := a.s.engine.ModifyFamilies(ref.instance, ref.table, mods)
	if err != nil {
		return nil, toStatus(err)
	}
	return a.tableToProto(meta, adminpb.Table_SCHEMA_VIEW), nil
}

// DropRowRange deletes rows by prefix, or all rows.
func (a *adminServer) DropRowRange(ctx context.Context, req *adminpb.DropRowRangeRequest) (*emptypb.Empty, error) {
	ref, err := parseTable(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	var prefix []byte
	all := false
	switch x := req.GetTarget().(type) {
	case *adminpb.DropRowRangeRequest_RowKeyPrefix:
		prefix = x.RowKeyPrefix
		if len(prefix) == 0 {
			return nil, status.Error(codes.InvalidArgument, "ebbtable: row_key_prefix must not be empty")
		}
	case *adminpb.DropRowRangeRequest_DeleteAllDataFromTable:
		if !x.DeleteAllDataFromTable {
			return nil, status.Error(codes.InvalidArgument, "ebbtable: delete_all_data_from_table must be true")
		}
		all = true
	default:
		return nil, status.Error(codes.InvalidArgument, "ebbtable: DropRowRange needs row_key_prefix or delete_all_data_from_table")
	}
	if err := a.s.engine.DropRowRange(ref.instance, ref.table, prefix, all); err != nil {
		return nil, toStatus(err)
	}
	return &emptypb.Empty{}, nil
}
