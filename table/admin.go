package table

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
)

// FamilySpec declares a family at table creation.
type FamilySpec struct {
	Name      string
	GC        gcrule.Rule
	ValueType []byte
	Aggregate Aggregator
}

// TableSpec declares a new table.
type TableSpec struct {
	Families           []FamilySpec
	Splits             [][]byte
	DeletionProtection bool
	// ChangeStreamRetention, when not zero, turns the table's change
	// stream on with this retention.
	ChangeStreamRetention time.Duration
	// Stamp, when set, is the schema stamp of a table created on a peer
	// cluster; zero means now, here.
	Stamp storage.Stamp
	// Micros keeps timestamps at microsecond granularity (Bigtable's
	// MICROS); the default is milliseconds.
	Micros bool
	// ID, when not zero, is the table's id, given by a cluster that
	// assigns ids cluster-wide so that every node keys the table's cells
	// alike and spans can move between nodes (span.go); CreateTable
	// refuses an id a table here has (or a deleted one keeps), and the
	// engine's own ids continue above it. Zero: the engine's next id.
	ID uint64
}

var (
	tableNameRE  = regexp.MustCompile(`^[_a-zA-Z0-9][-_.a-zA-Z0-9]{0,49}$`)
	familyNameRE = regexp.MustCompile(`^[-_.a-zA-Z0-9]{1,64}$`)
)

func validTableName(name string) error {
	if !tableNameRE.MatchString(name) {
		return fmt.Errorf("%w: table id %q must be 1-50 characters of [_a-zA-Z0-9][-_.a-zA-Z0-9]*", ErrInvalid, name)
	}
	return nil
}

func validFamilyName(name string) error {
	if !familyNameRE.MatchString(name) {
		return fmt.Errorf("%w: column family name %q must be 1-64 characters of [-_.a-zA-Z0-9]", ErrInvalid, name)
	}
	return nil
}

func validRule(family string, r gcrule.Rule) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("%w: gc rule of family %q: %w", ErrInvalid, family, err)
	}
	return nil
}

// CreateTable creates a table with its families.
func (e *Engine) CreateTable(instance, name string, spec TableSpec) (*Meta, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	if err := validTableName(name); err != nil {
		return nil, err
	}
	m := &Meta{Instance: instance, Name: name, CreatedMicros: e.nowMicros(), DeletionProtection: spec.DeletionProtection, Stamp: spec.Stamp}
	if m.Stamp.IsZero() {
		m.Stamp = e.schemaStamp()
	}
	seen := map[string]bool{}
	for _, f := range spec.Families {
		if err := validFamilyName(f.Name); err != nil {
			return nil, err
		}
		if err := validRule(f.Name, f.GC); err != nil {
			return nil, err
		}
		if seen[f.Name] {
			return nil, fmt.Errorf("%w: column family %q declared twice", ErrInvalid, f.Name)
		}
		seen[f.Name] = true
	}
	// Families take IDs in name order: the official clients send a map, so
	// creation order is not known; name order is stable and documented.
	specs := append([]FamilySpec(nil), spec.Families...)
	sort.Slice(specs, func(i, j int) bool { return specs[i].Name < specs[j].Name })
	for _, f := range specs {
		m.NextFamilyID++
		m.Families = append(m.Families, Family{ID: m.NextFamilyID, Name: f.Name, GC: f.GC, ValueType: f.ValueType, Aggregate: f.Aggregate})
	}
	splits := append([][]byte(nil), spec.Splits...)
	sort.Slice(splits, func(i, j int) bool { return bytes.Compare(splits[i], splits[j]) < 0 })
	for i, s := range splits {
		if len(s) == 0 {
			return nil, fmt.Errorf("%w: initial split keys must not be empty", ErrInvalid)
		}
		if i > 0 && bytes.Equal(s, splits[i-1]) {
			return nil, fmt.Errorf("%w: duplicate initial split key %q", ErrInvalid, s)
		}
	}
	m.Splits = splits
	m.Micros = spec.Micros
	m.ID = spec.ID
	if spec.ChangeStreamRetention != 0 {
		if err := validRetention(spec.ChangeStreamRetention); err != nil {
			return nil, err
		}
		m.ChangeStream = &ChangeStream{Retention: spec.ChangeStreamRetention, EnabledMicros: m.CreatedMicros}
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.insertTableLocked(m); err != nil {
		return nil, err
	}
	return m, nil
}

// insertTableLocked gives a new table the next id and durably adds it to
// the catalog. e.mu must be held.
func (e *Engine) insertTableLocked(m *Meta) error {
	key := catalogKey(m.Instance, m.Name)
	if _, ok := e.tables[key]; ok || e.reserved[key] {
		return fmt.Errorf("%w: %s", ErrTableExists, m.Name)
	}
	if m.ID == 0 {
		m.ID = e.nextTableID
	} else if err := e.checkFreeIDLocked(m.ID); err != nil {
		return err
	}
	next := max(e.nextTableID, m.ID+1)
	b := e.store.NewBatch()
	defer b.Close()
	enc, err := encodeMeta(m)
	if err != nil {
		return err
	}
	if err := b.Set(tableMetaKey(m.Instance, m.Name), enc, nil); err != nil {
		return err
	}
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], next-1)
	if err := b.Set(storage.MetaKey(metaKindSeq, "table"), seq[:], nil); err != nil {
		return err
	}
	// Clear any cells or records a crash may have left under this id.
	if err := b.DeleteRange(storage.TablePrefix(m.ID), storage.TableEnd(m.ID), nil); err != nil {
		return err
	}
	if err := b.DeleteRange(storage.AgendaPrefix(m.ID), storage.AgendaEnd(m.ID), nil); err != nil {
		return err
	}
	if err := b.DeleteRange(changestream.TableStart(m.ID), changestream.TableEnd(m.ID), nil); err != nil {
		return err
	}
	if err := e.commit(b); err != nil {
		return err
	}
	e.nextTableID = next
	e.tables[key] = m
	if m.ChangeStream != nil {
		e.streams.Store(m.ID, m.ChangeStream)
	}
	return nil
}

// DeleteTable drops a table and all its cells.
func (e *Engine) DeleteTable(instance, name string) error {
	return e.DeleteTableAt(instance, name, storage.Stamp{})
}

// DeleteTableAt drops a table as DeleteTable does; while replicating it
// leaves a marker stamped st (zero: now, here) so peers drop it too.
func (e *Engine) DeleteTableAt(instance, name string, st storage.Stamp) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	e.mu.Lock()
	defer e.mu.Unlock()
	m, ok := e.tables[catalogKey(instance, name)]
	if !ok {
		return fmt.Errorf("%w: %s", ErrTableNotFound, name)
	}
	if m.DeletionProtection {
		return fmt.Errorf("%w: table %s has deletion protection; turn it off first", ErrPrecondition, name)
	}
	b := e.store.NewBatch()
	defer b.Close()
	if err := b.Delete(tableMetaKey(instance, name), nil); err != nil {
		return err
	}
	if e.keepsDeleted() {
		// Restorable for a while: the data stays (undelete.go).
		if err := e.keepDeletedLocked(b, m); err != nil {
			return err
		}
	} else if err := purgeTableData(b, m.ID); err != nil { // with its change stream
		return err
	}
	if err := b.DeleteRange(storage.AgendaPrefix(m.ID), storage.AgendaEnd(m.ID), nil); err != nil {
		return err
	}
	if _, ok := e.Replicating(); ok {
		if st.IsZero() {
			st = e.schemaStamp()
		}
		if err := putDropMarker(b, instance, name, st); err != nil {
			return err
		}
	}
	if err := e.commit(b); err != nil {
		return err
	}
	delete(e.tables, catalogKey(instance, name))
	e.streams.Delete(m.ID)
	return nil
}

// FamilyMod is one change of ModifyColumnFamilies.
type FamilyMod struct {
	Name   string
	Create bool
	Update bool
	Drop   bool
	GC     gcrule.Rule
	// On Update, KeepGC leaves the rule alone and SetValueType replaces the
	// value type (refused for aggregate families, whose type is immutable).
	KeepGC       bool
	SetValueType bool
	ValueType    []byte
	Aggregate    Aggregator
	// IgnoreWarnings lets a drop proceed on a table with data. Accepted for
	// API compatibility; drops never need it here.
	IgnoreWarnings bool
	// Collected, on an update, says the caller already collected the
	// family under its old rule (a coordinated raise): the schema hook
	// does not run.
	Collected bool
}

// SchemaHook lets a background job take part in schema changes: it runs,
// under the schema lock, before a family's rule changes, and may refuse the
// change or do work first (the collector collects under the old rule).
type SchemaHook func(old *Meta, f Family, newRule gcrule.Rule) error

// SchemaGate lets a background job keep a rule change from landing while
// it works: ModifyFamilies calls it before taking the schema lock, for a
// change here that updates a rule, and calls what it returns once the
// change has landed (or failed). The collector passes its pass lock, so a
// pass never judges cells by a rule that changed under it, and the schema
// hook's sweep runs with no pass beside it.
type SchemaGate func() (release func())

// SetSchemaGate installs the gate taken around GC rule updates.
func (e *Engine) SetSchemaGate(g SchemaGate) {
	e.mu.Lock()
	e.schemaGate = g
	e.mu.Unlock()
}

// SetSchemaHook installs the hook run before GC rule updates.
func (e *Engine) SetSchemaHook(h SchemaHook) {
	e.mu.Lock()
	e.schemaHook = h
	e.mu.Unlock()
}

// ModifyFamilies applies all mods atomically: either every one takes effect
// or none does.
func (e *Engine) ModifyFamilies(instance, name string, mods []FamilyMod) (*Meta, error) {
	return e.ModifyFamiliesAt(instance, name, mods, storage.Stamp{})
}

// ModifyFamiliesAt is ModifyFamilies with the schema stamp of a change
// made on a peer cluster (zero: now, here).
func (e *Engine) ModifyFamiliesAt(instance, name string, mods []FamilyMod, st storage.Stamp) (*Meta, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	if len(mods) == 0 {
		return nil, fmt.Errorf("%w: no modifications given", ErrInvalid)
	}
	e.mu.RLock()
	gate := e.schemaGate
	e.mu.RUnlock()
	if gate != nil && st.IsZero() && slices.ContainsFunc(mods, func(m FamilyMod) bool { return m.Update && !m.Collected }) {
		release := gate() // released after the schema lock (defers run last first)
		defer release()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old, ok := e.tables[catalogKey(instance, name)]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrTableNotFound, name)
	}
	m := old.clone()
	for _, mod := range mods {
		n := 0
		for _, b := range []bool{mod.Create, mod.Update, mod.Drop} {
			if b {
				n++
			}
		}
		if n != 1 {
			return nil, fmt.Errorf("%w: modification of family %q must be exactly one of create, update, drop", ErrInvalid, mod.Name)
		}
		if err := validFamilyName(mod.Name); err != nil {
			return nil, err
		}
		f, exists := m.Family(mod.Name)
		switch {
		case mod.Create:
			if exists {
				return nil, fmt.Errorf("%w: %q in table %s", ErrFamilyExists, mod.Name, name)
			}
			if err := validRule(mod.Name, mod.GC); err != nil {
				return nil, err
			}
			m.NextFamilyID++
			m.Families = append(m.Families, Family{ID: m.NextFamilyID, Name: mod.Name, GC: mod.GC, ValueType: mod.ValueType, Aggregate: mod.Aggregate})
		case mod.Update:
			if !exists {
				return nil, fmt.Errorf("%w: %q in table %s", ErrFamilyNotFound, mod.Name, name)
			}
			if mod.SetValueType {
				if f.Aggregate != NotAggregate {
					return nil, fmt.Errorf("%w: Immutable fields 'value_type.aggregate_type' cannot be updated (family %q is an aggregate family)", ErrInvalid, mod.Name)
				}
				f.ValueType, f.Aggregate = mod.ValueType, mod.Aggregate
			}
			if mod.KeepGC {
				continue
			}
			if err := validRule(mod.Name, mod.GC); err != nil {
				return nil, err
			}
			if st.IsZero() {
				if err := e.checkAgeRaise(name, *f, mod.GC); err != nil {
					return nil, err
				}
			}
			// A change that arrives from a peer does not run the hook: it
			// takes effect here without a collection under the old rule,
			// as on the source system (docs/replication.md, "GC across clusters").
			if e.schemaHook != nil && st.IsZero() && !mod.Collected {
				if err := e.schemaHook(old, *f, mod.GC); err != nil {
					return nil, err
				}
			}
			f.GC = mod.GC
		case mod.Drop:
			if !exists {
				return nil, fmt.Errorf("%w: %q in table %s", ErrFamilyNotFound, mod.Name, name)
			}
			if m.DeletionProtection {
				return nil, fmt.Errorf("%w: table %s has deletion protection; its column families cannot be dropped", ErrPrecondition, name)
			}
			if m.RowPolicy != nil && m.RowPolicy.Family == mod.Name {
				return nil, fmt.Errorf("%w: column family %q holds table %s's row deletion policy column; drop the policy first", ErrPrecondition, mod.Name, name)
			}
			m.DroppedFamilies = append(m.DroppedFamilies, f.ID)
			if m.DroppedNames == nil {
				m.DroppedNames = map[uint32]string{}
			}
			m.DroppedNames[f.ID] = f.Name
			kept := m.Families[:0:0]
			for _, g := range m.Families {
				if g.Name != mod.Name {
					kept = append(kept, g)
				}
			}
			m.Families = kept
		}
	}
	m.Stamp = st
	if m.Stamp.IsZero() {
		m.Stamp = e.schemaStamp()
	}
	if err := e.saveMetaLocked(m); err != nil {
		return nil, err
	}
	for _, mod := range mods {
		if f, ok := old.Family(mod.Name); ok && mod.Drop {
			if err := e.clearAgeCutoffs(m.ID, f.ID); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// ForgetDropped records that the cells of the given dropped families are
// gone, once the collector has swept them.
func (e *Engine) ForgetDropped(instance, name string, ids []uint32) error {
	_, err := e.updateMeta(instance, name, func(m *Meta) error {
		m.DroppedFamilies = slices.DeleteFunc(m.DroppedFamilies, func(id uint32) bool { return slices.Contains(ids, id) })
		for _, id := range ids {
			delete(m.DroppedNames, id)
		}
		return nil
	})
	if errors.Is(err, ErrTableNotFound) {
		return nil // the table went away, and its cells with it
	}
	return err
}

// SetExpiryTimestamps turns a family's expiry-timestamp guard on or off.
func (e *Engine) SetExpiryTimestamps(instance, name, family string, on bool) (*Meta, error) {
	return e.updateMeta(instance, name, func(m *Meta) error {
		f, ok := m.Family(family)
		if !ok {
			return fmt.Errorf("%w: %q in table %s", ErrFamilyNotFound, family, name)
		}
		f.ExpiryTimestamps = on
		return nil
	})
}

// SetDeletionProtection changes a table's deletion protection.
func (e *Engine) SetDeletionProtection(instance, name string, on bool) (*Meta, error) {
	return e.updateMeta(instance, name, func(m *Meta) error {
		m.DeletionProtection = on
		return nil
	})
}

// updateMeta changes a copy of a table's schema with fn and durably
// replaces the schema with it; nothing changes if fn fails.
func (e *Engine) updateMeta(instance, name string, fn func(m *Meta) error) (*Meta, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	e.mu.Lock()
	defer e.mu.Unlock()
	old, ok := e.tables[catalogKey(instance, name)]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrTableNotFound, name)
	}
	m := old.clone()
	if err := fn(m); err != nil {
		return nil, err
	}
	if err := e.saveMetaLocked(m); err != nil {
		return nil, err
	}
	return m, nil
}

// saveMetaLocked durably replaces a table's schema. e.mu must be held.
func (e *Engine) saveMetaLocked(m *Meta) error {
	enc, err := encodeMeta(m)
	if err != nil {
		return err
	}
	b := e.store.NewBatch()
	defer b.Close()
	if err := b.Set(tableMetaKey(m.Instance, m.Name), enc, nil); err != nil {
		return err
	}
	if err := e.commit(b); err != nil {
		return err
	}
	e.tables[catalogKey(m.Instance, m.Name)] = m
	return nil
}

// DropRowRange deletes every row whose key starts with prefix, or every row
// of the table when all is true.
func (e *Engine) DropRowRange(instance, name string, prefix []byte, all bool) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	m, err := e.Table(instance, name)
	if err != nil {
		return err
	}
	if !all && len(prefix) == 0 {
		return fmt.Errorf("%w: row key prefix must not be empty (use delete all data)", ErrInvalid)
	}
	lo, hi := storage.TablePrefix(m.ID), storage.TableEnd(m.ID)
	if !all {
		lo, hi = storage.RowPrefixScanStart(m.ID, prefix), storage.RowPrefixScanEnd(m.ID, prefix)
	}
	// Every row lock is held: with a change stream every dropped row gets
	// its record, so no writer may slip a row in between the listing and
	// the drop, and the stream cannot turn on or off meanwhile.
	unlock := e.lockAllRows()
	defer unlock()
	if err := e.checkOpen(); err != nil {
		return err
	}
	var recs []changestream.Record
	if e.streaming(m.ID) {
		if recs, err = e.dropRowRecords(lo, hi); err != nil {
			return err
		}
	}
	b := e.store.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(lo, hi, nil); err != nil {
		return err
	}
	if err := b.LogData(dropMarker(m.ID), nil); err != nil { // commitlog.go
		return err
	}
	logged, err := e.logViewDropped(b, m, prefix, all) // viewlog.go
	defer logged()
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		finished, err := e.logBatch(b) // commitlog.go
		if err != nil {
			return err
		}
		defer finished()
		return e.commitTable(b, m, nil, pebble.Sync, true)
	}
	// As commitRecorded, with the records in the batch before it goes to
	// the commit log (a take-over rebuilds them from it).
	ts := e.seq.begin(e.nowMicros())
	defer e.seq.end(ts)
	if e.beforeRecordedCommit != nil {
		e.beforeRecordedCommit(recs)
	}
	if err := e.addRecords(b, m, ts, recs); err != nil {
		return err
	}
	finished, err := e.logBatch(b) // commitlog.go
	if err != nil {
		return err
	}
	defer finished()
	return e.commitTable(b, m, nil, pebble.Sync, true)
}
