package server

import (
	"fmt"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Table settings the engine does not act on itself are kept beside the
// table as instance metadata (kind "tableext", name "tables/T", protojson
// of an adminpb.Table holding only these fields) and go with the table:
//   - row_key_schema: validated, stored, returned, updatable;
//   - tiered_storage_config: stored and returned (ebbtable has one storage
//     tier; the setting changes nothing else);
//   - automated_backup_policy: stored and returned, and acted on by
//     autobackup.go, which takes the backups on schedule.

const kindTableExt = "tableext"

func tableExtKey(ref tableRef) string { return "tables/" + ref.table }

// tableExt returns a table's extra settings (empty when it has none).
func (s *Server) tableExt(ref tableRef) (*adminpb.Table, error) {
	out := &adminpb.Table{}
	key := tableExtKey(ref)
	err := s.engine.InstanceMeta(kindTableExt, ref.instance, func(_, n string, v []byte) error {
		if n != key {
			return nil
		}
		return protojson.Unmarshal(v, out)
	})
	return out, err
}

func (s *Server) putTableExt(ref tableRef, t *adminpb.Table) error {
	if t.GetRowKeySchema() == nil && t.GetTieredStorageConfig() == nil && t.GetAutomatedBackupConfig() == nil {
		return s.engine.DeleteInstanceMeta(kindTableExt, ref.instance, tableExtKey(ref))
	}
	v, err := protojson.Marshal(t)
	if err != nil {
		return err
	}
	return s.engine.PutInstanceMeta(kindTableExt, ref.instance, tableExtKey(ref), v)
}

func (s *Server) forgetTableExt(ref tableRef) error {
	return s.engine.DeleteInstanceMeta(kindTableExt, ref.instance, tableExtKey(ref))
}

// addTableExt copies a table's extra settings into its proto.
func (s *Server) addTableExt(m *table.Meta, t *adminpb.Table) {
	ext, err := s.tableExt(tableRef{instance: m.Instance, table: m.Name})
	if err != nil {
		s.log.Warn("cannot read table settings", "table", t.GetName(), "err", err)
		return
	}
	t.RowKeySchema = ext.GetRowKeySchema()
	t.TieredStorageConfig = ext.GetTieredStorageConfig()
	t.AutomatedBackupConfig = ext.GetAutomatedBackupConfig()
}

// checkRowKeySchema validates a row key schema as Bigtable does: an
// encoding is required; a singleton has exactly one field; delimited bytes
// need a delimiter; field names are non-empty, unique, and not the name of
// one of the table's families.
func checkRowKeySchema(rks *adminpb.Type_Struct, families func(string) bool) error {
	if rks == nil {
		return nil
	}
	bad := func(format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, "ebbtable: row key schema: "+format, args...)
	}
	if len(rks.GetFields()) == 0 {
		return bad("needs at least one field")
	}
	switch e := rks.GetEncoding().GetEncoding().(type) {
	case nil:
		return bad("needs an encoding (singleton, delimited_bytes or ordered_code_bytes)")
	case *adminpb.Type_Struct_Encoding_Singleton_:
		if len(rks.GetFields()) != 1 {
			return bad("the singleton encoding takes exactly one field, not %d", len(rks.GetFields()))
		}
	case *adminpb.Type_Struct_Encoding_DelimitedBytes_:
		if len(e.DelimitedBytes.GetDelimiter()) == 0 {
			return bad("the delimited_bytes encoding needs a delimiter")
		}
	}
	seen := map[string]bool{}
	for _, f := range rks.GetFields() {
		n := f.GetFieldName()
		switch {
		case n == "":
			return bad("a field has no name")
		case seen[n]:
			return bad("field %q appears twice", n)
		case families(n):
			return bad("field %q has the name of a column family", n)
		case f.GetType() == nil || f.GetType().GetKind() == nil:
			return bad("field %q has no type", n)
		}
		seen[n] = true
	}
	return nil
}

// Bounds of an automated backup policy, as Cloud Bigtable's: backups are
// taken every 24 hours and kept from 3 to 90 days (72 hours by default).
const (
	autoBackupFrequency        = 24 * time.Hour
	autoBackupDefaultRetention = 72 * time.Hour
	autoBackupMinRetention     = 72 * time.Hour
	autoBackupMaxRetention     = 90 * 24 * time.Hour
)

// checkAutoBackup fills an automated backup policy's defaults and checks
// its bounds.
func checkAutoBackup(p *adminpb.Table_AutomatedBackupPolicy) error {
	if p.GetFrequency() == nil || p.GetFrequency().AsDuration() == 0 {
		p.Frequency = durationpb.New(autoBackupFrequency)
	}
	if p.GetRetentionPeriod() == nil || p.GetRetentionPeriod().AsDuration() == 0 {
		p.RetentionPeriod = durationpb.New(autoBackupDefaultRetention)
	}
	if f := p.GetFrequency().AsDuration(); f != autoBackupFrequency {
		return status.Errorf(codes.InvalidArgument, "ebbtable: automated backup frequency %v: the only supported frequency is 24h", f)
	}
	if r := p.GetRetentionPeriod().AsDuration(); r < autoBackupMinRetention || r > autoBackupMaxRetention {
		return status.Errorf(codes.InvalidArgument, "ebbtable: automated backup retention %v: it must be between 3 and 90 days", r)
	}
	return nil
}

// checkTieredStorage checks a tiered storage rule: data moves to the
// infrequent-access tier once older than at least 30 days.
func checkTieredStorage(c *adminpb.TieredStorageConfig) error {
	if c == nil {
		return nil
	}
	d := c.GetInfrequentAccess().GetIncludeIfOlderThan()
	if d == nil {
		return status.Error(codes.InvalidArgument, "ebbtable: tiered storage config needs infrequent_access.include_if_older_than")
	}
	if d.AsDuration() < 30*24*time.Hour {
		return status.Errorf(codes.InvalidArgument, "ebbtable: tiered storage include_if_older_than %v: it must be at least 30 days", d.AsDuration())
	}
	return nil
}

// createTableExt validates a CreateTable request's extra settings and
// returns what to store (nil: nothing).
func createTableExt(t *adminpb.Table) (*adminpb.Table, error) {
	if t == nil {
		return nil, nil
	}
	ext := &adminpb.Table{RowKeySchema: t.GetRowKeySchema(), TieredStorageConfig: t.GetTieredStorageConfig()}
	if err := checkRowKeySchema(t.GetRowKeySchema(), func(n string) bool { _, ok := t.GetColumnFamilies()[n]; return ok }); err != nil {
		return nil, err
	}
	if err := checkTieredStorage(t.GetTieredStorageConfig()); err != nil {
		return nil, err
	}
	if p := t.GetAutomatedBackupPolicy(); p != nil {
		p = proto.Clone(p).(*adminpb.Table_AutomatedBackupPolicy)
		if err := checkAutoBackup(p); err != nil {
			return nil, err
		}
		ext.AutomatedBackupConfig = &adminpb.Table_AutomatedBackupPolicy_{AutomatedBackupPolicy: p}
	}
	if ext.RowKeySchema == nil && ext.TieredStorageConfig == nil && ext.AutomatedBackupConfig == nil {
		return nil, nil
	}
	return ext, nil
}

// updateTableExt applies UpdateTable paths that name extra settings; it
// reports whether path was one of them.
func (s *Server) updateTableExt(ref tableRef, m *table.Meta, req *adminpb.UpdateTableRequest, path string) (bool, error) {
	in := req.GetTable()
	ext, err := s.tableExt(ref)
	if err != nil {
		return true, err
	}
	switch path {
	case "row_key_schema":
		rks := in.GetRowKeySchema()
		if rks != nil && ext.GetRowKeySchema() != nil && !req.GetIgnoreWarnings() {
			return true, status.Errorf(codes.FailedPrecondition, "ebbtable: table %s already has a row key schema; changing it changes how existing row keys are read (set ignore_warnings to replace it, or clear it first)", ref.name())
		}
		if err := checkRowKeySchema(rks, func(n string) bool { _, ok := m.Family(n); return ok }); err != nil {
			return true, err
		}
		ext.RowKeySchema = rks
	case "tiered_storage_config":
		if err := checkTieredStorage(in.GetTieredStorageConfig()); err != nil {
			return true, err
		}
		ext.TieredStorageConfig = in.GetTieredStorageConfig()
	case "automated_backup_policy", "automated_backup_policy.retention_period", "automated_backup_policy.frequency":
		in := in.GetAutomatedBackupPolicy()
		if path == "automated_backup_policy" && in == nil {
			ext.AutomatedBackupConfig = nil // disabled
			break
		}
		p := ext.GetAutomatedBackupPolicy()
		if p == nil {
			p = &adminpb.Table_AutomatedBackupPolicy{}
		}
		if path != "automated_backup_policy.frequency" && in.GetRetentionPeriod() != nil {
			p.RetentionPeriod = in.GetRetentionPeriod()
		}
		if path != "automated_backup_policy.retention_period" && in.GetFrequency() != nil {
			p.Frequency = in.GetFrequency()
		}
		if err := checkAutoBackup(p); err != nil {
			return true, err
		}
		ext.AutomatedBackupConfig = &adminpb.Table_AutomatedBackupPolicy_{AutomatedBackupPolicy: p}
	default:
		return false, nil
	}
	if err := s.putTableExt(ref, ext); err != nil {
		return true, fmt.Errorf("ebbtable: storing the settings of %s: %w", ref.name(), err)
	}
	return true, nil
}
