package table

import (
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/storage"
)

// checkFreeIDLocked refuses a table id given by the caller (TableSpec.ID)
// that a table here holds: a live one, a deleted one kept for undelete, or
// one being restored. e.mu is held.
func (e *Engine) checkFreeIDLocked(id uint64) error {
	taken := func(by string) error {
		return fmt.Errorf("%w: table id %d is taken by %s", ErrPrecondition, id, by)
	}
	for _, m := range e.tables {
		if m.ID == id {
			return taken("table " + m.Name)
		}
	}
	if _, closer, err := e.store.Get(restoringKey(id)); err == nil {
		closer.Close()
		return taken("a restore in progress")
	} else if err != pebble.ErrNotFound {
		return err
	}
	prefix := storage.MetaPrefix(metaKindUndelete)
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		var d deletedTable
		if err := json.Unmarshal(it.Value(), &d); err != nil {
			return fmt.Errorf("ebbtable: decode deleted table %q: %w", it.Key(), err)
		}
		if d.Meta != nil && d.Meta.ID == id {
			return taken("deleted table " + d.Meta.Name + " (restorable)")
		}
	}
	return it.Error()
}
