package storage

import "github.com/cockroachdb/pebble/v2"

// CommitSynced commits a batch of db.NewBatch and returns once the WAL
// holding it is synced (pebble.Sync): raw Pebble's durable write, for code
// outside storage and table that measures it (ebbbench's raw-Pebble
// targets) without importing Pebble.
func CommitSynced(b *pebble.Batch) error { return b.Commit(pebble.Sync) }
