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

// No filter reads this property today: a GC pass must also find cells past
// their native expiry, which no key-derived property shows (see
// collector/sweep.go), and there is deliberately no property of expiries:
// Pebble's columnar SSTable writer gives block-property collectors no values
// for SET keys, so one computed from the value header would always be empty.
// It is kept so the tables written carry it for passes that skip blocks by
// age once expiries have a key-visible signal.
