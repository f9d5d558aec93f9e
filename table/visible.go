package table

import (
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/gcrule"
)

// visible drops from a row's cells (in Bigtable order) what readers must not
// see at time now: cells past their native expiry always, and, unless the
// engine runs in UntilCollected mode, cells their family's GC rule makes
// eligible. The collector applies the same two steps in the same order, so
// what a reader sees does not change when collection happens.
func (e *Engine) visible(m *Meta, cells []cell.Cell, now int64) []cell.Cell {
	out := cells[:0]
	for _, c := range cells {
		if c.ExpireAt != 0 && c.ExpireAt <= now {
			continue
		}
		out = append(out, c)
	}
	if e.vis == UntilCollected || len(out) == 0 {
		return out
	}
	kept := out[:0]
	var ts []int64
	cell.Columns(out, func(col []cell.Cell) {
		fam, ok := m.Family(col[0].Family)
		if !ok || fam.GC.IsNone() {
			kept = append(kept, col...)
			return
		}
		ts = ts[:0]
		for _, c := range col {
			ts = append(ts, c.Timestamp)
		}
		reasons := gcrule.Eligible(fam.GC, ts, now)
		for i, c := range col {
			if reasons[i] == gcrule.ReasonNone {
				kept = append(kept, c)
			}
		}
	})
	return kept
}
