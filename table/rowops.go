package table

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
)

// CheckAndMutate reads one row, applies the predicate filter to its visible
// cells, and applies trueMuts if any cell passes (or the row has any cell,
// when pred is nil), falseMuts otherwise — atomically.
func (e *Engine) CheckAndMutate(instance, table string, row []byte, pred RowFilter, trueMuts, falseMuts []Mutation) (bool, error) {
	if err := e.enter(); err != nil {
		return false, err
	}
	defer e.leave()
	m, err := e.Table(instance, table)
	if err != nil {
		return false, err
	}
	if err := validateRowKey(row); err != nil {
		return false, err
	}
	if len(trueMuts)+len(falseMuts) > MaxMutationsPerRow {
		return false, fmt.Errorf("%w: %d mutations in one row, the limit is %d", ErrInvalid, len(trueMuts)+len(falseMuts), MaxMutationsPerRow)
	}
	var tps, fps []prepared
	if len(trueMuts) > 0 {
		if tps, err = e.prepare(m, row, trueMuts); err != nil {
			return false, err
		}
	}
	if len(falseMuts) > 0 {
		if fps, err = e.prepare(m, row, falseMuts); err != nil {
			return false, err
		}
	}
	unlock := e.LockRow(m.ID, row)
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	r, g, err := e.readRowLocked(m, row)
	if err != nil {
		return false, err
	}
	if e.rowHidden(m, r, e.nowMicros()) {
		r.Cells = nil // an expired row is hidden from predicates too
	}
	if pred != nil && len(r.Cells) > 0 {
		r = pred.Apply(r)
	}
	matched := len(r.Cells) > 0
	ps := fps
	if matched {
		ps = tps
	}
	if len(ps) == 0 {
		// Nothing written, so nothing synced after what was read: the
		// answer must not rest on a write not yet durable.
		unlock()
		locked = false
		if err := g.row(context.Background(), m.ID, row); err != nil {
			return false, err
		}
		return matched, nil
	}
	wait, err := e.applyLocked(m, row, ps)
	unlock()
	locked = false
	if err != nil {
		return false, err
	}
	if err := wait(); err != nil {
		return false, err
	}
	// The answer rested on what was read: a read after it must see that.
	return matched, g.row(context.Background(), m.ID, row)
}

// RMWRule is one rule of ReadModifyWrite: append bytes to, or add a signed
// 64-bit integer to, the newest cell of a column.
type RMWRule struct {
	Family    string
	Qualifier []byte
	Append    []byte
	Increment int64
	IsAppend  bool
}

// ReadModifyWrite applies rules to the newest visible cells of a row
// atomically and returns the new cells it wrote.
func (e *Engine) ReadModifyWrite(instance, table string, row []byte, rules []RMWRule) (cell.Row, error) {
	if err := e.enter(); err != nil {
		return cell.Row{}, err
	}
	defer e.leave()
	m, err := e.Table(instance, table)
	if err != nil {
		return cell.Row{}, err
	}
	if err := validateRowKey(row); err != nil {
		return cell.Row{}, err
	}
	if len(rules) == 0 {
		return cell.Row{}, fmt.Errorf("%w: no read-modify-write rules given", ErrInvalid)
	}
	for _, r := range rules {
		f, ok := m.Family(r.Family)
		if !ok {
			return cell.Row{}, fmt.Errorf("%w: %q in table %s", ErrFamilyNotFound, r.Family, m.Name)
		}
		if f.ExpiryTimestamps {
			return cell.Row{}, fmt.Errorf("%w: family %q holds expiry timestamps (one-second expiration); read-modify-write stamps cells with the server time, which would expire at once", ErrPrecondition, r.Family)
		}
	}
	unlock := e.LockRow(m.ID, row)
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	cur, g, err := e.readRowLocked(m, row)
	if err != nil {
		return cell.Row{}, err
	}
	now := clock.MillisTruncated(e.clock.Now())
	// Values change in rule order: a later rule on the same column builds on
	// the earlier one's result.
	type col struct {
		fam  string
		qual string
	}
	latest := map[col]cell.Cell{}
	for _, c := range cur.Cells {
		k := col{c.Family, string(c.Qualifier)}
		if _, ok := latest[k]; !ok {
			latest[k] = c
		}
	}
	var order []col
	written := map[col]cell.Cell{}
	for _, r := range rules {
		k := col{r.Family, string(r.Qualifier)}
		base, had := written[k]
		if !had {
			base, had = latest[k]
		}
		ts := now
		if had && base.Timestamp > ts {
			ts = base.Timestamp
		}
		var val []byte
		if r.IsAppend {
			val = append(append([]byte{}, base.Value...), r.Append...)
		} else {
			var n int64
			if had {
				if len(base.Value) != 8 {
					return cell.Row{}, fmt.Errorf("%w: cannot increment %s:%s, its value is %d bytes, not a 64-bit big-endian integer", ErrPrecondition, r.Family, r.Qualifier, len(base.Value))
				}
				n = int64(binary.BigEndian.Uint64(base.Value))
			}
			n = addWrap(n, r.Increment)
			val = binary.BigEndian.AppendUint64(nil, uint64(n))
		}
		if _, seen := written[k]; !seen {
			order = append(order, k)
		}
		// The new value keeps the expiry of the cell it builds on, so a
		// counter with a native TTL stays on its TTL.
		var exp int64
		if had {
			exp = base.ExpireAt
		}
		written[k] = cell.Cell{Family: r.Family, Qualifier: []byte(k.qual), Timestamp: ts, Value: val, ExpireAt: exp}
	}
	var muts []Mutation
	out := cell.Row{Key: cur.Key}
	for _, k := range order {
		c := written[k]
		muts = append(muts, Mutation{Kind: SetCell, Family: c.Family, Qualifier: c.Qualifier, Timestamp: c.Timestamp, Value: c.Value, ExpireAt: c.ExpireAt})
		out.Cells = append(out.Cells, c)
	}
	ps, err := e.prepare(m, row, muts)
	if err != nil {
		return cell.Row{}, err
	}
	wait, err := e.applyLocked(m, row, ps)
	unlock()
	locked = false
	if err != nil {
		return cell.Row{}, err
	}
	if err := wait(); err != nil {
		return cell.Row{}, err
	}
	// The new values rest on what was read: a read after them must see it.
	if err := g.row(context.Background(), m.ID, row); err != nil {
		return cell.Row{}, err
	}
	return out, nil
}

// addWrap adds with two's-complement wrap-around, as Bigtable does.
func addWrap(a, b int64) int64 {
	return int64(uint64(a) + uint64(b))
}
