package table

import (
	"bytes"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/storage"
)

// The instance metadata space (instance.go) is read far more often than it
// is written: every pull answer reads the clusters and stamps, every view
// maintenance pass lists the materialized views. A Pebble iterator per read
// is costly (and, in the race build, Pebble takes a stack per SSTable each
// iterator opens), so the engine keeps the whole space in memory: loaded on
// the first read, changed by every write after its commit, dropped (and
// loaded again on the next read) when a write's fate is unknown.
//
// Every write of the space goes through writeInstanceMeta; the bulk paths
// (ingest, excise, range deletions) touch table spans only, and a
// DeleteBatch that touches the space drops the cache (CommitSystem).

// instCache holds the in-memory copy of the instance metadata space.
type instCache struct {
	// mu serialises the writers (commit, then change the copy) and the
	// load, so the copy changes in commit order.
	mu   sync.Mutex
	snap atomic.Pointer[instSnap] // nil: not loaded
}

// instSnap is one immutable state of the space: per kind, its entries in
// key order. Readers use it without a lock; a write makes a new one.
type instSnap struct {
	kinds map[string][]instEntry
}

// instEntry is one entry; key is instance + "\x00" + name, the order
// Pebble keeps them in.
type instEntry struct {
	key        string
	inst, name string
	value      []byte
}

// instChange is one change a write makes: value set, or the entry deleted.
type instChange struct {
	kind, inst, name string
	value            []byte
	del              bool
}

// instanceMetaPrefix is the prefix of the whole space.
var instanceMetaPrefix = storage.MetaPrefix(metaKindInstance)

// instSnapshot returns the current copy, loading it if need be. The caller
// is inside enter.
func (e *Engine) instSnapshot() (*instSnap, error) {
	if s := e.instMeta.snap.Load(); s != nil {
		return s, nil
	}
	e.instMeta.mu.Lock()
	defer e.instMeta.mu.Unlock()
	if s := e.instMeta.snap.Load(); s != nil {
		return s, nil
	}
	s, err := e.loadInstanceMeta()
	if err != nil {
		return nil, err
	}
	e.instMeta.snap.Store(s)
	return s, nil
}

// loadInstanceMeta reads the whole space from Pebble.
func (e *Engine) loadInstanceMeta() (*instSnap, error) {
	it, err := e.store.NewIter(&pebble.IterOptions{LowerBound: instanceMetaPrefix, UpperBound: storage.PrefixEnd(instanceMetaPrefix)})
	if err != nil {
		return nil, err
	}
	s := &instSnap{kinds: map[string][]instEntry{}}
	for it.First(); it.Valid(); it.Next() {
		rest := string(it.Key()[len(instanceMetaPrefix):])
		kind, key, ok := strings.Cut(rest, "\x00")
		if !ok {
			continue
		}
		inst, name, _ := strings.Cut(key, "\x00")
		s.kinds[kind] = append(s.kinds[kind], instEntry{key: key, inst: inst, name: name, value: bytes.Clone(it.Value())})
	}
	return s, it.Close()
}

// with returns the state after changes, in order.
func (s *instSnap) with(changes []instChange) *instSnap {
	n := &instSnap{kinds: make(map[string][]instEntry, len(s.kinds)+1)}
	for k, v := range s.kinds {
		n.kinds[k] = v
	}
	copied := map[string]bool{}
	for _, c := range changes {
		es := n.kinds[c.kind]
		if !copied[c.kind] {
			es = append(make([]instEntry, 0, len(es)+1), es...)
			copied[c.kind] = true
		}
		key := c.inst + "\x00" + c.name
		i := sort.Search(len(es), func(i int) bool { return es[i].key >= key })
		found := i < len(es) && es[i].key == key
		switch {
		case c.del && found:
			es = append(es[:i], es[i+1:]...)
		case c.del:
		case found:
			es[i].value = bytes.Clone(c.value)
		default:
			es = append(es, instEntry{})
			copy(es[i+1:], es[i:])
			es[i] = instEntry{key: key, inst: c.inst, name: c.name, value: bytes.Clone(c.value)}
		}
		if len(es) == 0 {
			delete(n.kinds, c.kind)
		} else {
			n.kinds[c.kind] = es
		}
	}
	return n
}

// entries returns the entries of kind, of one instance unless instance is
// "".
func (s *instSnap) entries(kind, instance string) []instEntry {
	es := s.kinds[kind]
	if instance == "" {
		return es
	}
	prefix := instance + "\x00"
	lo := sort.Search(len(es), func(i int) bool { return es[i].key >= prefix })
	hi := lo
	for hi < len(es) && strings.HasPrefix(es[hi].key, prefix) {
		hi++
	}
	return es[lo:hi]
}

// dropInstanceMetaCache forgets the copy: the next read loads the space
// again. For writes whose outcome the copy cannot follow.
func (e *Engine) dropInstanceMetaCache() {
	e.instMeta.mu.Lock()
	e.instMeta.snap.Store(nil)
	e.instMeta.mu.Unlock()
}

// touchesInstanceMeta reports whether [lo, hi) (hi nil: the single key lo)
// meets the instance metadata space.
func touchesInstanceMeta(lo, hi []byte) bool {
	if hi == nil {
		return bytes.HasPrefix(lo, instanceMetaPrefix)
	}
	return bytes.Compare(lo, storage.PrefixEnd(instanceMetaPrefix)) < 0 && bytes.Compare(hi, instanceMetaPrefix) > 0
}
