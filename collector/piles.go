package collector

import (
	"bytes"
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/schedule"
	"github.com/ebbtable/ebbtable/storage"
)

// Piles: a column written often under a max-versions rule piles up hidden
// versions between passes. Readers seek past them (table/read.go), but
// every one is stored until a pass. A read that seeks past more than a few
// hidden versions reports its row (table.PileHook); the collector visits
// the row PileDelay after the report, judged whole under its lock as a pass
// would, rather than at the next pass. The set of rows waiting is bounded
// (maxPiles): past it, reports are dropped and the rows wait for the pass.

// maxPiles bounds the rows waiting for an early visit.
const maxPiles = 16384

// PileDelay is how long after a read reported a pile the collector visits
// its row: a quarter of the pass interval, at most 5 s.
func (c *Collector) PileDelay() time.Duration { return min(c.opts.Interval/4, 5*time.Second) }

// notePile is the engine's pile hook. Rows are kept by their cell-key
// prefix. A hot row is reported by every read of it while it waits, so a
// report of a row already waiting is answered from pileSeen, without the
// mutex the reads would otherwise all queue on; a report pileSeen does not
// answer costs one map lookup that allocates nothing.
func (c *Collector) notePile(tableID uint64, prefix []byte) {
	h, slot := c.pileSeen.slot(tableID, prefix)
	if slot.Load() == h {
		return // waiting already
	}
	c.pileMu.Lock()
	defer c.pileMu.Unlock()
	t := c.piles[tableID]
	if t == nil {
		if c.pileCount >= maxPiles {
			return
		}
		t = map[string]time.Time{}
		c.piles[tableID] = t
	}
	if _, ok := t[string(prefix)]; ok {
		slot.Store(h)
		return
	}
	if c.pileCount >= maxPiles {
		return
	}
	t[string(prefix)] = c.opts.Clock.Now()
	slot.Store(h)
	c.pileCount++
	c.m.pilesWaiting.Set(float64(c.pileCount))
}

// pileSeen remembers, by a 64-bit hash of table id and row prefix, rows
// that wait in Collector.piles. A slot is set under pileMu once its row is
// in the set and cleared (if it still holds that row) under pileMu when the
// row leaves it, so a report answered by a slot found a row that was
// waiting when it looked: a report racing duePiles is dropped only for a
// row whose visit, which reads the row afresh, follows it. Two rows
// sharing a slot take turns in it, and each report of the one out of it
// takes the mutex path; two rows with the same 64-bit hash (about one in
// 2^64 for a given pair) would let a report of the second be dropped while
// the first waits, and that row waits for the next pass, as a report past
// maxPiles does.
type pileSeen struct {
	once  sync.Once
	seed  maphash.Seed
	slots [pileSlots]atomic.Uint64
}

// pileSlots is how many waiting rows pileSeen answers for at once.
const pileSlots = 4096

// slot is the row's hash (never 0) and the slot it goes in.
func (p *pileSeen) slot(tableID uint64, prefix []byte) (uint64, *atomic.Uint64) {
	p.once.Do(func() { p.seed = maphash.MakeSeed() })
	h := maphash.Bytes(p.seed, prefix) ^ tableID*0x9e3779b97f4a7c15
	// The slot from the bits before the low one is forced (a forced odd h
	// would leave the even slots unused).
	return h | 1, &p.slots[(h>>1)%pileSlots]
}

// forget clears the row's slot if it still holds the row (under pileMu).
func (p *pileSeen) forget(tableID uint64, prefix []byte) {
	h, slot := p.slot(tableID, prefix)
	slot.CompareAndSwap(h, 0)
}

// PilesWaiting is how many reported rows wait for an early visit.
func (c *Collector) PilesWaiting() int {
	c.pileMu.Lock()
	defer c.pileMu.Unlock()
	return c.pileCount
}

// duePiles takes from the set the rows reported at least PileDelay ago.
func (c *Collector) duePiles() map[uint64][][]byte {
	cut := c.opts.Clock.Now().Add(-c.PileDelay())
	c.pileMu.Lock()
	defer c.pileMu.Unlock()
	out := map[uint64][][]byte{}
	for id, rows := range c.piles {
		for r, at := range rows {
			if at.After(cut) {
				continue
			}
			delete(rows, r)
			c.pileSeen.forget(id, []byte(r))
			c.pileCount--
			row, err := storage.DecodeRowKey([]byte(r))
			if err != nil {
				continue
			}
			out[id] = append(out[id], row)
		}
		if len(rows) == 0 {
			delete(c.piles, id)
		}
	}
	c.m.pilesWaiting.Set(float64(c.pileCount))
	return out
}

// CollectPiles visits the reported rows whose delay has passed and returns
// how many cells it collected. Start runs it every PileDelay.
func (c *Collector) CollectPiles(ctx context.Context) (int64, error) {
	due := c.duePiles()
	if len(due) == 0 {
		return 0, nil
	}
	c.passMu.Lock()
	defer c.passMu.Unlock()
	now := clock.Micros(c.opts.Clock.Now())
	var n int64
	var errs []error
	for _, m := range c.eng.Tables("") {
		rows := due[m.ID]
		if len(rows) == 0 {
			continue
		}
		slices.SortFunc(rows, bytes.Compare)
		rules := sweepRules{skipVersions: !c.decidesVersions(), held: c.heldFamilies(m)}
		res, err := c.visitRows(ctx, m, visitPlan{rows: rows}, rules, now, 0)
		n += res.collected
		c.m.rowsVisited.WithLabelValues("pile").Add(float64(len(rows)))
		if err != nil {
			errs = append(errs, err)
		}
	}
	// The deletions are made durable by the next pass's sync; until then
	// they are as durable as any unsynced collection (see deleteBatch).
	return n, errors.Join(errs...)
}

// startPiles runs CollectPiles in the background.
func (c *Collector) startPiles() *schedule.Loop {
	return schedule.Start(schedule.Options{
		Name: "gc piles", Interval: c.PileDelay(), MaxBackoff: c.opts.MaxBackoff,
		Clock: c.opts.Clock, Logger: c.log,
	}, func(ctx context.Context) error {
		_, err := c.CollectPiles(ctx)
		return err
	})
}
