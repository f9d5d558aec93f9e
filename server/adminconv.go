package server

import (
	"fmt"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

// Conversions between the engine's and replication's types and the
// messages of ebbtable's admin protocol (proto/ebbtable/admin/v1): what
// peers exchange. Each pair round-trips exactly (TestAdminConvRoundTrip).

func stampPB(s storage.Stamp) *ebbadminpb.Stamp {
	return &ebbadminpb.Stamp{Commit: s.Commit, Cluster: s.Cluster}
}

func stampOf(s *ebbadminpb.Stamp) storage.Stamp {
	return storage.Stamp{Commit: s.GetCommit(), Cluster: s.GetCluster()}
}

func positionPB(p changestream.Position) *ebbadminpb.Position {
	return &ebbadminpb.Position{Commit: p.Commit, Tiebreaker: p.Tiebreaker, Index: p.Index}
}

func positionOf(p *ebbadminpb.Position) changestream.Position {
	return changestream.Position{Commit: p.GetCommit(), Tiebreaker: p.GetTiebreaker(), Index: p.GetIndex()}
}

func gcRulePB(r gcrule.Rule) *ebbadminpb.GcRule {
	list := func() *ebbadminpb.GcRules {
		out := &ebbadminpb.GcRules{}
		for _, c := range r.Children() {
			out.Rules = append(out.Rules, gcRulePB(c))
		}
		return out
	}
	switch r.Kind() {
	case gcrule.KindMaxAge:
		return &ebbadminpb.GcRule{Rule: &ebbadminpb.GcRule_MaxAgeNanos{MaxAgeNanos: int64(r.Age())}}
	case gcrule.KindMaxVersions:
		return &ebbadminpb.GcRule{Rule: &ebbadminpb.GcRule_MaxVersions{MaxVersions: int64(r.Versions())}}
	case gcrule.KindUnion:
		return &ebbadminpb.GcRule{Rule: &ebbadminpb.GcRule_Union{Union: list()}}
	case gcrule.KindIntersection:
		return &ebbadminpb.GcRule{Rule: &ebbadminpb.GcRule_Intersection{Intersection: list()}}
	}
	return &ebbadminpb.GcRule{}
}

func gcRuleOf(r *ebbadminpb.GcRule) (gcrule.Rule, error) {
	list := func(rs *ebbadminpb.GcRules) ([]gcrule.Rule, error) {
		var out []gcrule.Rule
		for _, c := range rs.GetRules() {
			cr, err := gcRuleOf(c)
			if err != nil {
				return nil, err
			}
			out = append(out, cr)
		}
		return out, nil
	}
	switch v := r.GetRule().(type) {
	case *ebbadminpb.GcRule_MaxAgeNanos:
		return gcrule.MaxAge(time.Duration(v.MaxAgeNanos)), nil
	case *ebbadminpb.GcRule_MaxVersions:
		if v.MaxVersions < 0 || v.MaxVersions > gcrule.MaxVersionsLimit {
			return gcrule.Rule{}, fmt.Errorf("%w: max versions %d out of range", errInvalid, v.MaxVersions)
		}
		return gcrule.MaxVersions(int(v.MaxVersions)), nil
	case *ebbadminpb.GcRule_Union:
		cs, err := list(v.Union)
		return gcrule.Union(cs...), err
	case *ebbadminpb.GcRule_Intersection:
		cs, err := list(v.Intersection)
		return gcrule.Intersection(cs...), err
	}
	return gcrule.None(), nil
}

// metaPB is a table's whole schema, as a snapshot sends it.
func metaPB(m *table.Meta) *ebbadminpb.TableMeta {
	out := &ebbadminpb.TableMeta{
		Id: m.ID, Instance: m.Instance, Name: m.Name, NextFamilyId: m.NextFamilyID,
		CreatedMicros: m.CreatedMicros, DeletionProtection: m.DeletionProtection,
		Splits: m.Splits, DroppedFamilies: m.DroppedFamilies, DroppedNames: m.DroppedNames,
		InterleaveSeparator: m.InterleaveSeparator, Stamp: stampPB(m.Stamp), Micros: m.Micros,
	}
	for _, f := range m.Families {
		out.Families = append(out.Families, &ebbadminpb.Family{
			Id: f.ID, Name: f.Name, Gc: gcRulePB(f.GC), ValueType: f.ValueType,
			Aggregate: string(f.Aggregate), ExpiryTimestamps: f.ExpiryTimestamps,
		})
	}
	if c := m.ChangeStream; c != nil {
		out.ChangeStream = &ebbadminpb.ChangeStreamConfig{RetentionNanos: int64(c.Retention), EnabledMicros: c.EnabledMicros}
	}
	if r := m.Restored; r != nil {
		out.Restored = &ebbadminpb.Restored{
			Backup: r.Backup, SourceTable: r.SourceTable, SourceBackup: r.SourceBackup,
			StartMicros: r.StartMicros, EndMicros: r.EndMicros, VersionMicros: r.VersionMicros,
			RestoredMicros: r.RestoredMicros, Retention: string(r.Retention),
		}
	}
	if p := m.RowPolicy; p != nil {
		out.RowPolicy = &ebbadminpb.RowPolicy{Family: p.Family, Qualifier: p.Qualifier, Days: p.Days, Paused: p.Paused}
	}
	return out
}

func metaOf(pm *ebbadminpb.TableMeta) (*table.Meta, error) {
	m := &table.Meta{
		ID: pm.GetId(), Instance: pm.GetInstance(), Name: pm.GetName(), NextFamilyID: pm.GetNextFamilyId(),
		CreatedMicros: pm.GetCreatedMicros(), DeletionProtection: pm.GetDeletionProtection(),
		Splits: pm.GetSplits(), DroppedFamilies: pm.GetDroppedFamilies(), DroppedNames: pm.GetDroppedNames(),
		InterleaveSeparator: pm.GetInterleaveSeparator(), Stamp: stampOf(pm.GetStamp()), Micros: pm.GetMicros(),
	}
	for _, f := range pm.GetFamilies() {
		gc, err := gcRuleOf(f.GetGc())
		if err != nil {
			return nil, err
		}
		m.Families = append(m.Families, table.Family{
			ID: f.GetId(), Name: f.GetName(), GC: gc, ValueType: f.GetValueType(),
			Aggregate: table.Aggregator(f.GetAggregate()), ExpiryTimestamps: f.GetExpiryTimestamps(),
		})
	}
	if c := pm.GetChangeStream(); c != nil {
		m.ChangeStream = &table.ChangeStream{Retention: time.Duration(c.GetRetentionNanos()), EnabledMicros: c.GetEnabledMicros()}
	}
	if r := pm.GetRestored(); r != nil {
		m.Restored = &table.Restored{
			Backup: r.GetBackup(), SourceTable: r.GetSourceTable(), SourceBackup: r.GetSourceBackup(),
			StartMicros: r.GetStartMicros(), EndMicros: r.GetEndMicros(), VersionMicros: r.GetVersionMicros(),
			RestoredMicros: r.GetRestoredMicros(), Retention: table.Retention(r.GetRetention()),
		}
	}
	if p := pm.GetRowPolicy(); p != nil {
		m.RowPolicy = &table.RowPolicy{Family: p.GetFamily(), Qualifier: p.GetQualifier(), Days: p.GetDays(), Paused: p.GetPaused()}
	}
	return m, nil
}

func schemaPB(ts replication.TableSchema) *ebbadminpb.TableSchema {
	out := &ebbadminpb.TableSchema{Instance: ts.Instance, Name: ts.Name, Stamp: stampPB(ts.Stamp)}
	for _, f := range ts.Families {
		out.Families = append(out.Families, &ebbadminpb.FamilySchema{Name: f.Name, Gc: gcRulePB(f.GC), ValueType: f.ValueType, Aggregate: string(f.Aggregate)})
	}
	return out
}

func schemaOf(ps *ebbadminpb.TableSchema) (replication.TableSchema, error) {
	ts := replication.TableSchema{Instance: ps.GetInstance(), Name: ps.GetName(), Stamp: stampOf(ps.GetStamp())}
	for _, f := range ps.GetFamilies() {
		gc, err := gcRuleOf(f.GetGc())
		if err != nil {
			return ts, err
		}
		ts.Families = append(ts.Families, replication.FamilySchema{Name: f.GetName(), GC: gc, ValueType: f.GetValueType(), Aggregate: table.Aggregator(f.GetAggregate())})
	}
	return ts, nil
}

func rawCellPB(c table.RawCell) *ebbadminpb.RawCell {
	return &ebbadminpb.RawCell{Row: c.Row, Family: c.Family, Qualifier: c.Qualifier, Timestamp: c.Timestamp, Value: c.Value, ExpireAt: c.ExpireAt, Stamp: stampPB(c.Stamp)}
}

func rawCellOf(c *ebbadminpb.RawCell) table.RawCell {
	return table.RawCell{Row: c.GetRow(), Family: c.GetFamily(), Qualifier: c.GetQualifier(), Timestamp: c.GetTimestamp(), Value: c.GetValue(), ExpireAt: c.GetExpireAt(), Stamp: stampOf(c.GetStamp())}
}

func peersPB(ps []replication.PeerInfo) []*ebbadminpb.PeerInfo {
	var out []*ebbadminpb.PeerInfo
	for _, p := range ps {
		out = append(out, &ebbadminpb.PeerInfo{Id: p.ID, Addr: p.Addr, Ready: p.Ready, Nodes: p.Nodes})
	}
	return out
}

func peersOf(ps []*ebbadminpb.PeerInfo) []replication.PeerInfo {
	var out []replication.PeerInfo
	for _, p := range ps {
		out = append(out, replication.PeerInfo{ID: p.GetId(), Addr: p.GetAddr(), Ready: p.GetReady(), Nodes: p.GetNodes()})
	}
	return out
}
