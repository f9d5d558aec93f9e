package table

import "github.com/ebbtable/ebbtable/storage"

// pointIntervals is intervals, except that a read of one row key (the
// common point read) gets its one interval without allocating: the row's
// bounds are made in one buffer by bounds, not from a successor key.
// point is whether the request names keys and no ranges; one holds the
// interval (the caller's, so it need not be allocated).
func (r *ReadRequest) pointIntervals(point bool, one *[1]interval) ([]interval, error) {
	if point && len(r.Keys) == 1 {
		one[0] = interval{lo: r.Keys[0], one: true}
		return one[:], nil
	}
	return r.intervals()
}

// bounds returns the interval's storage key bounds in table tableID:
// RowBound of lo (inclusive) and of hi (exclusive; the table's end when hi
// is nil). A one-row interval's upper bound is RowAfter of its row, the
// bound of the row's successor key, and both are written into buf (grown
// if it is too small). pebble.Iterator.SetBounds copies the bounds it is
// given, so a read reuses one buffer for every interval (readRows).
func (iv interval) bounds(buf []byte, tableID uint64) (lo, hi []byte) {
	if iv.one {
		// tag and table id, the escaped row and its terminator, twice, with
		// the successor's escaped zero byte; a row's zero bytes take more.
		if need := 2*(9+len(iv.lo)+2) + 2 + 4; cap(buf) < need {
			buf = make([]byte, 0, need)
		}
		lo = storage.AppendRowBound(buf[:0], tableID, iv.lo)
		hi = storage.AppendRowAfter(lo[len(lo):len(lo)], tableID, iv.lo)
		return lo[:len(lo):len(lo)], hi
	}
	lo = storage.RowBound(tableID, iv.lo)
	if iv.hi == nil {
		return lo, storage.TableEnd(tableID)
	}
	return lo, storage.RowBound(tableID, iv.hi)
}
