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

// TimestampFilter is a block-property filter admitting only the blocks and
// tables that may hold a cell with a timestamp in [lo, hi) (microseconds).
// The collector finds the cells that aged past a max age since its last
// pass with it. It sees point keys only: a point deletion of a cell shares
// the cell's key, so both are skipped or both are read. Expiries are not in
// any property (Pebble's columnar writer gives collectors no values for
// SET keys); cells with one reach the collector through the GC agenda.
func TimestampFilter(lo, hi int64) pebble.BlockPropertyFilter {
	return sstable.NewBlockIntervalFilter(TimestampPropertyName, uint64(max(lo, 0)), uint64(max(hi, 0)), nil)
}
