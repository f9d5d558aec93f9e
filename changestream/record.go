package changestream

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Type says who caused a change, as the Bigtable API's DataChange.Type.
type Type uint8

// The record types.
const (
	User              Type = 1
	GarbageCollection Type = 2
)

// String names the type as the Bigtable API does.
func (t Type) String() string {
	switch t {
	case User:
		return "USER"
	case GarbageCollection:
		return "GARBAGE_COLLECTION"
	}
	return "TYPE_UNSPECIFIED"
}

// Reasons a change was made. A record carries exactly one.
const (
	ReasonUser              = "user"                // a client's write or delete
	ReasonDropRowRange      = "drop-row-range"      // DropRowRange (by prefix or all rows)
	ReasonGCAge             = "gc-age"              // a family's max-age rule
	ReasonGCVersions        = "gc-versions"         // a family's max-versions rule
	ReasonCellTTL           = "cell-ttl"            // a native cell expiry
	ReasonDropped           = "dropped"             // the cell's family was dropped
	ReasonRowDeletionPolicy = "row-deletion-policy" // a table's row deletion policy
)

// Transaction tags of system transactions.
const (
	// TagGarbageCollection marks collector deletions.
	TagGarbageCollection = "GarbageCollection"
	// TagRowDeletionPolicy marks row-deletion-policy deletions.
	TagRowDeletionPolicy = "RowDeletionPolicy"
	// TagDropRowRange marks DropRowRange deletions (a user's admin call).
	TagDropRowRange = "DropRowRange"
)

// ModKind is the kind of one mod, as the Bigtable Mutation kinds.
type ModKind uint8

// The mod kinds.
const (
	SetCell          ModKind = 1
	DeleteFromColumn ModKind = 2
	DeleteFromFamily ModKind = 3
	DeleteFromRow    ModKind = 4
)

// String names the kind as the JSON encoding spells it.
func (k ModKind) String() string {
	switch k {
	case SetCell:
		return "set_cell"
	case DeleteFromColumn:
		return "delete_from_column"
	case DeleteFromFamily:
		return "delete_from_family"
	case DeleteFromRow:
		return "delete_from_row"
	}
	return "unknown"
}

// Mod is one change to a row, as it was applied (server timestamps
// resolved, aggregate inputs combined into the value written).
type Mod struct {
	Kind      ModKind
	Family    string
	Qualifier []byte
	// Timestamp of SetCell, microseconds.
	Timestamp int64
	Value     []byte
	// StartTS and EndTS bound DeleteFromColumn to [StartTS, EndTS); EndTS 0
	// means no upper bound.
	StartTS, EndTS int64
	// ExpireAt is a SetCell's native cell expiry, microseconds (0 = none).
	ExpireAt int64
}

// Record is one recorded change to one row: one transaction's effect on it.
type Record struct {
	// Position is where the record sits in commit order; set when read.
	Position
	Type           Type
	Reason         string
	TransactionTag string
	IsSystem       bool
	SourceCluster  string
	RowKey         []byte
	Mods           []Mod
}

// ErrCorrupt is returned when a stored record or key does not decode.
var ErrCorrupt = errors.New("ebbtable: corrupt change-stream record")

// encodingVersion is the first byte of every encoded record.
const encodingVersion = 1

// Record flags: a system transaction; mods carry an expiry each (records
// written before expiries were recorded lack the field).
const (
	flagSystem   byte = 1 << 0
	flagExpiries byte = 1 << 1
)

// Encode writes a record's value (everything but its position, which the key
// holds): version, type, flags, then length-prefixed strings and the mods.
func (r *Record) Encode() []byte {
	n := 16 + len(r.Reason) + len(r.TransactionTag) + len(r.SourceCluster) + len(r.RowKey)
	for _, m := range r.Mods {
		n += 40 + len(m.Family) + len(m.Qualifier) + len(m.Value)
	}
	b := make([]byte, 0, n)
	var flags byte
	if r.IsSystem {
		flags |= flagSystem
	}
	for _, m := range r.Mods {
		if m.ExpireAt != 0 {
			flags |= flagExpiries
		}
	}
	b = append(b, encodingVersion, byte(r.Type), flags)
	b = appendBytes(b, []byte(r.Reason))
	b = appendBytes(b, []byte(r.TransactionTag))
	b = appendBytes(b, []byte(r.SourceCluster))
	b = appendBytes(b, r.RowKey)
	b = binary.AppendUvarint(b, uint64(len(r.Mods)))
	for _, m := range r.Mods {
		b = append(b, byte(m.Kind))
		b = appendBytes(b, []byte(m.Family))
		b = appendBytes(b, m.Qualifier)
		b = binary.AppendVarint(b, m.Timestamp)
		b = appendBytes(b, m.Value)
		b = binary.AppendVarint(b, m.StartTS)
		b = binary.AppendVarint(b, m.EndTS)
		if flags&flagExpiries != 0 {
			b = binary.AppendVarint(b, m.ExpireAt)
		}
	}
	return b
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads an encoded record; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = ErrCorrupt
	}
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	out := make([]byte, n)
	copy(out, d.b[:n])
	d.b = d.b[n:]
	return out
}

// Decode reads a record's value written by Encode. The position is left
// for the caller to fill from the key.
func Decode(v []byte) (Record, error) {
	d := &decoder{b: v}
	var r Record
	if ver := d.byte(); d.err == nil && ver != encodingVersion {
		return r, fmt.Errorf("%w: unknown encoding version %d", ErrCorrupt, ver)
	}
	r.Type = Type(d.byte())
	flags := d.byte()
	r.IsSystem = flags&flagSystem != 0
	r.Reason = string(d.bytes())
	r.TransactionTag = string(d.bytes())
	r.SourceCluster = string(d.bytes())
	r.RowKey = d.bytes()
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail()
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		var m Mod
		m.Kind = ModKind(d.byte())
		m.Family = string(d.bytes())
		m.Qualifier = d.bytes()
		m.Timestamp = d.varint()
		m.Value = d.bytes()
		m.StartTS = d.varint()
		m.EndTS = d.varint()
		if flags&flagExpiries != 0 {
			m.ExpireAt = d.varint()
		}
		r.Mods = append(r.Mods, m)
	}
	if d.err == nil && (len(d.b) != 0 || flags&^(flagSystem|flagExpiries) != 0) {
		d.fail()
	}
	if d.err != nil {
		return Record{}, d.err
	}
	return r, nil
}
