package storage

import (
	"encoding/binary"
	"fmt"
)

// A stored cell value starts with a one-byte header of flags; flagExpiry
// means eight bytes of expiry time (microseconds, big-endian) follow. The
// cell's data is the rest.
const (
	flagExpiry byte = 1 << 0
	knownFlags      = flagExpiry
)

// EncodeValue builds a stored value from cell data and an optional expiry
// (0 = none).
func EncodeValue(data []byte, expireAt int64) []byte {
	if expireAt == 0 {
		v := make([]byte, 1+len(data))
		copy(v[1:], data)
		return v
	}
	v := make([]byte, 9+len(data))
	v[0] = flagExpiry
	binary.BigEndian.PutUint64(v[1:], uint64(expireAt))
	copy(v[9:], data)
	return v
}

// DecodeValue splits a stored value into cell data (aliasing v) and expiry.
func DecodeValue(v []byte) (data []byte, expireAt int64, err error) {
	if len(v) == 0 || v[0]&^knownFlags != 0 {
		return nil, 0, fmt.Errorf("%w: value header %x", ErrCorruptKey, v[:min(len(v), 1)])
	}
	if v[0]&flagExpiry != 0 {
		if len(v) < 9 {
			return nil, 0, fmt.Errorf("%w: short expiry header", ErrCorruptKey)
		}
		return v[9:], int64(binary.BigEndian.Uint64(v[1:9])), nil
	}
	return v[1:], 0, nil
}

// ValueExpiry reads only the expiry of a stored value (0 = none).
func ValueExpiry(v []byte) int64 {
	if len(v) >= 9 && v[0]&flagExpiry != 0 {
		return int64(binary.BigEndian.Uint64(v[1:9]))
	}
	return 0
}
