package storage

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
)

// TimestampPropertyName names the block property that records the range of
// cell timestamps in each block and table, so an age sweep can skip blocks
// that hold nothing old enough.
const TimestampPropertyName = "ebbtable.ts"

type timestampMapper struct{}

func (timestampMapper) MapPointKey(k sstable.InternalKey, _ []byte) (sstable.BlockInterval, error) {
	u := k.UserKey
	if len(u) < minCellKeyLen || u[0] != tagCell {
		return sstable.BlockInterval{}, nil
	}
	ts := DecodeSuffix(u[len(u)-SuffixLen:])
	if ts < 0 {
		return sstable.BlockInterval{}, nil
	}
	return sstable.BlockInterval{Lower: uint64(ts), Upper: uint64(ts) + 1}, nil
}

func (timestampMapper) MapRangeKeys(sstable.Span) (sstable.BlockInterval, error) {
	return sstable.BlockInterval{}, nil
}

// NewTimestampCollector returns the collector of TimestampPropertyName.
func NewTimestampCollector() pebble.BlockPropertyCollector {
	return sstable.NewBlockIntervalCollector(TimestampPropertyName, timestampMapper{}, nil)
}

// OlderThanFilter returns a filter that lets an iterator skip blocks and
// tables holding no cell with a timestamp below cutoff (microseconds).
// Blocks may still yield keys at or above cutoff; callers check each key.
func OlderThanFilter(cutoff int64) pebble.BlockPropertyFilter {
	if cutoff < 0 {
		cutoff = 0
	}
	return sstable.NewBlockIntervalFilter(TimestampPropertyName, 0, uint64(cutoff), nil)
}

// ExpiryPropertyName names the block property that records the range of
// native cell expiries in each block, so a TTL sweep skips blocks with no
// expiring cell.
const ExpiryPropertyName = "ebbtable.exp"

type expiryMapper struct{}

func (expiryMapper) MapPointKey(k sstable.InternalKey, v []byte) (sstable.BlockInterval, error) {
	if len(k.UserKey) == 0 || k.UserKey[0] != tagCell {
		return sstable.BlockInterval{}, nil // only cell values carry expiries
	}
	exp := ValueExpiry(v)
	if exp <= 0 {
		return sstable.BlockInterval{}, nil
	}
	return sstable.BlockInterval{Lower: uint64(exp), Upper: uint64(exp) + 1}, nil
}

func (expiryMapper) MapRangeKeys(sstable.Span) (sstable.BlockInterval, error) {
	return sstable.BlockInterval{}, nil
}

// NewExpiryCollector returns the collector of ExpiryPropertyName.
func NewExpiryCollector() pebble.BlockPropertyCollector {
	return sstable.NewBlockIntervalCollector(ExpiryPropertyName, expiryMapper{}, nil)
}

// ExpiredByFilter returns a filter that lets an iterator skip blocks holding
// no cell whose expiry is at or before now (microseconds).
func ExpiredByFilter(now int64) pebble.BlockPropertyFilter {
	return sstable.NewBlockIntervalFilter(ExpiryPropertyName, 1, uint64(now)+1, nil)
}
