package storage

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
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
	c.ImmediateSuccessor = columnSuccessor // NextPrefix leaves a column (succ.go)
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
	// CacheBytes is the block cache size (for blocks: the memtables'
	// share of Pebble's cache comes on top, see cacheSize); 0 means 64 MiB.
	CacheBytes int64
	// FullMemtable makes the first memtable after the open full size
	// instead of Pebble's 256 KiB ramp (memsize.go). It costs the open one
	// unsynced WAL write of a fifth of the memtable size and a flush; the
	// server sets it, tests that open many databases leave it off.
	FullMemtable bool
	// OnFatal is called once with the first fatal storage error (see
	// fatal.go); it may end the process. Open returns such an error itself
	// when it happens before the database is open.
	OnFatal func(error)
	// MaxSyncDuration: a disk write or sync taking longer is a fatal
	// stall. 0 means DefaultMaxSyncDuration; negative disables the check.
	MaxSyncDuration time.Duration
	// WALMinSyncInterval, when set, is asked after each WAL sync how long
	// the next must wait (Pebble's Options.WALMinSyncInterval): commits
	// arriving meanwhile share that next sync. nil: no wait.
	WALMinSyncInterval func() time.Duration
	// Ballast sizes the emergency ballast (space.go); zero: none.
	Ballast Ballast
	// Shared, when set, keeps the lower levels' SSTables (L5 and L6) in a
	// shared object store (shared.go); nil: everything on the local disk,
	// as always.
	Shared *SharedOptions

	// growWAL (benchmarks only) leaves new WAL files to grow with each
	// write, without the zeros written ahead (walzero.go).
	growWAL bool
}

// DB is ebbtable's Pebble database.
type DB struct {
	*pebble.DB
	dir  string
	opts *pebble.Options // as opened, with Pebble's defaults filled in

	fail *failer

	pacer      *pacer
	paceMu     sync.Mutex  // one paced compaction at a time
	backlogged func() bool // nil: writesBacklogged asks Pebble

	closeHealth func() error // stops the disk-health checker; nil: none

	dels *deletions // Pebble's file deletions (settle.go)
}

// Open opens (creating if needed) the database in opts.Dir.
func Open(opts Options) (*DB, error) {
	if opts.Dir == "" {
		return nil, errors.New("ebbtable: storage: data directory is required")
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = 64 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxSyncDuration == 0 {
		opts.MaxSyncDuration = DefaultMaxSyncDuration
	}
	if opts.Shared != nil {
		if err := opts.Shared.validate(); err != nil {
			return nil, err
		}
	}
	fs := opts.FS
	if fs == nil {
		fs = vfs.Default
	}
	if err := checkDir(fs, opts.Dir); err != nil {
		return nil, err
	}
	if err := checkSpace(fs, opts.Dir, opts.Ballast, opts.Logger); err != nil {
		return nil, err
	}
	removeTempSSTs(fs, opts.Dir)
	// Errors before Open returns are Open's to report; after, OnFatal's.
	var opened atomic.Bool
	fail := newFailer(func(err error) {
		if opened.Load() && opts.OnFatal != nil {
			opts.OnFatal(err)
		}
	}, opts.Logger)
	events := listenerFor(fail, opts.MaxSyncDuration)
	dels := newDeletions()
	dels.listen(&events)
	var closeHealth func() error
	if opts.MaxSyncDuration > 0 {
		// Every write and sync is watched; one still running past the
		// limit is a stall (reported repeatedly while it lasts, so the
		// listener sees it cross the limit). Pacing sleeps happen above
		// this layer, so they never count.
		var c io.Closer
		fs, c = vfs.WithDiskHealthChecks(fs, min(5*time.Second, opts.MaxSyncDuration/2), nil, events.DiskSlow)
		closeHealth = c.Close
	}
	pc := &pacer{}
	walFS := vfs.FS(zeroAheadFS{fs})
	if opts.growWAL {
		walFS = fs
	}
	cache := pebble.NewCache(cacheSize(opts.CacheBytes))
	defer cache.Unref()
	po := &pebble.Options{
		Comparer:           Comparer,
		Cache:              cache,
		FS:                 pacedFS{walFS, pc},
		FormatMajorVersion: pebble.FormatNewest,
		BlockPropertyCollectors: []func() pebble.BlockPropertyCollector{
			NewTimestampCollector,
		},
		Logger:        logger{fail},
		EventListener: &events,
		// Obsolete WALs are deleted, not kept for reuse (cleaner.go).
		Cleaner: deleteCleaner{},
		// Larger memtables mean fewer flushes and L0 files for write-heavy
		// loads; the WAL keeps them durable.
		MemTableSize:                memTableSize,
		MemTableStopWritesThreshold: 4,
		WALMinSyncInterval:          opts.WALMinSyncInterval,
	}
	// A row read returns every version of its columns, and the collector
	// reads every version's expiry: values stay inline with their keys
	// rather than moving older versions into separate value blocks (Pebble's
	// default for MVCC data, where readers want only the newest version).
	po.Experimental.SpanPolicyFunc = func([]byte) (pebble.SpanPolicy, []byte, error) {
		return pebble.SpanPolicy{DisableValueSeparationBySuffix: true, ValueStoragePolicy: pebble.ValueStorageLowReadLatency}, nil, nil
	}
	if sh := opts.Shared; sh != nil {
		loc := remote.Locator(sh.Locator)
		po.Experimental.RemoteStorage = remote.MakeSimpleFactory(map[remote.Locator]remote.Storage{loc: remoteStorage(sh.Store)})
		po.Experimental.CreateOnShared = remote.CreateOnSharedLower
		po.Experimental.CreateOnSharedLocator = loc
		switch {
		case sh.SecondaryCacheBytes == 0:
			po.Experimental.SecondaryCacheSizeBytes = DefaultSecondaryCacheBytes
		case sh.SecondaryCacheBytes > 0:
			po.Experimental.SecondaryCacheSizeBytes = sh.SecondaryCacheBytes
		}
	}
	if opts.FS == nil {
		// Damage Pebble would step over silently (see CheckOnOpen).
		notes, err := CheckOnOpen(opts.Dir)
		for _, n := range notes {
			opts.Logger.Warn("data directory: " + n)
		}
		if err != nil {
			if closeHealth != nil {
				closeHealth()
			}
			return nil, err
		}
	}
	db, err := openPebble(opts.Dir, po, fail)
	if err != nil {
		if closeHealth != nil {
			closeHealth()
		}
		return nil, openError(opts.Dir, err)
	}
	if sh := opts.Shared; sh != nil {
		// Before any compaction can write to L5 or L6: SSTables written
		// there without a creator id would stay local, and a span holding
		// them could not move by reference.
		if err := setCreatorID(db, sh.CreatorID); err != nil {
			db.Close()
			if closeHealth != nil {
				closeHealth()
			}
			return nil, fmt.Errorf("ebbtable: storage: shared storage creator id %d: %w", sh.CreatorID, err)
		}
	}
	if opts.FullMemtable {
		if err := skipMemtableRamp(db, fs, opts.Dir, uint64(po.MemTableSize)); err != nil {
			db.Close()
			if closeHealth != nil {
				closeHealth()
			}
			return nil, fmt.Errorf("ebbtable: storage: first memtable: %w", err)
		}
	}
	opened.Store(true)
	if err := fail.Err(); err != nil { // failed between Open's return and now
		opts.OnFatal(err)
	}
	full := po.Clone()
	full.EnsureDefaults()
	return &DB{DB: db, dir: opts.Dir, opts: full, pacer: pc, fail: fail, closeHealth: closeHealth, dels: dels}, nil
}

// memTableSize is Pebble's memtable size (MemTableSize).
const memTableSize = 64 << 20

// cacheSize is the size Pebble's cache is made for a block cache of
// blockBytes. Pebble charges every live memtable's full size to its block
// cache (Cache.Reserve, for as long as the memtable lives), so a cache of
// blockBytes alone held no block at all once one full-size memtable was
// open: a 64 MiB cache beside the 64 MiB first memtable (FullMemtable)
// refused every block, and every read of an SSTable read and decompressed
// its index and data blocks from the file (issue 16's hot rows: the server
// CPU per operation rose by half once the first memtable was flushed). The
// cache is made two memtables larger: the mutable one and one being
// flushed, so blockBytes stay for blocks while a flush runs.
func cacheSize(blockBytes int64) int64 { return blockBytes + 2*memTableSize }

// openPebble opens the database, unless a fatal error (a flush of the
// replayed WAL failing on a full disk, say) comes first: Pebble would retry
// that forever, so Open gives up at once and returns it. The abandoned open
// goes on in the background; the process is expected to exit.
func openPebble(dir string, po *pebble.Options, fail *failer) (*pebble.DB, error) {
	type result struct {
		db  *pebble.DB
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				fp, ok := p.(FatalPanic)
				if !ok {
					panic(p)
				}
				done <- result{err: fp.Err}
			}
		}()
		db, err := pebble.Open(dir, po)
		done <- result{db, err}
	}()
	select {
	case r := <-done:
		return r.db, r.err
	case <-fail.notify:
		return nil, fail.Err()
	}
}

// checkDir refuses a data directory that is not empty and holds no Pebble
// database (someone's files, or a mistyped path): ebbtable would otherwise
// create its database among them.
func checkDir(fs vfs.FS, dir string) error {
	names, err := fs.List(dir)
	if err != nil {
		return nil // missing: Pebble creates it
	}
	foreign := ""
	for _, n := range names {
		switch {
		case n == "CURRENT" || strings.HasPrefix(n, "MANIFEST-") || strings.HasPrefix(n, "marker."):
			return nil // a Pebble database
		case n == BallastName || n == BallastName+".tmp" || n == "backups" || n == "LOCK" || strings.HasPrefix(n, "OPTIONS-") ||
			strings.HasSuffix(n, ".log") || strings.HasSuffix(n, ".sst") || strings.HasPrefix(n, ".") ||
			strings.HasPrefix(n, "REMOTE-OBJ-CATALOG-") || strings.HasPrefix(n, "SHARED-CACHE-") || strings.HasSuffix(n, tempSSTSuffix):
		default:
			if foreign == "" {
				foreign = n
			}
		}
	}
	if foreign != "" {
		return fmt.Errorf("ebbtable: %s is not an ebbtable data directory: it holds other files (%s) and no database; give an empty or new directory", dir, foreign)
	}
	return nil
}

// openError turns Pebble's open errors into messages that say what is wrong
// and what the operator can do.
func openError(dir string, err error) error {
	switch {
	case errors.Is(err, syscall.EAGAIN):
		return fmt.Errorf("ebbtable: data directory %s is in use by another process: %w", dir, err)
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("ebbtable: %w: cannot open %s: %w. Delete %s if it is there to get room, free space or grow the disk, then start again",
			ErrDiskFull, dir, err, filepath.Join(dir, BallastName))
	case pebble.IsCorruptionError(err):
		return fmt.Errorf("ebbtable: the database in %s is damaged: %w. Run 'ebbtable verify --data %s' to see which files; restore from a backup, or move the directory aside and start afresh", dir, err, dir)
	case strings.Contains(err.Error(), "comparer name"):
		return fmt.Errorf("ebbtable: %s holds a database of another format (%w); ebbtable opens only its own", dir, err)
	}
	return fmt.Errorf("ebbtable: open storage in %s: %w", dir, err)
}

// DiskSpaceUsage is the database's disk usage: SSTables, WAL files (the
// recycled ones too), MANIFEST and obsolete files not yet deleted.
func (d *DB) DiskSpaceUsage() uint64 { return d.Metrics().DiskSpaceUsage() }

// Err returns the fatal storage error the database met, or nil.
func (d *DB) Err() error { return d.fail.Err() }

// Fail reports err as a fatal storage error (the engine calls it when a
// WAL sync fails) and returns the wrapped error.
func (d *DB) Fail(err error) error { return d.fail.fail(err) }

// Failed returns a channel closed once the database has a fatal error.
func (d *DB) Failed() <-chan struct{} { return d.fail.notify }

// Close closes the database and its disk-health checker.
func (d *DB) Close() error {
	err := d.DB.Close()
	if d.closeHealth != nil {
		d.closeHealth()
	}
	return err
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

// setCreatorID sets the database's creator id, refusing a change: Pebble
// reports one as an assertion failure, which builds with invariants on
// (race tests) raise as a panic.
func setCreatorID(db *pebble.DB, id uint64) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	return db.SetCreatorID(id)
}

// removeTempSSTs deletes the files WriteTempSST left behind when the
// process ended before the ingest that wanted them.
func removeTempSSTs(fs vfs.FS, dir string) {
	names, err := fs.List(dir)
	if err != nil {
		return
	}
	for _, n := range names {
		if strings.HasPrefix(n, tempSSTPrefix) && strings.HasSuffix(n, tempSSTSuffix) {
			fs.Remove(fs.PathJoin(dir, n))
		}
	}
}

const tempSSTPrefix, tempSSTSuffix = "span-", ".sst.tmp"

// Shared reports whether the database keeps its lower levels in a shared
// object store.
func (d *DB) Shared() bool { return d.opts.Experimental.RemoteStorage != nil }

// WriteTempSST writes an SSTable's bytes to a file in the data directory,
// on the database's filesystem, for Ingest: remove deletes it (the ingest
// has linked or copied it by then).
func (d *DB) WriteTempSST(data []byte) (path string, remove func(), err error) {
	fs := d.opts.FS
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", nil, err
	}
	path = fs.PathJoin(d.dir, fmt.Sprintf("%s%x%s", tempSSTPrefix, rnd, tempSSTSuffix))
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return "", nil, err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		fs.Remove(path)
		return "", nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		fs.Remove(path)
		return "", nil, err
	}
	if err := f.Close(); err != nil {
		fs.Remove(path)
		return "", nil, err
	}
	return path, func() { fs.Remove(path) }, nil
}
