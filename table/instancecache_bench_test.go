package table

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/storage"
)

// instanceMetaIter is InstanceMeta as it was before the in-memory copy: a
// Pebble iterator per call (the benchmark's baseline).
func (e *Engine) instanceMetaIter(kind, instance string, fn func(instance, name string, value []byte) error) error {
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

// BenchmarkInstanceMeta lists one instance's clusters (what a pull answer
// and an Instance Admin read do) from a space of 4 instances × 3 kinds ×
// 8 entries, flushed to an SSTable with a few entries after it in the
// memtable: the in-memory copy against a Pebble iterator per call.
func BenchmarkInstanceMeta(b *testing.B) {
	e, err := Open(Options{Dir: b.TempDir(), Clock: clock.NewFake(time.Unix(1700000000, 0))})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	for i := 0; i < 4; i++ {
		for _, k := range []string{"cluster", "appprofile", "stamp"} {
			for n := 0; n < 8; n++ {
				if err := e.PutInstanceMeta(k, fmt.Sprint("projects/p/instances/i", i), fmt.Sprint("n", n), make([]byte, 200)); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	if err := e.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := e.PutInstanceMeta("cluster", "projects/p/instances/i1", "late", make([]byte, 200)); err != nil {
		b.Fatal(err)
	}
	count := func(string, string, []byte) error { return nil }
	for _, c := range []struct {
		name string
		list func(kind, instance string, fn func(string, string, []byte) error) error
	}{{"iterator", e.instanceMetaIter}, {"cached", e.InstanceMeta}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.list("cluster", "projects/p/instances/i1", count); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
