package storage

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Comparer orders keys bytewise and splits a cell key into its column prefix
// and its timestamp suffix, so that Pebble keeps versions of a column together
// (newest first) and block-property filters can see timestamps.
var Comparer = func() *pebble.Comparer {
	c := *pebble.DefaultComparer
	c.Name = "ebbtable.cells.v1"
	c.Split = splitCellKey
	c.Compare = bytes.Compare
	c.ComparePointSuffixes = bytes.Compare
	c.CompareRangeSuffixes = bytes.Compare
	// Keep keys whole in index blocks: shortened separators could cut a
	// key inside its suffix, which Split would then misread.
	c.Separator = func(dst, a, b []byte) []byte { return append(dst, a...) }
	c.Successor = func(dst, a []byte) []byte { return append(dst, a...) }
	c.AbbreviatedKey = pebble.DefaultComparer.AbbreviatedKey
	return &c
}()

// Options configures Open.
type Options struct {
	// Dir is the data directory. Required unless FS is an in-memory FS.
	Dir string
	// FS is the filesystem; nil means the OS filesystem.
	FS vfs.FS
	// Logger receives Pebble's events; nil means slog.Default().
	Logger *slog.Logger
	// CacheBytes is the block cache size; 0 means 64 MiB.
	CacheBytes int64
}

// DB is ebbtable's Pebble database.
type DB struct {
	*pebble.DB
	dir  string
	opts *pebble.Options // as opened, with Pebble's defaults filled in

	pacer      *pacer
	paceMu     sync.Mutex  // one paced compaction at a time
	backlogged func() bool // nil: writesBacklogged asks Pebble
}

// Open opens (creating if needed) the database in opts.Dir.
func Open(opts Options) (*DB, error) {
	if opts.Dir == "" {
		return nil, errors.New("ebbtable: storage: data directory is required")
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = 64 << 20
	}
	fs := opts.FS
	if fs == nil {
		fs = vfs.Default
	}
	pc := &pacer{}
	cache := pebble.NewCache(opts.CacheBytes)
	defer cache.Unref()
	po := &pebble.Options{
		Comparer:           Comparer,
		Cache:              cache,
		FS:                 pacedFS{fs, pc},
		FormatMajorVersion: pebble.FormatNewest,
		BlockPropertyCollectors: []func() pebble.BlockPropertyCollector{
			NewTimestampCollector,
			NewExpiryCollector,
		},
		Logger: quietLogger{},
		// Larger memtables mean fewer flushes and L0 files for write-heavy
		// loads; the WAL keeps them durable.
		MemTableSize:                64 << 20,
		MemTableStopWritesThreshold: 4,
	}
	// A row read returns every version of its columns, and the collector
	// reads every version's expiry: values stay inline with their keys
	// rather than moving older versions into separate value blocks (Pebble's
	// default for MVCC data, where readers want only the newest version).
	po.Experimental.SpanPolicyFunc = func([]byte) (pebble.SpanPolicy, []byte, error) {
		return pebble.SpanPolicy{DisableValueSeparationBySuffix: true, ValueStoragePolicy: pebble.ValueStorageLowReadLatency}, nil, nil
	}
	if opts.FS == nil {
		if err := CheckOnOpen(opts.Dir); err != nil {
			return nil, err
		}
	}
	db, err := pebble.Open(opts.Dir, po)
	if err != nil && errors.Is(err, syscall.EAGAIN) {
		return nil, fmt.Errorf("ebbtable: data directory %s is in use by another process: %w", opts.Dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("ebbtable: open storage in %s: %w", opts.Dir, err)
	}
	full := po.Clone()
	full.EnsureDefaults()
	return &DB{DB: db, dir: opts.Dir, opts: full, pacer: pc}, nil
}

// SSTWriterOptions are the options for writing SSTables this database can
// ingest: its comparer, block-property collectors and newest table format.
func (d *DB) SSTWriterOptions() sstable.WriterOptions {
	return d.opts.MakeWriterOptions(0, d.FormatMajorVersion().MaxTableFormat())
}

// NewSSTIter iterates over SSTables written with SSTWriterOptions (not
// ingested), given in key order and not overlapping.
func (d *DB) NewSSTIter(files []sstable.ReadableFile, o *pebble.IterOptions) (*pebble.Iterator, error) {
	return pebble.NewExternalIter(d.opts, o, [][]sstable.ReadableFile{files})
}

// Dir returns the data directory.
func (d *DB) Dir() string { return d.dir }

// quietLogger drops Pebble's informational chatter and keeps fatal errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{})      {}
func (quietLogger) Errorf(f string, a ...interface{}) { slog.Error(fmt.Sprintf("pebble: "+f, a...)) }
func (quietLogger) Fatalf(f string, a ...interface{}) {
	panic(fmt.Sprintf("pebble: "+f, a...))
}
