package table

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/storage"
)

// Instance metadata (clusters and app profiles) is kept as opaque values in
// the metadata space under kind "inst"; the server encodes them. Keys are
// "<kind>\x00<instance>\x00<name>" so one prefix lists one instance's entries.
const metaKindInstance = "inst"

func instanceMetaKey(kind, instance, name string) []byte {
	return storage.MetaKey(metaKindInstance, kind+"\x00"+instance+"\x00"+name)
}

// PutInstanceMeta durably stores one instance metadata entry (kind is
// "cluster" or "appprofile", chosen by the caller).
func (e *Engine) PutInstanceMeta(kind, instance, name string, value []byte) error {
	return e.writeInstanceMeta(func(b *pebble.Batch) error {
		return b.Set(instanceMetaKey(kind, instance, name), value, nil)
	})
}

// DeleteInstanceMeta durably removes one entry; removing a missing entry is
// not an error.
func (e *Engine) DeleteInstanceMeta(kind, instance, name string) error {
	return e.writeInstanceMeta(func(b *pebble.Batch) error {
		return b.Delete(instanceMetaKey(kind, instance, name), nil)
	})
}

// ReplaceInstanceMeta removes the entry (removeKind, instance, name) and
// stores value as (putKind, instance, name) in one atomic batch: a deleted
// entry and the tombstone that remembers its deletion, or the reverse.
func (e *Engine) ReplaceInstanceMeta(removeKind, putKind, instance, name string, value []byte) error {
	return e.writeInstanceMeta(func(b *pebble.Batch) error {
		if err := b.Delete(instanceMetaKey(removeKind, instance, name), nil); err != nil {
			return err
		}
		return b.Set(instanceMetaKey(putKind, instance, name), value, nil)
	})
}

// writeInstanceMeta commits, synced, the batch fill builds.
func (e *Engine) writeInstanceMeta(fill func(*pebble.Batch) error) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	b := e.store.NewBatch()
	defer b.Close()
	if err := fill(b); err != nil {
		return err
	}
	return e.commit(b)
}

// InstanceMeta lists the entries of one kind; with instance "" it lists
// every instance's. The callback gets instance, name and value (the value is
// only valid during the call).
func (e *Engine) InstanceMeta(kind, instance string, fn func(instance, name string, value []byte) error) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	sub := kind + "\x00"
	if instance != "" {
		sub += instance + "\x00"
	}
	prefix := storage.MetaKey(metaKindInstance, sub)
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return err
	}
	base := len(storage.MetaKey(metaKindInstance, kind+"\x00"))
	for it.First(); it.Valid(); it.Next() {
		rest := string(it.Key()[base:])
		inst, name := rest, ""
		for i := 0; i < len(rest); i++ {
			if rest[i] == 0 {
				inst, name = rest[:i], rest[i+1:]
				break
			}
		}
		if err := fn(inst, name, it.Value()); err != nil {
			it.Close()
			return err
		}
	}
	return it.Close()
}
