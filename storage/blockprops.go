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
//
// No sweep uses it today: a pass must also find cells past their native
// expiry, which no key-derived property shows (see collector/sweep.go).
//
// There is deliberately no property of expiries: Pebble's columnar SSTable
// writer gives block-property collectors no values for SET keys, so one
// computed from the value header would always be empty.
func OlderThanFilter(cutoff int64) pebble.BlockPropertyFilter {
	if cutoff < 0 {
		cutoff = 0
	}
	return sstable.NewBlockIntervalFilter(TimestampPropertyName, 0, uint64(cutoff), nil)
}
