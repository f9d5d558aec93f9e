package table

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/storage"
)

// Retention says what a restored table does with the row deletion policy
// its backup carries.
type Retention string

// The retention modes of a restore.
const (
	// RetentionDrop removes the policy, as the source system does, so that
	// restored rows that are already past it are not purged at once. The
	// default.
	RetentionDrop Retention = "drop"
	// RetentionPause keeps the policy but does not run it until resumed.
	RetentionPause Retention = "pause"
	// RetentionApply keeps the policy running: rows already past it are
	// deleted by its next cycle.
	RetentionApply Retention = "apply"
)

// ParseRetention reads a --retention value; "" means RetentionDrop.
func ParseRetention(s string) (Retention, error) {
	switch Retention(s) {
	case "":
		return RetentionDrop, nil
	case RetentionDrop, RetentionPause, RetentionApply:
		return Retention(s), nil
	}
	return "", fmt.Errorf("%w: retention %q (want drop, pause or apply)", ErrInvalid, s)
}

// Restored records where a restored table came from. It is part of the
// table's schema, so it survives restarts and GetTable can report it.
type Restored struct {
	// Backup is the backup's resource name.
	Backup string `json:"backup"`
	// SourceTable is the resource name of the table the backup was taken of.
	SourceTable string `json:"source_table"`
	// SourceBackup names the backup this one was copied from, if any.
	SourceBackup string `json:"source_backup,omitempty"`
	// StartMicros and EndMicros are when the backup began and finished;
	// VersionMicros is its version time, the instant its image shows.
	StartMicros   int64 `json:"start_micros"`
	EndMicros     int64 `json:"end_micros"`
	VersionMicros int64 `json:"version_micros"`
	// RestoredMicros is when the restore committed.
	RestoredMicros int64 `json:"restored_micros"`
	// Retention is the row-deletion-policy choice made at restore.
	Retention Retention `json:"retention"`
}

// TableSnapshot is one table at one instant: its schema and a snapshot of
// the database, consistent with each other. Close it when done,
// and before the engine closes.
type TableSnapshot struct {
	Meta *Meta
	snap *pebble.Snapshot
	// Time is the engine clock's reading when the snapshot was taken.
	Time time.Time
}

// Close releases the snapshot.
func (s *TableSnapshot) Close() error { return s.snap.Close() }

// Iter walks the table's keys as of the snapshot.
func (s *TableSnapshot) Iter() (*RawIter, error) {
	it, err := s.snap.NewIter(&pebble.IterOptions{LowerBound: storage.TablePrefix(s.Meta.ID), UpperBound: storage.TableEnd(s.Meta.ID)})
	if err != nil {
		return nil, err
	}
	return &RawIter{it: it}, nil
}

// IterRows walks the keys of rows [start, end) as of the snapshot; an
// empty end is the table's end. A cluster's backup reads one tablet so.
func (s *TableSnapshot) IterRows(start, end []byte) (*RawIter, error) {
	upper := storage.TableEnd(s.Meta.ID)
	if len(end) > 0 {
		upper = storage.RowBound(s.Meta.ID, end)
	}
	it, err := s.snap.NewIter(&pebble.IterOptions{LowerBound: storage.RowBound(s.Meta.ID, start), UpperBound: upper})
	if err != nil {
		return nil, err
	}
	return &RawIter{it: it}, nil
}

// SnapshotTable takes a consistent image of a table while writes continue.
// The schema lock is held shared while the snapshot is taken, so no schema
// change falls between the schema read and the snapshot.
func (e *Engine) SnapshotTable(instance, name string) (*TableSnapshot, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	e.mu.RLock()
	defer e.mu.RUnlock()
	m, ok := e.tables[catalogKey(instance, name)]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrTableNotFound, name)
	}
	snap := e.store.NewSnapshot()
	return &TableSnapshot{Meta: m, snap: snap, Time: e.clock.Now()}, nil
}

const metaKindRestoring = "restoring"

func restoringKey(id uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], id)
	return storage.MetaKey(metaKindRestoring, string(b[:]))
}

// restoringRecord is the marker a restore in progress leaves in the
// metadata space, so that Open can remove the cells of one a crash cut short.
type restoringRecord struct {
	Instance string `json:"instance"`
	Name     string `json:"name"`
}

// Restoring is a table being restored: its name is reserved and its id
// allocated, but it is not in the catalog until Commit. Until then a crash
// leaves nothing visible: Open removes the cells of an uncommitted restore.
type Restoring struct {
	e              *Engine
	id             uint64
	instance, name string
	finished       bool
}

// BeginRestore reserves a table name and a fresh table id for a restore.
// It fails with ErrTableExists if the name is taken or being restored.
func (e *Engine) BeginRestore(instance, name string) (*Restoring, error) {
	return e.BeginRestoreID(instance, name, 0)
}

// BeginRestoreID is BeginRestore under a table id a cluster assigned
// (TableSpec.ID explains why); zero is the engine's next id. An id a table
// here has, or a deleted one keeps, fails with ErrPrecondition.
func (e *Engine) BeginRestoreID(instance, name string, given uint64) (*Restoring, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	if err := validTableName(name); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	key := catalogKey(instance, name)
	if _, ok := e.tables[key]; ok || e.reserved[key] {
		return nil, fmt.Errorf("%w: %s", ErrTableExists, name)
	}
	id := e.nextTableID
	if given != 0 {
		if err := e.checkFreeIDLocked(given); err != nil {
			return nil, err
		}
		id = given
	}
	next := max(e.nextTableID, id+1)
	rec, err := json.Marshal(restoringRecord{Instance: instance, Name: name})
	if err != nil {
		return nil, err
	}
	b := e.store.NewBatch()
	defer b.Close()
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], next-1)
	if err := b.Set(storage.MetaKey(metaKindSeq, "table"), seq[:], nil); err != nil {
		return nil, err
	}
	// No DeleteRange of the id's span here (CreateTable has one): ids are
	// never reused, a crashed restore's cells are removed at open, and a
	// range deletion in the memtable would force a flush when the restore
	// ingests into the same span.
	if err := b.Set(restoringKey(id), rec, nil); err != nil {
		return nil, err
	}
	if err := e.commit(b); err != nil {
		return nil, err
	}
	e.nextTableID = next
	if e.reserved == nil {
		e.reserved = map[string]bool{}
	}
	e.reserved[key] = true
	return &Restoring{e: e, id: id, instance: instance, name: name}, nil
}

// TableID is the id the restored table's cell keys must carry.
func (r *Restoring) TableID() uint64 { return r.id }

// Ingest adds SSTables holding cells of the restored table (keys under
// TableID, in this database's format) to the database. The files are
// linked or copied in; the caller removes its copies.
func (r *Restoring) Ingest(ctx context.Context, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	if err := r.e.enter(); err != nil {
		return err
	}
	defer r.e.leave()
	r.e.cellGen.Add(1) // cells not written through applyOne (columnNewest)
	defer r.e.cellGen.Add(1)
	if err := r.e.store.Ingest(ctx, paths); err != nil {
		return fmt.Errorf("ebbtable: ingest restored data: %w", err)
	}
	return nil
}

// Commit makes the restored table visible with the families, GC rules and
// splits of src (the backed-up schema) and the restore record info. The
// schema entry is written and the marker removed in one synced batch.
func (r *Restoring) Commit(src *Meta, info Restored) (*Meta, error) {
	if r.finished {
		return nil, fmt.Errorf("%w: restore of %s already finished", ErrPrecondition, r.name)
	}
	e := r.e
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	info.RestoredMicros = e.nowMicros()
	m := &Meta{
		ID:            r.id,
		Instance:      r.instance,
		Name:          r.name,
		Families:      append([]Family(nil), src.Families...),
		NextFamilyID:  src.NextFamilyID,
		CreatedMicros: info.RestoredMicros,
		Splits:        append([][]byte(nil), src.Splits...),
		Restored:      &info,
	}
	applyRestoreRetention(m, src, info.Retention)
	enc, err := encodeMeta(m)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.store.NewBatch()
	defer b.Close()
	if err := b.Set(tableMetaKey(m.Instance, m.Name), enc, nil); err != nil {
		return nil, err
	}
	if err := b.Delete(restoringKey(r.id), nil); err != nil {
		return nil, err
	}
	if err := e.commit(b); err != nil {
		return nil, err
	}
	key := catalogKey(r.instance, r.name)
	delete(e.reserved, key)
	e.tables[key] = m
	r.finished = true
	return m, nil
}

// Abort gives up a restore: its cells are deleted, its marker removed and
// its name released. Aborting a finished restore does nothing.
func (r *Restoring) Abort() error {
	if r.finished {
		return nil
	}
	e := r.e
	if err := e.enter(); err != nil {
		return err // Open cleans up after the next start
	}
	defer e.leave()
	e.mu.Lock()
	defer e.mu.Unlock()
	r.finished = true
	delete(e.reserved, catalogKey(r.instance, r.name))
	return e.dropRestoreLocked(r.id)
}

// dropRestoreLocked deletes the cells and the marker of an unfinished
// restore.
func (e *Engine) dropRestoreLocked(id uint64) error {
	b := e.store.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(storage.TablePrefix(id), storage.TableEnd(id), nil); err != nil {
		return err
	}
	if err := b.Delete(restoringKey(id), nil); err != nil {
		return err
	}
	return e.commit(b)
}

// cleanRestores removes what restores cut short by a crash left behind.
// It runs in Open, before anyone can see the catalog.
func (e *Engine) cleanRestores() error {
	prefix := storage.MetaPrefix(metaKindRestoring)
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return err
	}
	var ids []uint64
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) < 8 {
			it.Close()
			return fmt.Errorf("%w: restore marker %x", storage.ErrCorruptKey, k)
		}
		ids = append(ids, binary.BigEndian.Uint64(k[len(k)-8:]))
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, id := range ids {
		if err := e.dropRestoreLocked(id); err != nil {
			return err
		}
		e.log.Info("removed a restore a crash cut short", "table_id", id)
	}
	return nil
}

// applyRestoreRetention carries the backed-up table's row deletion policy
// onto the restored table m according to mode: RetentionDrop leaves m
// without a policy (the source system's behaviour, so restored expired data
// is not purged at once), RetentionPause copies it paused (it neither hides
// nor deletes rows until ResumeRowPolicy), RetentionApply copies it active.
// The interleave separator, part of the table's shape, is always copied.
func applyRestoreRetention(m, src *Meta, mode Retention) {
	m.InterleaveSeparator = append([]byte(nil), src.InterleaveSeparator...)
	if src.RowPolicy == nil || mode == RetentionDrop || mode == "" {
		return
	}
	p := *src.RowPolicy
	p.Paused = mode == RetentionPause
	m.RowPolicy = &p
}
