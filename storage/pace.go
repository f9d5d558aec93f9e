package storage

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// compactionWrites is the write category Pebble gives the files its
// compactions create (flushes and WAL writes have their own).
const compactionWrites vfs.DiskWriteCategory = "pebble-compaction"

// pacer slows the writes of compaction output files to a rate while a paced
// compaction runs (CompactPaced), so a compaction the collector asks for
// works in short bursts with pauses between them instead of holding a core
// and the disk at full speed. Every compaction writing meanwhile is paced,
// Pebble's own included; flushes and the WAL never are.
type pacer struct {
	rate atomic.Int64 // bytes per second; 0: not pacing

	mu    sync.Mutex
	start time.Time // the current one-second window
	bytes int64     // written in it

	paced atomic.Int64 // bytes written under pacing, ever (for tests)
}

// wrote accounts for n bytes written and sleeps as long as the writes are
// ahead of the rate. Sleeps shorter than a millisecond are skipped (the
// debt carries over within the window), so pacing costs no timer per write.
func (p *pacer) wrote(n int) {
	rate := p.rate.Load()
	if rate <= 0 {
		return
	}
	p.paced.Add(int64(n))
	p.mu.Lock()
	now := time.Now()
	if p.start.IsZero() || now.Sub(p.start) > time.Second {
		p.start, p.bytes = now, 0
	}
	p.bytes += int64(n)
	due := p.start.Add(time.Duration(float64(p.bytes) / float64(rate) * float64(time.Second)))
	p.mu.Unlock()
	// Sleep in slices, so pacing switched off ends a long wait early.
	for d := due.Sub(now); d > time.Millisecond && p.rate.Load() > 0; d = time.Until(due) {
		time.Sleep(min(d, 20*time.Millisecond))
	}
}

// pacedFS hands out compaction output files whose writes go through the
// pacer.
type pacedFS struct {
	vfs.FS
	p *pacer
}

func (fs pacedFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	if err != nil || cat != compactionWrites {
		return f, err
	}
	return pacedFile{f, fs.p}, nil
}

type pacedFile struct {
	vfs.File
	p *pacer
}

func (f pacedFile) Write(b []byte) (int, error) {
	n, err := f.File.Write(b)
	f.p.wrote(n)
	return n, err
}

// CompactPaced compacts [start, end) like Compact, with the compactions'
// output written at no more than bytesPerSec (0 or less: unpaced). Paced
// compactions run one at a time.
//
// Pacing slows every compaction running meanwhile, Pebble's own included,
// so foreground writes could pile up files in L0 until Pebble stalls them.
// The pacing is dropped for the rest of the call once L0 holds half the
// sublevels at which Pebble stops writes.
func (d *DB) CompactPaced(ctx context.Context, start, end []byte, bytesPerSec int64) error {
	if bytesPerSec <= 0 {
		return d.Compact(ctx, start, end, false)
	}
	d.paceMu.Lock()
	defer d.paceMu.Unlock()
	d.pacer.rate.Store(bytesPerSec)
	done := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if d.writesBacklogged() {
					d.pacer.rate.Store(0)
					return
				}
			}
		}
	}()
	defer func() {
		close(done)
		watch.Wait()
		d.pacer.rate.Store(0)
	}()
	return d.Compact(ctx, start, end, false)
}

// writesBacklogged says whether L0 holds half the sublevels at which Pebble
// stops writes (tests replace it).
func (d *DB) writesBacklogged() bool {
	if d.backlogged != nil {
		return d.backlogged()
	}
	limit := max(d.opts.L0CompactionThreshold, d.opts.L0StopWritesThreshold/2)
	return int(d.Metrics().Levels[0].Sublevels) >= limit
}
