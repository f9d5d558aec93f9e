package changestream

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// Tag is the first byte of every record key: the change-stream key space.
const Tag byte = 0x03

// keyLen is the length of a record key: tag, table id, commit timestamp,
// tiebreaker, index.
const keyLen = 1 + 8 + 8 + 4 + 4

// Position is a record's place in a table's stream: commit timestamp
// (microseconds), tiebreaker, and index within the transaction. Positions
// order like their keys.
type Position struct {
	Commit     int64
	Tiebreaker int32
	Index      uint32
}

// Less orders positions.
func (p Position) Less(q Position) bool {
	if p.Commit != q.Commit {
		return p.Commit < q.Commit
	}
	if p.Tiebreaker != q.Tiebreaker {
		return uint32(p.Tiebreaker) < uint32(q.Tiebreaker)
	}
	return p.Index < q.Index
}

// Key is the record key of position p in table tableID.
func Key(tableID uint64, p Position) []byte {
	k := make([]byte, 0, keyLen)
	k = append(k, Tag)
	k = binary.BigEndian.AppendUint64(k, tableID)
	k = binary.BigEndian.AppendUint64(k, uint64(p.Commit))
	k = binary.BigEndian.AppendUint32(k, uint32(p.Tiebreaker))
	return binary.BigEndian.AppendUint32(k, p.Index)
}

// DecodeKey takes a record key apart.
func DecodeKey(k []byte) (tableID uint64, p Position, err error) {
	if len(k) != keyLen || k[0] != Tag {
		return 0, p, fmt.Errorf("%w: key %x", ErrCorrupt, k)
	}
	tableID = binary.BigEndian.Uint64(k[1:])
	p.Commit = int64(binary.BigEndian.Uint64(k[9:]))
	p.Tiebreaker = int32(binary.BigEndian.Uint32(k[17:]))
	p.Index = binary.BigEndian.Uint32(k[21:])
	return tableID, p, nil
}

// TableStart is the first key of a table's record span.
func TableStart(tableID uint64) []byte {
	k := []byte{Tag}
	return binary.BigEndian.AppendUint64(k, tableID)
}

// TableEnd is the key just past a table's record span.
func TableEnd(tableID uint64) []byte { return TableStart(tableID + 1) }

// TimeKey is the first key of records committed at or after micros.
func TimeKey(tableID uint64, micros int64) []byte {
	return Key(tableID, Position{Commit: micros})
}

// After is the smallest key greater than p's key: where a reader resuming
// after p starts.
func After(tableID uint64, p Position) []byte {
	return append(Key(tableID, p), 0)
}

// Token encodes a position as a continuation token: "v1." and the commit
// timestamp, tiebreaker and index in decimal, dot-separated.
func (p Position) Token() string {
	return "v1." + strconv.FormatInt(p.Commit, 10) + "." + strconv.FormatInt(int64(p.Tiebreaker), 10) + "." + strconv.FormatUint(uint64(p.Index), 10)
}

// ErrBadToken is returned for a continuation token that does not parse.
var ErrBadToken = fmt.Errorf("ebbtable: bad change-stream continuation token")

// ParseToken reads a token made by Position.Token.
func ParseToken(s string) (Position, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 || parts[0] != "v1" {
		return Position{}, fmt.Errorf("%w: %q", ErrBadToken, s)
	}
	c, err1 := strconv.ParseInt(parts[1], 10, 64)
	t, err2 := strconv.ParseInt(parts[2], 10, 32)
	i, err3 := strconv.ParseUint(parts[3], 10, 32)
	if err1 != nil || err2 != nil || err3 != nil || c < 0 {
		return Position{}, fmt.Errorf("%w: %q", ErrBadToken, s)
	}
	return Position{Commit: c, Tiebreaker: int32(t), Index: uint32(i)}, nil
}
