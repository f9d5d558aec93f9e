package storage

import (
	"context"

	"github.com/cockroachdb/pebble/v2"
)

// Excise removes every key in span from the database in one atomic,
// durable step (a tablet leaving this node). It replaces Pebble's
// DB.Excise, which gives what remains of a shared SSTable "loose" bounds
// without reading it: the remains to the right of the span then start at
// span.End with sequence number 0, after any range deletion that crosses
// span.End (same user key, higher sequence number), and Pebble's table
// statistics loader, which asserts range-deletion bounds in every build,
// panics on such a table in the background (TestExciseThroughShared-
// RangeDeletion). An IngestAndExcise with nothing to ingest opens every
// SSTable it cuts, shared ones too, and gives tight bounds: one read of the
// cut tables' index and edge blocks, through the secondary cache.
func (d *DB) Excise(ctx context.Context, span pebble.KeyRange) error {
	_, err := d.DB.IngestAndExcise(ctx, nil, nil, nil, span)
	return err
}
