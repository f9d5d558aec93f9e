package table

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/storage"
)

// Deleted tables stay restorable, as in Cloud Bigtable: with
// Options.UndeleteRetention > 0, DeleteTable removes the table from the
// catalog but keeps its cells, change stream and GC cutoffs under its id
// (ids are never reused) and records the deletion. UndeleteTable puts it
// back within the retention; PurgeDeletedTables removes what the retention
// has passed. Only the newest deleted incarnation of a name is kept: a
// second deletion of the name purges the first. A replicating engine
// deletes at once (a deletion must reach every cluster the same way).

// metaKindUndelete keys a deleted table's record: instance \x00 name.
const metaKindUndelete = "undel"

// deletedTable is the record of a deleted, still restorable table.
type deletedTable struct {
	Meta      *Meta     `json:"meta"`
	DeletedAt time.Time `json:"deleted_at"`
}

func undeleteKey(instance, name string) []byte {
	return storage.MetaKey(metaKindUndelete, instance+"\x00"+name)
}

// purgeTableData deletes a table id's cells, change stream and GC cutoffs.
func purgeTableData(b *pebble.Batch, id uint64) error {
	if err := b.DeleteRange(storage.TablePrefix(id), storage.TableEnd(id), nil); err != nil {
		return err
	}
	if err := b.DeleteRange(changestream.TableStart(id), changestream.TableEnd(id), nil); err != nil {
		return err
	}
	return b.DeleteRange(ageCutoffPrefix(id), storage.PrefixEnd(ageCutoffPrefix(id)), nil)
}

// keepsDeleted reports whether a deletion keeps the table restorable.
func (e *Engine) keepsDeleted() bool {
	_, replicating := e.Replicating()
	return e.undeleteRetention > 0 && !replicating
}

// deletedRecord reads the record of the deleted table instance/name.
func (e *Engine) deletedRecord(instance, name string) (*deletedTable, error) {
	v, closer, err := e.store.Get(undeleteKey(instance, name))
	if err == pebble.ErrNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	d := &deletedTable{}
	if err := json.Unmarshal(v, d); err != nil {
		return nil, fmt.Errorf("ebbtable: decode deleted table %s: %w", name, err)
	}
	return d, nil
}

// keepDeletedLocked adds to b the record that keeps m restorable, purging
// the data of an older deleted incarnation of the name. e.mu is held.
func (e *Engine) keepDeletedLocked(b *pebble.Batch, m *Meta) error {
	old, err := e.deletedRecord(m.Instance, m.Name)
	if err != nil {
		return err
	}
	if old != nil && old.Meta.ID != m.ID {
		if err := purgeTableData(b, old.Meta.ID); err != nil {
			return err
		}
	}
	v, err := json.Marshal(&deletedTable{Meta: m, DeletedAt: e.clock.Now()})
	if err != nil {
		return err
	}
	return b.Set(undeleteKey(m.Instance, m.Name), v, nil)
}

// UndeleteTable restores a table deleted less than the undelete retention
// ago, with its cells, schema and change stream. It fails with
// ErrTableExists while a table of that name exists, and ErrTableNotFound
// when no deleted table of that name can be restored.
func (e *Engine) UndeleteTable(instance, name string) (*Meta, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	e.mu.Lock()
	defer e.mu.Unlock()
	key := catalogKey(instance, name)
	if _, ok := e.tables[key]; ok || e.reserved[key] {
		return nil, fmt.Errorf("%w: %s (a table of that name exists; delete or rename it first)", ErrTableExists, name)
	}
	d, err := e.deletedRecord(instance, name)
	if err != nil {
		return nil, err
	}
	if d == nil || !e.clock.Now().Before(d.DeletedAt.Add(e.undeleteRetention)) {
		return nil, fmt.Errorf("%w: no deleted table %s within the undelete retention (%v)", ErrTableNotFound, name, e.undeleteRetention)
	}
	m := d.Meta
	enc, err := encodeMeta(m)
	if err != nil {
		return nil, err
	}
	b := e.store.NewBatch()
	defer b.Close()
	if err := b.Delete(undeleteKey(instance, name), nil); err != nil {
		return nil, err
	}
	if err := b.Set(tableMetaKey(instance, name), enc, nil); err != nil {
		return nil, err
	}
	if err := e.commit(b); err != nil {
		return nil, err
	}
	e.tables[key] = m
	if m.ChangeStream != nil {
		e.streams.Store(m.ID, m.ChangeStream)
	}
	return m, nil
}

// PurgeDeletedTables removes the data of deleted tables whose undelete
// retention has passed, and returns how many it purged.
func (e *Engine) PurgeDeletedTables() (int, error) {
	if err := e.enter(); err != nil {
		return 0, err
	}
	defer e.leave()
	e.mu.Lock()
	defer e.mu.Unlock()
	prefix := storage.MetaPrefix(metaKindUndelete)
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return 0, err
	}
	b := e.store.NewBatch()
	defer b.Close()
	now, n := e.clock.Now(), 0
	for it.First(); it.Valid(); it.Next() {
		d := &deletedTable{}
		if err := json.Unmarshal(it.Value(), d); err != nil {
			it.Close()
			return 0, fmt.Errorf("ebbtable: decode deleted table %q: %w", it.Key(), err)
		}
		if now.Before(d.DeletedAt.Add(e.undeleteRetention)) && e.undeleteRetention > 0 {
			continue
		}
		if err := purgeTableData(b, d.Meta.ID); err != nil {
			it.Close()
			return 0, err
		}
		if err := b.Delete(append([]byte{}, it.Key()...), nil); err != nil {
			it.Close()
			return 0, err
		}
		n++
	}
	if err := it.Close(); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	return n, e.commit(b)
}
