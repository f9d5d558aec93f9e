// Package backup owns table backups: consistent images of one table at one
// version time, written as SSTables plus a manifest under the data
// directory, restored into new tables, and deleted when they expire.
package backup
