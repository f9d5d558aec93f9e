package server

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/ebbtable/ebbtable/sqlquery"
	"github.com/ebbtable/ebbtable/table"
)

// Reading a maintained materialized view's stored rows, for SQL's FROM and
// the data API's ReadRows alike. The rows are the state's 'O' entries, 'O'
// · esc(_key) · 0x00 0x01 · group, so they come in _key order and a key
// range of the view is a range of the state. A read first brings the
// view up to date (maintainTable consumes the log up to every write before
// it), then takes a snapshot of the state under the table's maintenance
// lock: the rows it streams are the view at one maintenance frontier,
// whatever the maintainer commits while they stream.

// keptView finds a view maintained over its whole table here; nil when
// the view is not.
func (s *Server) keptView(inst, id string) (*maintView, []*maintView, error) {
	index, err := s.maintIndex()
	if err != nil {
		return nil, nil, err
	}
	for _, vs := range index {
		for _, v := range vs {
			if v.inst == inst && v.id == id && v.whole() {
				return v, vs, nil
			}
		}
	}
	return nil, nil, nil
}

// viewKept reports whether inst's materialized view name is maintained:
// here over its whole table, or in a cluster by the owners of its
// tablets (mviewpartial.go).
func (s *Server) viewKept(inst, name string) bool {
	mv, _, err := s.keptView(inst, name)
	return err == nil && (mv != nil || s.mergeViewPlan(inst, name) != nil)
}

// escKey is the escaped form of a view _key in its output entries' keys.
func escKey(k []byte) []byte {
	out := make([]byte, 0, len(k)+1)
	for _, c := range k {
		if c == 0 {
			out = append(out, 0, 0xFF)
			continue
		}
		out = append(out, c)
	}
	return out
}

// scanKept brings a maintained view up to date and calls fn with its rows
// whose _key lies in ranges (none: all; sorted and disjoint, as
// sqlquery gives them), in _key order, after position after (an output
// entry's key; nil: from the start). kept is false, and fn not called,
// when the view is not maintained.
func (s *Server) scanKept(ctx context.Context, inst, id string, ranges []table.RowRange, after []byte, fn func(pos []byte, row []sqlquery.Value) error) (kept bool, err error) {
	mv, views, err := s.keptView(inst, id)
	if err != nil {
		return false, err
	}
	if mv == nil {
		return s.scanMerged(ctx, inst, id, ranges, after, fn)
	}
	if err := s.maintainTable(ctx, mv.meta.ID, views); err != nil {
		return false, err
	}
	l := s.mviews.tableLock(mv.meta.ID)
	l.Lock()
	snap, err := s.engine.NewViewSnapshot()
	l.Unlock()
	if err != nil {
		return false, err
	}
	defer snap.Close()
	emit := func(k, v []byte) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if len(v) == 0 {
			return false, fmt.Errorf("ebbtable: corrupt materialized view row")
		}
		if v[0] == 1 {
			return false, fmt.Errorf("%w: %s", sqlquery.ErrInvalid, v[1:])
		}
		x, _, err := sqlquery.DecodeValue(v[1:])
		if err != nil {
			return false, err
		}
		vals, _ := x.(sqlquery.Struct)
		return true, fn(k, vals)
	}
	for _, b := range viewScanBounds(ranges, after) {
		lo, hi := b[0], b[1]
		if bytes.Compare(lo, hi) >= 0 {
			continue
		}
		if err := snap.Scan(mv.space, lo, hi, false, emit); err != nil {
			return true, err
		}
	}
	return true, nil
}

// readSpans turns a read's keys and ranges into sorted, disjoint
// half-open ranges of row keys (nil when both are empty: everything).
func readSpans(keys [][]byte, ranges []table.RowRange) []table.RowRange {
	var out []table.RowRange
	for _, k := range keys {
		out = append(out, table.RowRange{Start: k, End: append(bytes.Clone(k), 0)})
	}
	for _, r := range ranges {
		s := table.RowRange{Start: r.Start, End: r.End}
		if s.Start == nil {
			s.Start = []byte{}
		}
		if r.StartOpen {
			s.Start = append(bytes.Clone(r.Start), 0)
		}
		if r.EndClosed && r.End != nil {
			s.End = append(bytes.Clone(r.End), 0)
		}
		if s.End != nil && bytes.Compare(s.Start, s.End) >= 0 {
			continue
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		if len(keys) > 0 || len(ranges) > 0 {
			return []table.RowRange{{Start: []byte{}, End: []byte{}}} // nothing
		}
		return nil
	}
	slices.SortFunc(out, func(a, b table.RowRange) int { return bytes.Compare(a.Start, b.Start) })
	merged := out[:1]
	for _, s := range out[1:] {
		last := &merged[len(merged)-1]
		if last.End == nil || bytes.Compare(s.Start, last.End) <= 0 {
			if last.End != nil && (s.End == nil || bytes.Compare(s.End, last.End) > 0) {
				last.End = s.End
			}
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// viewScanBounds are the stored view rows' key bounds [lo, hi) of each
// range of view keys read (all of them when none), starting after key
// after when it is set (a resumed read).
func viewScanBounds(ranges []table.RowRange, after []byte) [][2][]byte {
	var from []byte
	if after != nil {
		from = append(bytes.Clone(after), 0)
	}
	if len(ranges) == 0 {
		ranges = []table.RowRange{{}}
	}
	out := make([][2][]byte, 0, len(ranges))
	for _, r := range ranges {
		lo := append([]byte{'O'}, escKey(r.Start)...)
		hi := []byte{'P'}
		if r.End != nil {
			hi = append([]byte{'O'}, escKey(r.End)...)
		}
		if from != nil && bytes.Compare(from, lo) > 0 {
			lo = from
		}
		out = append(out, [2][]byte{lo, hi})
	}
	return out
}
