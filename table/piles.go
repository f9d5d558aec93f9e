package table

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// Piles. A read that seeks past a column's hidden tail because it holds
// more hidden versions than the scanner steps over (skipSteps, or one for a
// column hotColumns remembers) reports the row: such a column piles up versions a pass has not collected yet, and
// the collector may visit it before the next pass (collector/piles.go).

// PileHook receives the table id and the cell-key prefix of a row (storage
// key space; storage.DecodeRowKey gives the row key) that a read found
// piling up hidden versions. It is called on the read path: it must be
// quick and must not keep prefix.
type PileHook func(tableID uint64, rowPrefix []byte)

type pileHookBox struct{ fn PileHook }

// SetPileHook installs (nil: removes) the hook reads report piles to.
func (e *Engine) SetPileHook(h PileHook) {
	if h == nil {
		e.pileHook.Store(nil)
		return
	}
	e.pileHook.Store(&pileHookBox{h})
}

// reportPile tells the hook about the row whose cell-key prefix is prefix.
func (e *Engine) reportPile(tableID uint64, prefix []byte) {
	if h := e.pileHook.Load(); h != nil {
		h.fn(tableID, prefix)
	}
}

// hotColumns remembers, by a hash of their cell-key prefix, columns whose
// hidden tail a read recently left with a seek: a hot column of a
// max-versions family, overwritten faster than the collector removes its
// versions. A scan leaving such a column steps over one version, not
// skipSteps, before it seeks (skipColumn): the other steps would only
// walk versions the seek passes anyway. It is a hint: a slot shared by two
// columns, or a column no longer hot, costs at most a step or a seek, never
// a cell.
type hotColumns struct {
	seed  maphash.Seed
	once  sync.Once
	slots [hotSlots]atomic.Uint64
}

// hotSlots is how many columns hotColumns remembers at most.
const hotSlots = 4096

// sum is col's hash (never 0) and the slot it goes in.
func (h *hotColumns) sum(col []byte) (uint64, *atomic.Uint64) {
	h.once.Do(func() { h.seed = maphash.MakeSeed() })
	s := maphash.Bytes(h.seed, col) | 1
	return s, &h.slots[s%hotSlots]
}
