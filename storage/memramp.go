package storage

import (
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Memtables while they ramp up.
//
// Pebble's first memtable after an open is 256 KiB, and each next one is
// twice the last, up to MemTableSize (64 MiB). It flushes none of the small
// full ones until together they pass half of MemTableSize, so for the first
// 32 MiB or so written after every open the database holds up to eight
// memtables, and every read seeks each of them: a skiplist seek each,
// mostly cache misses once they outgrow the caches. ebbbench's point reads
// of 200,000 rows just written did eight memtable seeks a read, 41% of the
// server's CPU.
//
// rampFlusher flushes them instead. Each memtable Pebble starts gets a WAL
// file of its own, which the database's filesystem sees created; a
// goroutine then looks at the memtables, and while they are still ramping
// up (all of them together smaller than MemTableSize) and one of them is
// full, it flushes (AsyncFlush: the full ones and the current one, whose
// next is twice its size, as after any rotation). The ramp so ends after
// about 20 MiB with at most one full memtable waiting, in four small
// flushes, and Pebble's own flushes take over once memtables are full size.
// A flush changes nothing of durability: the WAL holds every write until
// its memtable's flush is done.
type rampFlusher struct {
	db      *pebble.DB
	limit   uint64 // MemTableSize
	fail    *failer
	created chan struct{} // a memtable (its WAL) was created; capacity 1
	stop    chan struct{}
	idle    chan chan struct{} // tests: see waitIdle
	done    sync.WaitGroup
}

func newRampFlusher(limit uint64, fail *failer) *rampFlusher {
	return &rampFlusher{limit: limit, fail: fail, created: make(chan struct{}, 1), stop: make(chan struct{}), idle: make(chan chan struct{})}
}

// walCreated notes that Pebble created a WAL file (a new memtable). It
// never blocks: Pebble may call it inside its commit pipeline.
func (r *rampFlusher) walCreated() {
	select {
	case r.created <- struct{}{}:
	default:
	}
}

// start runs the flusher on db until close.
func (r *rampFlusher) start(db *pebble.DB) {
	r.db = db
	r.done.Add(1)
	go r.run()
}

// close stops the flusher, before the database closes.
func (r *rampFlusher) close() {
	if r == nil || r.db == nil {
		return
	}
	close(r.stop)
	r.done.Wait()
}

// waitIdle returns once the flusher has looked at every memtable created
// so far and its flushes are done (tests).
func (r *rampFlusher) waitIdle() {
	reply := make(chan struct{})
	select {
	case r.idle <- reply:
		<-reply
	case <-r.stop:
	case <-r.fail.notify:
	}
}

func (r *rampFlusher) run() {
	defer r.done.Done()
	for {
		select {
		case <-r.stop:
			return
		case <-r.created:
			if !r.checkAndWait() {
				return
			}
		case reply := <-r.idle:
			// Tests: answer once what was created so far is looked at.
			for pending := true; pending; {
				select {
				case <-r.created:
					if !r.checkAndWait() {
						close(reply)
						return
					}
				default:
					pending = false
				}
			}
			close(reply)
		}
	}
}

// checkAndWait checks, and waits for the flush it asked for; false: the
// flusher is to stop.
func (r *rampFlusher) checkAndWait() bool {
	flushed := r.check()
	if flushed == nil {
		return true
	}
	select {
	case <-r.stop:
		return false
	case <-r.fail.notify:
		return false
	case <-flushed:
		return true
	}
}

// check flushes when a full memtable waits that Pebble holds back during
// the ramp, and returns the channel closed once that flush is done (nil:
// none asked).
func (r *rampFlusher) check() (flushed <-chan struct{}) {
	if r.fail.Err() != nil {
		return nil // a failed pipeline may panic on the rotation
	}
	m := r.db.Metrics()
	if m.MemTable.Count < 2 || m.MemTable.Size >= r.limit {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			// The rotation met a broken WAL: the database has failed.
			if fp, ok := p.(FatalPanic); ok {
				r.fail.fail(fp.Err)
			} else {
				r.fail.fail(fmt.Errorf("memtable flush: %v", p))
			}
			flushed = nil
		}
	}()
	ch, err := r.db.AsyncFlush()
	if err != nil {
		return nil
	}
	return ch
}

// walCategory is the write category Pebble creates WAL files with.
const walCategory vfs.DiskWriteCategory = "pebble-wal"

// rampFS tells the ramp flusher when Pebble creates a WAL file.
type rampFS struct {
	vfs.FS
	r *rampFlusher
}

func (fs rampFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	if err == nil && cat == walCategory {
		fs.r.walCreated()
	}
	return f, err
}

func (fs rampFS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, cat)
	if err == nil && cat == walCategory {
		fs.r.walCreated()
	}
	return f, err
}
