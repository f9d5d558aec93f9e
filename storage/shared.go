package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Shared storage (docs/scale-out.md, "Storage: shared SSTables and span
// moves"). With Options.Shared set, the database keeps the SSTables of its
// lower levels (L5 and L6, where nearly all data of a settled database
// lives) in an object store every node of a cluster reaches: a bucket of an
// S3-compatible service, or a directory all nodes mount. The WAL, the
// MANIFEST and L0–L4 stay on the local disk. A span of keys can then move
// between databases by reference (table.Engine.ExportSpan / IngestSpan):
// the lower levels' SSTables are attached, not copied.
//
// Each database writes its objects under its own creator id; a shared
// object is deleted once no database references it (Pebble keeps one
// reference marker object per referencing database).

// ObjectStore is shared object storage for SSTables: Pebble's remote storage
// interface in ebbtable's own types, so that the packages implementing it
// (package objstore's S3 adapter) need not import Pebble.
type ObjectStore interface {
	io.Closer
	// ReadObject opens an object for ranged reads and returns its size.
	ReadObject(ctx context.Context, name string) (ObjectReader, int64, error)
	// CreateObject returns a writer for a new object (replacing any object
	// of that name); the object exists, whole, once Close returns nil.
	CreateObject(name string) (io.WriteCloser, error)
	// List lists the object names under prefix, with the prefix trimmed;
	// with a delimiter, names sharing the part up to it are listed once,
	// as that part. The order is unspecified.
	List(prefix, delimiter string) ([]string, error)
	// Delete removes an object.
	Delete(name string) error
	// Size returns an object's length.
	Size(name string) (int64, error)
	// IsNotExistError says whether err (from a method above) means the
	// object does not exist.
	IsNotExistError(err error) bool
}

// ObjectReader reads ranges of one object.
type ObjectReader interface {
	// ReadAt fills p from offset off; a read past the object's end is an
	// error (no partial results). Safe for concurrent use.
	ReadAt(ctx context.Context, p []byte, off int64) error
	Close() error
}

// SharedOptions turns shared storage on (Options.Shared).
type SharedOptions struct {
	// Store holds the shared SSTables. Required. The database does not
	// close it.
	Store ObjectStore
	// Locator names the store in the database's MANIFEST and shared-object
	// catalog; every node of a cluster must give the same store the same
	// locator (a URL without secrets, say). Empty is allowed.
	Locator string
	// CreatorID identifies this database among those sharing the store:
	// unique per node, never zero, and never changed once set (Pebble
	// records it and refuses another).
	CreatorID uint64
	// SecondaryCacheBytes sizes the local-disk cache of shared objects'
	// blocks (reads from the shared store are slow); 0 means
	// DefaultSecondaryCacheBytes, negative disables the cache.
	SecondaryCacheBytes int64
}

// DefaultSecondaryCacheBytes is the local cache of shared blocks when
// SharedOptions.SecondaryCacheBytes is 0.
const DefaultSecondaryCacheBytes = 256 << 20

func (s *SharedOptions) validate() error {
	if s.Store == nil {
		return errors.New("ebbtable: storage: shared storage needs an object store")
	}
	if s.CreatorID == 0 {
		return errors.New("ebbtable: storage: shared storage needs a non-zero creator id (unique per node)")
	}
	return nil
}

// SharedDir is an object store in a directory (created if missing) that
// every node sharing it mounts: the file:// form of --shared-storage.
func SharedDir(dir string) (ObjectStore, error) {
	if dir == "" {
		return nil, errors.New("ebbtable: shared directory: a path is required")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("ebbtable: shared directory %s: %w", dir, err)
	}
	return fromRemote{remote.NewLocalFS(dir, vfs.Default)}, nil
}

// fromRemote presents a Pebble remote.Storage as an ObjectStore.
type fromRemote struct{ remote.Storage }

func (f fromRemote) ReadObject(ctx context.Context, name string) (ObjectReader, int64, error) {
	r, n, err := f.Storage.ReadObject(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	return r, n, nil
}

// toRemote presents an ObjectStore to Pebble.
type toRemote struct{ ObjectStore }

func (t toRemote) ReadObject(ctx context.Context, name string) (remote.ObjectReader, int64, error) {
	r, n, err := t.ObjectStore.ReadObject(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	return r, n, nil
}

// Close leaves the store open: its owner closes it.
func (t toRemote) Close() error { return nil }

func remoteStorage(s ObjectStore) remote.Storage {
	if f, ok := s.(fromRemote); ok {
		return noClose{f.Storage}
	}
	return toRemote{s}
}

type noClose struct{ remote.Storage }

func (noClose) Close() error { return nil }
