package replication

import (
	"errors"

	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

// FamilySchema is the replicated part of a family.
type FamilySchema struct {
	Name      string           `json:"name"`
	GC        gcrule.Rule      `json:"gc"`
	ValueType []byte           `json:"value_type,omitempty"`
	Aggregate table.Aggregator `json:"aggregate,omitempty"`
}

// TableSchema is the replicated part of a table's schema. Schemas travel
// with each pull and the newer stamp wins.
type TableSchema struct {
	Instance string         `json:"instance"`
	Name     string         `json:"name"`
	Families []FamilySchema `json:"families"`
	Stamp    storage.Stamp  `json:"stamp"`
}

// SchemaOf is the replicated part of m.
func SchemaOf(m *table.Meta) TableSchema {
	ts := TableSchema{Instance: m.Instance, Name: m.Name, Stamp: m.Stamp}
	for _, f := range m.Families {
		ts.Families = append(ts.Families, FamilySchema{Name: f.Name, GC: f.GC, ValueType: f.ValueType, Aggregate: f.Aggregate})
	}
	return ts
}

// syncSchemas makes local schemas follow a peer's newer ones: tables it
// created, families it added, changed or dropped, tables it deleted.
func (r *Replicator) syncSchemas(peer string, catalog []TableSchema, dropped []table.DroppedTable) error {
	e, log := r.o.Sink, r.o.Log
	for _, d := range dropped {
		m, err := e.Table(d.Instance, d.Name)
		if err != nil || !m.Stamp.Less(d.Stamp) {
			continue
		}
		if err := e.DeleteTableAt(d.Instance, d.Name, d.Stamp); err != nil {
			log.Warn("replication: cannot drop table a peer dropped", "peer", peer, "table", d.Name, "err", err)
		}
	}
	// The dropped tables are read after each table found missing, never
	// before: a drop applied between the two reads (a DeleteTable through
	// this process, or another node's through the schema log) would
	// otherwise be missing from the list while the table is already gone,
	// and the peer's older catalog would create the table again.
	for _, ts := range catalog {
		m, err := e.Table(ts.Instance, ts.Name)
		if errors.Is(err, table.ErrTableNotFound) {
			drops, err := e.DroppedTables()
			if err != nil {
				return err
			}
			if droppedAfter(drops, ts) {
				continue
			}
			spec := table.TableSpec{Stamp: ts.Stamp}
			for _, f := range ts.Families {
				spec.Families = append(spec.Families, table.FamilySpec{Name: f.Name, GC: f.GC, ValueType: f.ValueType, Aggregate: f.Aggregate})
			}
			if _, err := e.CreateTable(ts.Instance, ts.Name, spec); err != nil && !errors.Is(err, table.ErrTableExists) {
				log.Warn("replication: cannot create table a peer created", "peer", peer, "table", ts.Name, "err", err)
			}
			continue
		}
		if err != nil {
			return err
		}
		if !m.Stamp.Less(ts.Stamp) {
			continue
		}
		if err := r.adoptFamilies(m, ts); err != nil {
			log.Warn("replication: cannot adopt a peer's schema", "peer", peer, "table", ts.Name, "err", err)
		}
	}
	return nil
}

func droppedAfter(drops []table.DroppedTable, ts TableSchema) bool {
	for _, d := range drops {
		if d.Instance == ts.Instance && d.Name == ts.Name && !d.Stamp.Less(ts.Stamp) {
			return true
		}
	}
	return false
}

// adoptFamilies changes a table's families to a peer's newer schema.
func (r *Replicator) adoptFamilies(m *table.Meta, ts TableSchema) error {
	var mods []table.FamilyMod
	want := map[string]bool{}
	for _, f := range ts.Families {
		want[f.Name] = true
		cur, ok := m.Family(f.Name)
		switch {
		case !ok:
			mods = append(mods, table.FamilyMod{Name: f.Name, Create: true, GC: f.GC, ValueType: f.ValueType, Aggregate: f.Aggregate})
		case cur.GC.String() != f.GC.String():
			mods = append(mods, table.FamilyMod{Name: f.Name, Update: true, GC: f.GC})
		}
	}
	for _, f := range m.Families {
		if !want[f.Name] {
			mods = append(mods, table.FamilyMod{Name: f.Name, Drop: true})
		}
	}
	if len(mods) == 0 {
		if len(m.Families) == 0 {
			return nil
		}
		// Same families: take the stamp so the comparison settles.
		mods = []table.FamilyMod{{Name: m.Families[0].Name, Update: true, KeepGC: true}}
	}
	_, err := r.o.Sink.ModifyFamiliesAt(m.Instance, m.Name, mods, ts.Stamp)
	return err
}
