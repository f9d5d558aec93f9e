package storage

import (
	"encoding/binary"
	"fmt"
)

// A stored cell value starts with a one-byte header of flags; flagExpiry
// means eight bytes of expiry time (microseconds, big-endian) follow;
// flagStamp means a replication stamp follows that: eight bytes of origin
// commit time (microseconds, big-endian), one byte of length and the origin
// cluster's id. The cell's data is the rest.
const (
	flagExpiry byte = 1 << 0
	flagStamp  byte = 1 << 1
	knownFlags      = flagExpiry | flagStamp
)

// Stamp is a cell's replication stamp: when, and on which cluster, the
// write that produced it committed. Between clusters the greater stamp wins
// (commit time, then cluster id). The zero Stamp, on cells written before
// replication began, is older than every other.
type Stamp struct {
	Commit  int64
	Cluster string
}

// Less orders stamps: by commit time, ties broken by cluster id.
func (s Stamp) Less(o Stamp) bool {
	if s.Commit != o.Commit {
		return s.Commit < o.Commit
	}
	return s.Cluster < o.Cluster
}

// IsZero says whether the stamp is unset.
func (s Stamp) IsZero() bool { return s.Commit == 0 && s.Cluster == "" }

// EncodeStamped builds a stored value carrying a replication stamp (a zero
// stamp is left out, as EncodeValue does).
func EncodeStamped(data []byte, expireAt int64, st Stamp) []byte {
	return AppendStamped(make([]byte, 0, StampedLen(len(data), expireAt, st)), data, expireAt, st)
}

// StampedLen is the length of EncodeStamped(data, expireAt, st) for n
// bytes of data.
func StampedLen(n int, expireAt int64, st Stamp) int {
	n++
	if expireAt != 0 {
		n += 8
	}
	if !st.IsZero() {
		n += 9 + min(len(st.Cluster), 255)
	}
	return n
}

// AppendStamped appends EncodeStamped(data, expireAt, st) to dst (so a
// batch can take the value in place, without a copy of its own).
func AppendStamped(dst, data []byte, expireAt int64, st Stamp) []byte {
	var flags byte
	if expireAt != 0 {
		flags |= flagExpiry
	}
	if !st.IsZero() {
		flags |= flagStamp
	}
	dst = append(dst, flags)
	if expireAt != 0 {
		dst = binary.BigEndian.AppendUint64(dst, uint64(expireAt))
	}
	if !st.IsZero() {
		id := st.Cluster[:min(len(st.Cluster), 255)]
		dst = binary.BigEndian.AppendUint64(dst, uint64(st.Commit))
		dst = append(dst, byte(len(id)))
		dst = append(dst, id...)
	}
	return append(dst, data...)
}

// DecodeStamped splits a stored value into data (aliasing v), expiry and
// replication stamp.
func DecodeStamped(v []byte) (data []byte, expireAt int64, st Stamp, err error) {
	if len(v) == 0 || v[0]&^knownFlags != 0 {
		return nil, 0, Stamp{}, fmt.Errorf("%w: value header %x", ErrCorruptKey, v[:min(len(v), 1)])
	}
	flags, rest := v[0], v[1:]
	if flags&flagExpiry != 0 {
		if len(rest) < 8 {
			return nil, 0, Stamp{}, fmt.Errorf("%w: short expiry header", ErrCorruptKey)
		}
		expireAt, rest = int64(binary.BigEndian.Uint64(rest)), rest[8:]
	}
	if flags&flagStamp != 0 {
		if len(rest) < 9 || len(rest) < 9+int(rest[8]) {
			return nil, 0, Stamp{}, fmt.Errorf("%w: short stamp header", ErrCorruptKey)
		}
		st.Commit = int64(binary.BigEndian.Uint64(rest))
		n := int(rest[8])
		st.Cluster, rest = string(rest[9:9+n]), rest[9+n:]
	}
	return rest, expireAt, st, nil
}

// EncodeValue builds a stored value from cell data and an optional expiry
// (0 = none).
func EncodeValue(data []byte, expireAt int64) []byte {
	return EncodeStamped(data, expireAt, Stamp{})
}

// DecodeValue splits a stored value into cell data (aliasing v) and expiry.
func DecodeValue(v []byte) (data []byte, expireAt int64, err error) {
	if len(v) > 0 && v[0] == 0 {
		return v[1:], 0, nil // the common case: no header fields
	}
	if len(v) >= 9 && v[0] == flagExpiry {
		return v[9:], int64(binary.BigEndian.Uint64(v[1:9])), nil
	}
	data, expireAt, _, err = DecodeStamped(v)
	return data, expireAt, err
}

// ValueExpiry reads only the expiry of a stored value (0 = none).
func ValueExpiry(v []byte) int64 {
	if len(v) >= 9 && v[0]&flagExpiry != 0 {
		return int64(binary.BigEndian.Uint64(v[1:9]))
	}
	return 0
}
