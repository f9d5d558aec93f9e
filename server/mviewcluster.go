package server

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/ebbtable/ebbtable/table"
)

// Maintained materialized views in cluster mode (docs/sql.md, "Cluster
// mode"). Each node maintains a view over the rows of the tablets it owns:
// its view log names the rows its commits change, and its state records
// the spans (unions of owned tablets) it covers. When the tablets a node
// owns change, maintenance reconciles the state with the new spans before
// anything else: the contributions of rows in spans it lost are taken out
// (from the state alone, no table read), the rows of spans it gained are
// read from its engine (a moved-in tablet's rows are there since the
// ingest before the flip) and put in. A split or a merge between two
// tablets of the same node changes no span: nothing is done. Rows outside
// the spans (log entries of a tablet before its flip, a failover's replay)
// contribute nothing.
//
// A move can bring a span back to a node whose state still covers it (a
// move away and back before its maintainer looked, or a take-over after
// a restart): the ingest replaced the rows under the state without a log
// entry. So before any ingest, the states of the table's views whose spans
// overlap the ingested span lose their header, and are rebuilt from the
// node's own rows when next maintained (ingestSpan).
//
// A node owning the whole table serves the view from its state as a
// single node does. Otherwise a read fans out to the owners, each answers
// its state group by group (ViewPartial, mviewpartial.go), and the reader
// merges them (sqlquery.Merge). A DISTINCT aggregate's part is its
// node's distinct values, each with its count of rows there (a deletion
// takes a value out only with its last row on that node); the merge counts
// a value once however many nodes hold it.

// viewSpans returns the spans of inst's table name this node owns, merged
// and in key order; clustered is false outside a cluster or for a table
// that is not a cluster table (the node holds all of it).
func (s *Server) viewSpans(inst, name string) (spans []table.RowRange, clustered bool) {
	if s.cluster == nil || s.cluster.m == nil {
		return nil, false
	}
	d, ok := s.cluster.m.Directory(tableRef{instance: inst, table: name}.name())
	if !ok {
		return nil, false
	}
	spans = []table.RowRange{}
	for _, t := range d.Tablets {
		if t.Owner != s.cluster.opts.NodeID {
			continue
		}
		spans = appendSpan(spans, t.Start, t.End)
	}
	return spans, true
}

// appendSpan adds tablet [start, end) (empty end: to the end) to spans in
// key order, joined to the last span when they meet.
func appendSpan(spans []table.RowRange, start, end []byte) []table.RowRange {
	start, end = bytes.Clone(start), bytes.Clone(end)
	if start == nil {
		start = []byte{}
	}
	if len(end) == 0 {
		end = nil
	}
	if n := len(spans); n > 0 && spans[n-1].End != nil && bytes.Equal(spans[n-1].End, start) {
		spans[n-1].End = end
		return spans
	}
	return append(spans, table.RowRange{Start: start, End: end})
}

// spansWhole reports whether spans cover every row key.
func spansWhole(spans []table.RowRange) bool {
	return len(spans) == 1 && len(spans[0].Start) == 0 && spans[0].End == nil
}

func spansEqual(a, b []table.RowRange) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i].Start, b[i].Start) || !bytes.Equal(a[i].End, b[i].End) || (a[i].End == nil) != (b[i].End == nil) {
			return false
		}
	}
	return true
}

// spansCover reports whether row falls in spans.
func spansCover(spans []table.RowRange, row []byte) bool {
	for _, s := range spans {
		if bytes.Compare(row, s.Start) >= 0 && (s.End == nil || bytes.Compare(row, s.End) < 0) {
			return true
		}
	}
	return false
}

// spansOverlap reports whether spans meet [start, end) (empty end: to the
// end).
func spansOverlap(spans []table.RowRange, start, end []byte) bool {
	for _, s := range spans {
		if (len(end) == 0 || bytes.Compare(s.Start, end) < 0) && (s.End == nil || bytes.Compare(start, s.End) < 0) {
			return true
		}
	}
	return false
}

// subtractSpans returns the parts of a not in b (both merged, in order).
func subtractSpans(a, b []table.RowRange) []table.RowRange {
	var out []table.RowRange
	for _, x := range a {
		cur := []table.RowRange{x}
		for _, y := range b {
			var next []table.RowRange
			for _, c := range cur {
				// c minus y: the part before y, the part after y.
				if y.End != nil && bytes.Compare(c.Start, y.End) >= 0 || c.End != nil && bytes.Compare(c.End, y.Start) <= 0 {
					next = append(next, c)
					continue
				}
				if bytes.Compare(c.Start, y.Start) < 0 {
					next = append(next, table.RowRange{Start: c.Start, End: y.Start})
				}
				if y.End != nil && (c.End == nil || bytes.Compare(y.End, c.End) < 0) {
					next = append(next, table.RowRange{Start: y.End, End: c.End})
				}
			}
			cur = next
		}
		out = append(out, cur...)
	}
	return out
}

// encodeSpans and decodeSpans keep spans in a state's header.
func encodeSpans(spans []table.RowRange) [][2][]byte {
	if spans == nil {
		return nil
	}
	out := make([][2][]byte, 0, len(spans))
	for _, s := range spans {
		out = append(out, [2][]byte{s.Start, s.End})
	}
	return out
}

func decodeSpans(b [][2][]byte) []table.RowRange {
	out := make([]table.RowRange, 0, len(b))
	for _, s := range b {
		out = appendSpan(out, s[0], s[1])
	}
	return out
}

// viewCoverageChanged reports whether the spans a maintenance index was
// built under changed: a maintained view's table's tablets here changed,
// or a view left out for want of any tablet here now has one.
func (s *Server) viewCoverageChanged(index map[uint64][]*maintView, skipped []tableRef) bool {
	if s.cluster == nil {
		return false
	}
	for _, vs := range index {
		for _, mv := range vs {
			if spans, _ := s.viewSpans(mv.inst, mv.meta.Name); !spansEqual(spans, mv.spans) {
				return true
			}
		}
	}
	for _, r := range skipped {
		if spans, clustered := s.viewSpans(r.instance, r.table); !clustered || len(spans) > 0 {
			return true
		}
	}
	return false
}

// unlogUnmaintained turns off the view log of tables no maintained view
// reads (their views dropped, or no tablet of theirs here), so no log
// grows that nothing consumes.
func (s *Server) unlogUnmaintained(index map[uint64][]*maintView) error {
	for _, m := range s.engine.Tables("") {
		if !s.engine.ViewLogged(m.ID) || len(index[m.ID]) != 0 {
			continue
		}
		l := s.mviews.tableLock(m.ID)
		l.Lock()
		// Again under the table's lock: a view maintained meanwhile keeps
		// its log.
		now, err := s.maintIndex()
		if err == nil && len(now[m.ID]) == 0 {
			err = s.engine.SetViewLogged(m.ID, false)
		}
		l.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// reconcileView brings a view's state from the spans it covers (have) to
// the spans this node owns now (mv.spans): rows of spans lost are taken
// out, rows of spans gained put in. The header goes first and comes back
// last: a crash between rebuilds the state.
func (s *Server) reconcileView(ctx context.Context, mv *maintView, have []table.RowRange) error {
	vb := s.engine.NewViewBatch()
	defer func() { vb.Close() }()
	if err := vb.Delete(mv.space, []byte{'V'}); err != nil {
		return err
	}
	now := s.opts.Clock.Now()
	var rows [][]byte
	flush := func(force bool) error {
		if len(rows) < maintBatch && !force {
			return nil
		}
		st := viewStore{vb: vb, space: mv.space}
		if err := s.updateRows(ctx, mv, mv.meta, st, now, rows); err != nil {
			return err
		}
		rows = rows[:0]
		if vb.Len() < 1<<20 {
			return nil
		}
		if err := vb.Commit(); err != nil {
			return err
		}
		vb.Close()
		vb = s.engine.NewViewBatch()
		return nil
	}
	// Lost: every row the state knows there (a contribution or a
	// deadline); outside mv.spans, updateRows takes them out.
	for _, r := range subtractSpans(have, mv.spans) {
		var lost [][]byte
		st := viewStore{vb: vb, space: mv.space}
		for _, tag := range []byte{'C', 'E'} {
			hi := []byte{tag + 1}
			if r.End != nil {
				hi = append([]byte{tag}, r.End...)
			}
			if err := st.Scan(append([]byte{tag}, r.Start...), hi, false, func(k, _ []byte) (bool, error) {
				lost = append(lost, bytes.Clone(k[1:]))
				return true, nil
			}); err != nil {
				return err
			}
		}
		for _, row := range lost {
			rows = append(rows, row)
			if err := flush(false); err != nil {
				return err
			}
		}
	}
	// Gained: every row this node's engine holds there.
	for _, r := range subtractSpans(mv.spans, have) {
		var gained [][]byte
		var last []byte
		if err := s.engine.RawCells(mv.meta, r.Start, r.End, func(c table.RawCell) error {
			if last == nil || !bytes.Equal(c.Row, last) {
				last = bytes.Clone(c.Row)
				gained = append(gained, last)
			}
			return nil
		}); err != nil {
			return err
		}
		for _, row := range gained {
			rows = append(rows, row)
			if err := flush(false); err != nil {
				return err
			}
		}
	}
	if err := flush(true); err != nil {
		return err
	}
	if err := s.putHeader(vb, mv); err != nil {
		return err
	}
	return vb.Commit()
}

// putHeader writes a view state's header.
func (s *Server) putHeader(vb *table.ViewBatch, mv *maintView) error {
	_, hb, err := mv.header()
	if err != nil {
		return err
	}
	return vb.Set(mv.space, []byte{'V'}, hb)
}

// ingestSpan ingests a span export, after the states of the table's views
// that cover part of the span lost their header (package doc above).
func (s *Server) ingestSpan(ctx context.Context, x *table.SpanExport) error {
	if err := s.viewsBeforeIngest(x.Instance, x.Table, x.StartRow, x.EndRow); err != nil {
		return err
	}
	return s.engine.IngestSpan(ctx, x)
}

func (s *Server) viewsBeforeIngest(inst, name string, start, end []byte) error {
	m, err := s.engine.Table(inst, name)
	if err != nil {
		return nil // IngestSpan answers
	}
	l := s.mviews.tableLock(m.ID)
	l.Lock()
	defer l.Unlock()
	vb := s.engine.NewViewBatch()
	defer vb.Close()
	n := 0
	err = s.engine.InstanceMeta(kindMaterializedView, inst, func(vinst, id string, _ []byte) error {
		if vinst != inst {
			return nil
		}
		space := table.ViewSpace(vinst + "/" + id)
		b, ok, err := vb.Get(space, []byte{'V'})
		if err != nil || !ok {
			return err
		}
		var h viewHeader
		if json.Unmarshal(b, &h) != nil || h.TableID != m.ID {
			return nil
		}
		if h.Coverage == coverageSpans && !spansOverlap(decodeSpans(h.Spans), start, end) {
			return nil
		}
		n++
		return vb.Delete(space, []byte{'V'})
	})
	if err != nil || n == 0 {
		return err
	}
	err = vb.Commit()
	s.mviews.stateGen.Add(1) // maintIdle
	return err
}

// mergeViewPlan plans inst's view id for reads that merge the owners'
// states; nil when it is not such a view.
func (s *Server) mergeViewPlan(inst, id string) *maintView {
	if s.cluster == nil || s.mviews.mergeOff.Load() {
		return nil
	}
	if _, err := s.maintIndex(); err != nil {
		return nil
	}
	s.mviews.mu.Lock()
	defer s.mviews.mu.Unlock()
	return s.mviews.merged[inst+"/"+id]
}
