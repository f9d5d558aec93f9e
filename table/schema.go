package table

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
)

// Family is a column family of a table. IDs are never reused within a table,
// so a dropped family's cells stay invisible even if the name comes back.
type Family struct {
	ID   uint32      `json:"id"`
	Name string      `json:"name"`
	GC   gcrule.Rule `json:"gc"`
	// ValueType is the family's declared value type, opaque to the engine
	// (the server stores the API's encoding and returns it as given).
	ValueType []byte `json:"value_type,omitempty"`
	// Aggregate is how AddToCell and MergeToCell combine values, for
	// aggregate families.
	Aggregate Aggregator `json:"aggregate,omitempty"`
	// ExpiryTimestamps marks a family whose writers put each cell's expiry
	// time in its timestamp (the one-second expiration pattern): writes
	// with server or client-generated timestamps are refused.
	ExpiryTimestamps bool `json:"expiry_timestamps,omitempty"`
}

// Aggregator names an aggregate family's combining function over
// 64-bit big-endian integers.
type Aggregator string

// The aggregators.
const (
	NotAggregate Aggregator = ""
	AggSum       Aggregator = "sum"
	AggMin       Aggregator = "min"
	AggMax       Aggregator = "max"
	// AggHLL keeps the latest merged sketch as given; ebbtable does not
	// merge HyperLogLog sketches.
	AggHLL Aggregator = "hll"
)

// Meta is a table's schema as stored in the metadata space.
type Meta struct {
	ID                 uint64   `json:"id"`
	Instance           string   `json:"instance"`
	Name               string   `json:"name"`
	Families           []Family `json:"families"`
	NextFamilyID       uint32   `json:"next_family_id"`
	CreatedMicros      int64    `json:"created_micros"`
	DeletionProtection bool     `json:"deletion_protection,omitempty"`
	Splits             [][]byte `json:"splits,omitempty"`
	// DroppedFamilies are ids of dropped families whose cells the collector
	// has not yet swept.
	DroppedFamilies []uint32 `json:"dropped_families,omitempty"`
	// DroppedNames are the names of the dropped families awaiting the
	// collector, by id, so its change-stream records can name them.
	DroppedNames map[uint32]string `json:"dropped_names,omitempty"`
	// ChangeStream is the table's change-stream configuration; nil when the
	// table has none.
	ChangeStream *ChangeStream `json:"change_stream,omitempty"`
	// Restored is set on a table restored from a backup.
	Restored *Restored `json:"restored,omitempty"`
	// RowPolicy is the table's row deletion policy, if any (package rowttl).
	RowPolicy *RowPolicy `json:"row_policy,omitempty"`
	// InterleaveSeparator, when set, makes rows keyed parent+separator+…
	// interleaved children of row parent, deleted with it by the row
	// deletion job.
	InterleaveSeparator []byte `json:"interleave_separator,omitempty"`
	// Stamp is when (and on which cluster) the table was created or its
	// families last changed: between clusters the newer schema wins.
	Stamp storage.Stamp `json:"stamp,omitzero"`
	// Micros: timestamps have microsecond granularity (MICROS), not
	// millisecond.
	Micros bool `json:"micros,omitempty"`
}

// Family returns the family with the given name.
func (m *Meta) Family(name string) (*Family, bool) {
	for i := range m.Families {
		if m.Families[i].Name == name {
			return &m.Families[i], true
		}
	}
	return nil, false
}

// FamilyByID returns the family with the given id.
func (m *Meta) FamilyByID(id uint32) (*Family, bool) {
	// Families are kept sorted by ID; tables have few families.
	i := sort.Search(len(m.Families), func(i int) bool { return m.Families[i].ID >= id })
	if i < len(m.Families) && m.Families[i].ID == id {
		return &m.Families[i], true
	}
	return nil, false
}

func (m *Meta) clone() *Meta {
	c := *m
	c.Families = append([]Family(nil), m.Families...)
	c.Splits = append([][]byte(nil), m.Splits...)
	c.DroppedFamilies = append([]uint32(nil), m.DroppedFamilies...)
	if m.DroppedNames != nil {
		c.DroppedNames = make(map[uint32]string, len(m.DroppedNames))
		for id, n := range m.DroppedNames {
			c.DroppedNames[id] = n
		}
	}
	if m.ChangeStream != nil {
		cs := *m.ChangeStream
		c.ChangeStream = &cs
	}
	if m.RowPolicy != nil {
		p := *m.RowPolicy
		c.RowPolicy = &p
	}
	return &c
}

const (
	metaKindTable = "table"
	metaKindSeq   = "seq"
)

func tableMetaKey(instance, name string) []byte {
	return storage.MetaKey(metaKindTable, instance+"\x00"+name)
}

func encodeMeta(m *Meta) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("ebbtable: encode table schema: %w", err)
	}
	return b, nil
}

// loadCatalog reads every table schema and the table id sequence.
func loadCatalog(db *storage.DB) (map[string]*Meta, uint64, error) {
	tables := map[string]*Meta{}
	prefix := storage.MetaPrefix(metaKindTable)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return nil, 0, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		var m Meta
		if err := json.Unmarshal(it.Value(), &m); err != nil {
			return nil, 0, fmt.Errorf("ebbtable: decode table schema %q: %w", it.Key(), err)
		}
		tables[catalogKey(m.Instance, m.Name)] = &m
	}
	if err := it.Error(); err != nil {
		return nil, 0, err
	}
	var seq uint64
	v, closer, err := db.Get(storage.MetaKey(metaKindSeq, "table"))
	switch {
	case err == pebble.ErrNotFound:
	case err != nil:
		return nil, 0, err
	default:
		seq = binary.BigEndian.Uint64(v)
		closer.Close()
	}
	// Never hand out a table id whose cells remain: a new table must not
	// show another's cells, even when the catalog lost a table (a MANIFEST
	// cut back to an older version of the database).
	if last, err := lastCellTableID(db); err != nil {
		return nil, 0, err
	} else if last > seq {
		seq = last
	}
	return tables, seq, nil
}

// lastCellTableID is the highest table id with cells in the store (0: none).
func lastCellTableID(db *storage.DB) (uint64, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: storage.TablePrefix(0), UpperBound: storage.PrefixEnd(storage.TablePrefix(0)[:1])})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	var id uint64
	if it.Last() && len(it.Key()) >= 9 {
		id = binary.BigEndian.Uint64(it.Key()[1:9])
	}
	return id, it.Error()
}

func catalogKey(instance, name string) string { return instance + "\x00" + name }
