package storage

import "github.com/cockroachdb/pebble/v2"

// Obsolete WAL files are deleted, not recycled.
//
// Pebble keeps up to MemTableStopWritesThreshold+1 (five here) obsolete WAL
// files to write the next WALs over, whatever their size: each stays on
// disk at its full size until it is reused, and a reused file never
// shrinks. With memtables of up to 64 MiB that is up to 320 MiB of the data
// directory holding nothing, which no compaction or GC pass gives back.
// Seen with an early flush of the small memtables Pebble starts with after
// an open (tried in perf8, kept apart): `gc run` of 30 MiB of deleted cells
// freed nothing, the directory keeping 54 of 55 MiB in recycled WALs.
//
// Pebble recycles unless its Cleaner needs the files' contents (the archive
// cleaner, which keeps them). deleteCleaner says it does, through the marker
// method of an ArchiveCleaner embedded one level down, and deletes them with
// the DeleteCleaner's Clean, embedded one level up (the shallower method
// wins; the marker is only there).
type deleteCleaner struct {
	pebble.DeleteCleaner
	archiveMarker
}

// archiveMarker carries ArchiveCleaner's marker method to deleteCleaner.
type archiveMarker struct{ pebble.ArchiveCleaner }
