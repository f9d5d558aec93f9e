package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Fail-stop. A storage error that leaves the database's state unknown — a
// WAL write or sync that failed, a disk that stalls longer than the
// configured maximum, corruption met by a flush or compaction, a MANIFEST
// that cannot be written — is fatal: the DB reports it once through
// Options.OnFatal and every later call should fail. This is what etcd and
// CockroachDB do: after a failed fsync the kernel may have dropped the dirty
// pages, so retrying could acknowledge a write that is not on disk.

// ErrFatal marks the error a fatal storage failure is reported with.
var ErrFatal = errors.New("fatal storage error")

// DefaultMaxSyncDuration is how long one disk write or sync may take before
// it counts as a stall.
const DefaultMaxSyncDuration = 20 * time.Second

// FatalPanic is the value the DB panics with when Pebble reports, through
// its logger, an error it cannot continue after (Pebble expects its
// logger's Fatalf not to return). The engine recovers it in its commit path
// and turns it into an error; anywhere else it ends the process.
type FatalPanic struct{ Err error }

func (p FatalPanic) Error() string { return p.Err.Error() }

// failer holds the first fatal error and reports it once.
type failer struct {
	once   sync.Once
	mu     sync.Mutex
	err    error
	notify chan struct{} // closed when err is set
	onFail func(error)
	log    *slog.Logger
}

func newFailer(onFail func(error), log *slog.Logger) *failer {
	return &failer{notify: make(chan struct{}), onFail: onFail, log: log}
}

// fail records err (wrapped in ErrFatal) as the DB's fatal error, the first
// time only, and calls the callback.
func (f *failer) fail(err error) error {
	f.once.Do(func() {
		e := fmt.Errorf("%w: %w", ErrFatal, err)
		f.mu.Lock()
		f.err = e
		f.mu.Unlock()
		close(f.notify)
		if f.onFail != nil {
			f.onFail(e)
		}
	})
	return f.Err()
}

// Err returns the fatal error, or nil.
func (f *failer) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// ioError says whether err is one the operating system returns when the
// disk cannot take writes (no space, I/O error, read-only filesystem, quota):
// a background flush or compaction that fails so will not succeed by
// retrying, and the writes behind it would stall until clients time out.
// Other background errors (a compaction's read that failed once) are
// retried by Pebble and only logged.
func ioError(err error) bool {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case syscall.ENOSPC, syscall.EIO, syscall.EROFS, syscall.EDQUOT:
		return true
	}
	return false
}

// listener is the Pebble event listener that turns background failures into
// fatal errors.
func listenerFor(f *failer, maxSync time.Duration) pebble.EventListener {
	return pebble.EventListener{
		BackgroundError: func(err error) {
			switch {
			case pebble.IsCorruptionError(err):
				f.fail(fmt.Errorf("corruption met in the background: %w", err))
			case ioError(err):
				f.fail(fmt.Errorf("background write failed: %w", err))
			default:
				f.log.Warn("pebble background error", "err", err)
			}
		},
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			// Foreground reads get the error (and answer DataLoss);
			// background work meeting it arrives in BackgroundError.
			f.log.Error("on-disk corruption", "file", info.Path, "err", info.Details)
		},
		DiskSlow: func(info vfs.DiskSlowInfo) {
			if maxSync > 0 && info.Duration >= maxSync {
				f.fail(fmt.Errorf("disk stalled: %s on %s has not finished after %s (the limit is --max-sync-duration %s)",
					info.OpType, info.Path, info.Duration.Round(100*time.Millisecond), maxSync))
				return
			}
			f.log.Warn("disk slow", "op", info.OpType.String(), "file", info.Path, "for", info.Duration.Round(100*time.Millisecond))
		},
	}
}

// logger routes Pebble's log to slog: informational chatter is dropped,
// errors are logged, and Fatalf makes the DB fail and panics with
// FatalPanic so Pebble's caller never carries on.
type logger struct{ f *failer }

func (logger) Infof(string, ...interface{}) {}
func (l logger) Errorf(format string, a ...interface{}) {
	l.f.log.Error(fmt.Sprintf("pebble: "+format, a...))
}
func (l logger) Fatalf(format string, a ...interface{}) {
	err := l.f.fail(fmt.Errorf("pebble: "+format, a...))
	panic(FatalPanic{err})
}
