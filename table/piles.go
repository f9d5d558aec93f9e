package table

// Piles. A read that seeks past a column's hidden tail because it holds
// more hidden versions than the scanner steps over (skipSteps) reports the
// row: such a column piles up versions a pass has not collected yet, and
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
