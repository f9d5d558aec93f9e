package storage

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// What a compaction or flush gives back reaches the disk only when Pebble
// deletes the files it made obsolete — the flushed memtables' WALs, the
// compactions' inputs — which its cleaner does in the background, after the
// compaction has returned. A table still read by an open iterator (a
// zombie) is deleted only once that read ends. So space freed is measured
// on the directory once the deletions are done (Settle), and what is still
// waiting is reported as such.

// deletions wakes waiters in Settle whenever Pebble deleted a file.
type deletions struct {
	mu sync.Mutex
	ch chan struct{} // closed and replaced on each deletion
}

func newDeletions() *deletions { return &deletions{ch: make(chan struct{})} }

func (d *deletions) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}

func (d *deletions) deleted() {
	d.mu.Lock()
	close(d.ch)
	d.ch = make(chan struct{})
	d.mu.Unlock()
}

// listen makes l report deletions to d.
func (d *deletions) listen(l *pebble.EventListener) {
	l.TableDeleted = func(pebble.TableDeleteInfo) { d.deleted() }
	l.WALDeleted = func(pebble.WALDeleteInfo) { d.deleted() }
	l.BlobFileDeleted = func(pebble.BlobFileDeleteInfo) { d.deleted() }
}

// Settled is the data directory after Settle.
type Settled struct {
	// DirBytes is the size of the files in the data directory (the
	// ballast aside).
	DirBytes uint64
	// Deleting is the bytes of files Pebble has made obsolete and not yet
	// deleted when Settle gave up waiting.
	Deleting uint64
	// Zombie is the bytes of obsolete tables still read by open iterators:
	// deleted when those reads end.
	Zombie uint64
}

// Settle waits, at most max or until ctx ends, until Pebble has deleted the
// files its flushes and compactions made obsolete (tables, blob files and
// WALs; not the zombie tables open reads still hold), then sizes the data
// directory. A deletion still outstanding when it stops waiting is reported
// in Deleting, not as an error.
func (d *DB) Settle(ctx context.Context, max time.Duration) (Settled, error) {
	timer := time.NewTimer(max)
	defer timer.Stop()
	// Pebble counts a deleted file out of its obsolete bytes only after
	// the deletion event (once its whole job is done), so the last event
	// can come before the metrics show nothing left: look again every
	// settleRecheck as well, and once more when giving up.
	recheck := time.NewTicker(settleRecheck)
	defer recheck.Stop()
	for {
		wake := d.dels.wait() // before looking, so no deletion is missed
		st, done, err := d.settled()
		if err != nil || done {
			return st, err
		}
		select {
		case <-wake:
		case <-recheck.C:
		case <-ctx.Done():
			st, _, err = d.settled()
			return st, err
		case <-timer.C:
			st, _, err = d.settled()
			return st, err
		}
	}
}

// settleRecheck is how often Settle looks at Pebble's metrics again
// without a deletion event.
const settleRecheck = 50 * time.Millisecond

// settled sizes the directory and tells whether obsolete files (zombies
// aside) are still waiting for deletion.
func (d *DB) settled() (Settled, bool, error) {
	m := d.Metrics()
	fs := d.opts.FS
	names, err := fs.List(d.dir)
	if err != nil {
		return Settled{}, false, err
	}
	var st Settled
	type logFile struct {
		name string
		size uint64
	}
	var logs []logFile
	for _, n := range names {
		if n == BallastName {
			continue
		}
		fi, err := fs.Stat(fs.PathJoin(d.dir, n))
		if err != nil || fi.IsDir() {
			continue // deleted meanwhile, or not a file
		}
		st.DirBytes += uint64(fi.Size())
		if strings.HasSuffix(n, ".log") {
			logs = append(logs, logFile{n, uint64(fi.Size())})
		}
	}
	st.Zombie = m.Table.Local.ZombieSize + m.BlobFiles.Local.ZombieSize
	st.Deleting = m.Table.Local.ObsoleteSize + m.BlobFiles.Local.ObsoleteSize
	// WALs Pebble no longer needs are not in its metrics once handed to the
	// cleaner: the log files beyond the live (and recycled) ones are, and
	// they are the oldest (lowest numbered; the names have a fixed width).
	extra := int64(len(logs)) - m.WAL.Files - m.WAL.ObsoleteFiles
	if extra > 0 {
		slices.SortFunc(logs, func(a, b logFile) int { return strings.Compare(a.name, b.name) })
		for _, l := range logs[:extra] {
			st.Deleting += l.size
		}
	}
	done := m.Table.Local.ObsoleteCount == 0 && m.BlobFiles.Local.ObsoleteCount == 0 && extra <= 0
	return st, done, nil
}
