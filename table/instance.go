package table

import (
	"github.com/ebbtable/ebbtable/storage"
)

// Instance metadata (clusters and app profiles) is kept as opaque values in
// the metadata space under kind "inst"; the server encodes them. Keys are
// "<kind>\x00<instance>\x00<name>" so one prefix lists one instance's entries.
// Reads are served from an in-memory copy of the space (instancecache.go).
const metaKindInstance = "inst"

func instanceMetaKey(kind, instance, name string) []byte {
	return storage.MetaKey(metaKindInstance, kind+"\x00"+instance+"\x00"+name)
}

// PutInstanceMeta durably stores one instance metadata entry (kind is
// "cluster" or "appprofile", chosen by the caller).
func (e *Engine) PutInstanceMeta(kind, instance, name string, value []byte) error {
	return e.writeInstanceMeta(instChange{kind: kind, inst: instance, name: name, value: value})
}

// DeleteInstanceMeta durably removes one entry; removing a missing entry is
// not an error.
func (e *Engine) DeleteInstanceMeta(kind, instance, name string) error {
	return e.writeInstanceMeta(instChange{kind: kind, inst: instance, name: name, del: true})
}

// ReplaceInstanceMeta removes the entry (removeKind, instance, name) and
// stores value as (putKind, instance, name) in one atomic batch: a deleted
// entry and the tombstone that remembers its deletion, or the reverse.
func (e *Engine) ReplaceInstanceMeta(removeKind, putKind, instance, name string, value []byte) error {
	return e.writeInstanceMeta(
		instChange{kind: removeKind, inst: instance, name: name, del: true},
		instChange{kind: putKind, inst: instance, name: name, value: value})
}

// writeInstanceMeta commits, synced, the changes in one batch, then makes
// them in the in-memory copy (instancecache.go): a read that starts after
// the call returns sees them. Writers are serialised so the copy changes
// in commit order; a failed commit drops the copy (its fate is unknown).
func (e *Engine) writeInstanceMeta(changes ...instChange) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	b := e.store.NewBatch()
	defer b.Close()
	for _, c := range changes {
		k := instanceMetaKey(c.kind, c.inst, c.name)
		var err error
		if c.del {
			err = b.Delete(k, nil)
		} else {
			err = b.Set(k, c.value, nil)
		}
		if err != nil {
			return err
		}
	}
	e.instMeta.mu.Lock()
	defer e.instMeta.mu.Unlock()
	if err := e.commit(b); err != nil {
		e.instMeta.snap.Store(nil)
		return err
	}
	if s := e.instMeta.snap.Load(); s != nil {
		e.instMeta.snap.Store(s.with(changes))
	}
	return nil
}

// InstanceMeta lists the entries of one kind in key order; with instance
// "" it lists every instance's. The callback gets instance, name and value
// (the value is only valid during the call and must not be modified).
func (e *Engine) InstanceMeta(kind, instance string, fn func(instance, name string, value []byte) error) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	s, err := e.instSnapshot()
	if err != nil {
		return err
	}
	for _, en := range s.entries(kind, instance) {
		if err := fn(en.inst, en.name, en.value); err != nil {
			return err
		}
	}
	return nil
}
