package table

import (
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/gcrule"
)

// Reason says why a cell may be collected.
type Reason int

// The reasons a cell is collectable.
const (
	Keep     Reason = iota // not collectable
	Age                    // the family's max-age rule
	Versions               // the family's max-versions rule (alone or in an intersection)
	TTL                    // the cell's own expiry has passed
	Dropped                // its family (or table) was dropped
)

// String is the reason's metric label.
func (r Reason) String() string {
	switch r {
	case Age:
		return "age"
	case Versions:
		return "versions"
	case TTL:
		return "cell-ttl"
	case Dropped:
		return "dropped"
	}
	return "keep"
}

// ColumnEligibility decides, for the versions of one column (newest first,
// timestamps ts and native expiries exp, 0 = none), which are collectable at
// now and why, writing into out (resized to len(ts)). Expired cells go first;
// the family rule then judges the cells that are left, so counting versions
// does not depend on whether expired cells were already removed. Readers and
// the collector both decide through this one function.
func ColumnEligibility(rule gcrule.Rule, ts, exp []int64, now int64, out []Reason) []Reason {
	out = out[:0]
	if rule.IsNone() {
		for i := range ts {
			if exp[i] != 0 && exp[i] <= now {
				out = append(out, TTL)
			} else {
				out = append(out, Keep)
			}
		}
		return out
	}
	// Positions count only the cells that have not expired.
	pos := 0
	for i := range ts {
		if exp[i] != 0 && exp[i] <= now {
			out = append(out, TTL)
			continue
		}
		switch rule.Check(pos, ts[i], now) {
		case gcrule.ReasonAge:
			out = append(out, Age)
		case gcrule.ReasonVersions:
			out = append(out, Versions)
		default:
			out = append(out, Keep)
		}
		pos++
	}
	return out
}

// visible drops from a row's cells (in Bigtable order) what readers must not
// see at time now: cells past their native expiry always, and, unless the
// engine runs in UntilCollected mode, cells their family's GC rule makes
// eligible.
func (e *Engine) visible(m *Meta, cells []cell.Cell, now int64) []cell.Cell {
	if len(cells) == 0 {
		return cells
	}
	kept := cells[:0]
	// A column of up to 16 versions is judged without allocating.
	var tsBuf, expBuf [16]int64
	var reasonBuf [16]Reason
	ts, exp, reasons := tsBuf[:0], expBuf[:0], reasonBuf[:0]
	cell.Columns(cells, func(col []cell.Cell) {
		fam, _ := m.Family(col[0].Family)
		ts, exp = ts[:0], exp[:0]
		anyExp := false
		for _, c := range col {
			ts = append(ts, c.Timestamp)
			exp = append(exp, c.ExpireAt)
			anyExp = anyExp || c.ExpireAt != 0
		}
		if !anyExp && (e.vis == UntilCollected || fam == nil || fam.GC.IsNone()) {
			kept = append(kept, col...)
			return
		}
		rule := gcrule.Rule{}
		if e.vis == HideEligible && fam != nil {
			rule = fam.GC
		}
		reasons = ColumnEligibility(rule, ts, exp, now, reasons)
		for i, c := range col {
			if reasons[i] == Keep {
				kept = append(kept, c)
			}
		}
	})
	return kept
}
