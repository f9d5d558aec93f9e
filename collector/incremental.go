package collector

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"runtime"
	"slices"
	"sort"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/progress"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

// Incremental passes (docs/garbage-collection.md, "What a pass visits").
//
// A cell's verdict changes only when its column is written (versions), when
// time passes its family's max age, or when its native expiry passes. The
// GC agenda (table/agenda.go) announces the first and the last, durably,
// in the writes' own batches; the second is found through the timestamp
// block property, reading only the blocks that can hold a cell which aged
// past a max age since the previous pass. A pass visits those rows and
// judges each whole, under its row lock, exactly as a whole sweep would.
//
// A table is swept whole instead on the collector's first pass over it in
// this process, after its rules or its held families change, a family is
// dropped, cells were imported, or this cluster became the GC leader; and
// when more than Options.WholeShare of its rows are due, where streaming
// the table costs less than visiting rows one by one. A whole sweep then
// settles the agenda's entries due AgendaSlack before it began.

// incState is what the collector remembers of a table between passes. It
// lives in memory: a restarted process sweeps each table whole once.
type incState struct {
	rules   map[uint32]string // family id → rule, at the last pass
	dropped int               // dropped families not yet forgotten
	held    string            // held families
	skipV   bool              // versions left to the GC leader
	gen     uint64            // the engine's GC generation of the table
	rows    int64             // rows the last whole sweep saw
	judged  int64             // micros: when the last pass began
}

// visitBatchRows bounds the rows judged and locked in one batch.
const visitBatchRows = 64

// rangeDeleteMinCells: a visited row whose every cell is collectable goes
// by one range deletion when it holds at least this many cells; below it,
// point deletions cost readers and compactions less than a range tombstone.
const rangeDeleteMinCells = 8

func (c *Collector) stateOf(m *table.Meta, rules sweepRules) (*incState, *incState) {
	cur := &incState{rules: map[uint32]string{}, dropped: len(m.DroppedFamilies), skipV: rules.skipVersions, gen: c.eng.GCGeneration(m.ID)}
	for _, f := range m.Families {
		cur.rules[f.ID] = f.GC.String()
	}
	var held []uint32
	for id := range rules.held {
		held = append(held, id)
	}
	slices.Sort(held)
	for _, id := range held {
		cur.held += string(binary.BigEndian.AppendUint32(nil, id))
	}
	c.incMu.Lock()
	defer c.incMu.Unlock()
	return c.inc[m.ID], cur
}

// needsWhole says whether a table last passed in prev must be swept whole
// now that it stands as in cur.
func needsWhole(prev, cur *incState) bool {
	if prev == nil || prev.gen != cur.gen || prev.held != cur.held || cur.dropped > prev.dropped ||
		(prev.skipV && !cur.skipV) {
		return true
	}
	for id, r := range cur.rules {
		// A new family's cells were all written under its rule, and
		// marked by it.
		if old, ok := prev.rules[id]; ok && old != r {
			return true
		}
	}
	for id := range prev.rules {
		if _, ok := cur.rules[id]; !ok {
			return true // dropped
		}
	}
	return false
}

// passTable collects one table in a pass: incrementally when it can, whole
// when it must.
func (c *Collector) passTable(ctx context.Context, m *table.Meta) (tableResult, error) {
	now := clock.Micros(c.opts.Clock.Now())
	rules := sweepRules{skipVersions: !c.decidesVersions(), held: c.heldFamilies(m)}
	prev, cur := c.stateOf(m, rules)
	if !c.opts.AlwaysWhole && !needsWhole(prev, cur) {
		cur.rows = prev.rows
		var res tableResult
		plan, err := c.planVisits(ctx, m, prev, rules, now, &res)
		if err != nil {
			return res, err
		}
		if !plan.tooMany {
			res, err := c.visitRows(ctx, m, plan, rules, now, res.examined)
			if err != nil {
				return res, err
			}
			if err := c.finishTable(ctx, m, now, sweepAll, rules, &res); err != nil {
				return res, err
			}
			cur.judged = now
			c.setState(m.ID, cur)
			return res, nil
		}
	}
	res, err := c.sweepTableAt(ctx, m, sweepAll, rules, now)
	if err != nil {
		return res, err
	}
	if err := c.eng.SettleAgenda(m, now-table.AgendaSlack.Microseconds()); err != nil {
		return res, err
	}
	cur.rows, cur.judged = res.rows, now
	cur.dropped = 0 // the sweep forgot them
	c.setState(m.ID, cur)
	return res, nil
}

func (c *Collector) setState(id uint64, st *incState) {
	c.incMu.Lock()
	defer c.incMu.Unlock()
	c.inc[id] = st
}

// forgetStates drops the remembered state of tables that no longer exist.
func (c *Collector) forgetStates(live []*table.Meta) {
	ids := map[uint64]bool{}
	for _, m := range live {
		ids[m.ID] = true
	}
	c.incMu.Lock()
	defer c.incMu.Unlock()
	for id := range c.inc {
		if !ids[id] {
			delete(c.inc, id)
		}
	}
}

// visitPlan is the rows an incremental pass visits, in key order.
type visitPlan struct {
	rows [][]byte
	// dues are the agenda entries read for each row, deleted when it is
	// visited.
	dues       map[string][]int64
	fromAgenda int
	fromAge    int
	tooMany    bool
}

// planVisits lists the rows due on the agenda and those holding a cell that
// aged past a max age of its family since prev's pass.
func (c *Collector) planVisits(ctx context.Context, m *table.Meta, prev *incState, rules sweepRules, now int64, res *tableResult) (visitPlan, error) {
	p := visitPlan{dues: map[string][]int64{}}
	limit := int64(-1)
	if c.opts.WholeShare > 0 {
		limit = max(int64(c.opts.WholeShare*float64(prev.rows)), 64)
	}
	err := c.eng.AgendaDue(m, now+1, func(en table.AgendaEntry) bool {
		k := string(en.Row)
		if _, ok := p.dues[k]; !ok {
			p.rows = append(p.rows, []byte(k))
			if limit >= 0 && int64(len(p.rows)) > limit {
				p.tooMany = true
				return false
			}
		}
		p.dues[k] = append(p.dues[k], en.Due)
		return true
	})
	if err != nil || p.tooMany {
		return p, err
	}
	p.fromAgenda = len(p.rows)
	aged, err := c.agedRows(ctx, m, prev.judged, rules, now, p.dues, res)
	if err != nil {
		return p, err
	}
	p.fromAge = len(aged)
	p.rows = append(p.rows, aged...)
	if limit >= 0 && int64(len(p.rows)) > limit {
		p.tooMany = true
		return p, nil
	}
	sort.Slice(p.rows, func(i, j int) bool { return bytes.Compare(p.rows[i], p.rows[j]) < 0 })
	return p, nil
}

// ageWindow: cells of family fam with a timestamp in [lo, hi) aged past one
// of its max ages since the last pass.
type ageWindow struct {
	fam    uint32
	lo, hi int64
}

// agedRows returns the rows, not among seen, holding a cell that aged past
// one of its family's max ages between the pass at judged and now. Only
// the blocks whose timestamps meet a window are read. The windows reach
// AgendaSlack further back, for writes that committed late; a cell older
// than that when written was put on the agenda.
func (c *Collector) agedRows(ctx context.Context, m *table.Meta, judged int64, rules sweepRules, now int64, seen map[string][]int64, res *tableResult) ([][]byte, error) {
	var wins []ageWindow
	slack := table.AgendaSlack.Microseconds()
	for _, f := range m.Families {
		if rules.held[f.ID] {
			continue
		}
		for _, a := range table.RuleAges(f.GC) {
			w := ageWindow{fam: f.ID, lo: judged - a.Microseconds() - slack, hi: now - a.Microseconds() + 1}
			if w.hi > w.lo {
				wins = append(wins, w)
			}
		}
	}
	if len(wins) == 0 {
		return nil, nil
	}
	// One scan per run of overlapping windows.
	sorted := slices.Clone(wins)
	slices.SortFunc(sorted, func(a, b ageWindow) int { return cmp.Compare(a.lo, b.lo) })
	var spans [][2]int64
	for _, w := range sorted {
		if n := len(spans); n > 0 && w.lo <= spans[n-1][1] {
			spans[n-1][1] = max(spans[n-1][1], w.hi)
			continue
		}
		spans = append(spans, [2]int64{w.lo, w.hi})
	}
	var out [][]byte
	found := map[string]bool{}
	for _, s := range spans {
		rows, err := c.scanAged(ctx, m, s[0], s[1], wins, res)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			k := string(r)
			if _, ok := seen[k]; ok || found[k] {
				continue
			}
			found[k] = true
			out = append(out, r)
		}
	}
	return out, nil
}

// scanAged reads the table's blocks that may hold a timestamp in [lo, hi)
// and returns the rows with a cell inside one of the windows.
func (c *Collector) scanAged(ctx context.Context, m *table.Meta, lo, hi int64, wins []ageWindow, res *tableResult) ([][]byte, error) {
	it, err := c.eng.RawIterTimestamps(storage.TablePrefix(m.ID), storage.TableEnd(m.ID), lo, hi)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out [][]byte
	n := 0
	for valid := it.First(); valid; {
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			runtime.Gosched()
		}
		c.m.cellsExamined.Inc()
		res.examined++
		k := it.Key()
		rl := storage.RowKeyLen(k)
		if rl+4 > len(k)-storage.SuffixLen {
			return nil, storage.ErrCorruptKey
		}
		fam := binary.BigEndian.Uint32(k[rl:])
		ts := storage.DecodeSuffix(k[len(k)-storage.SuffixLen:])
		hit := slices.ContainsFunc(wins, func(w ageWindow) bool { return w.fam == fam && ts >= w.lo && ts < w.hi })
		if !hit {
			valid = it.Next()
			continue
		}
		row, err := storage.DecodeRowKey(k[:rl])
		if err != nil {
			return nil, err
		}
		out = append(out, row)
		valid = it.SeekGE(storage.PrefixEnd(k[:rl]))
	}
	return out, it.Error()
}

// visitRows judges and collects the planned rows in batches (planned: the
// cells examined finding them). The caller finishes the table.
func (c *Collector) visitRows(ctx context.Context, m *table.Meta, plan visitPlan, rules sweepRules, now int64, planned int64) (tableResult, error) {
	res := tableResult{incremental: true, visitedAgenda: plan.fromAgenda, visitedAged: plan.fromAge, examined: planned}
	var sc scratch
	// A progress display counts the rows the pass visits: their number is
	// known now, their cells are not.
	op := progress.FromContext(ctx)
	op.Recount("rows", int64(len(plan.rows)))
	for i := 0; i < len(plan.rows); {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		busy := time.Now()
		before := res.examined
		n, err := c.visitBatch(m, plan.rows[i:min(i+visitBatchRows, len(plan.rows))], plan.dues, rules, now, &res, &sc)
		c.m.cellsExamined.Add(float64(res.examined - before))
		if err != nil {
			return res, err
		}
		op.Add(int64(n))
		i += n
		if i < len(plan.rows) {
			if err := c.pace(ctx, busy); err != nil {
				return res, err
			}
		}
	}
	c.m.rowsVisited.WithLabelValues("agenda").Add(float64(plan.fromAgenda))
	c.m.rowsVisited.WithLabelValues("age").Add(float64(plan.fromAge))
	return res, nil
}

// visitBatch judges some of rows (at least one) under their locks and
// commits their deletions, and the deletion of their agenda entries, in one
// batch. It returns how many rows it took.
func (c *Collector) visitBatch(m *table.Meta, rows [][]byte, dues map[string][]int64, rules sweepRules, now int64, res *tableResult, sc *scratch) (int, error) {
	unlock := c.eng.LockRows(m.ID, rows)
	defer unlock()
	// One iterator, opened once the rows are locked, bounded to each row in
	// turn.
	it, err := c.eng.RawIter(nil, nil)
	if err != nil {
		return 0, err
	}
	defer it.Close()
	b := c.eng.NewDeleteBatch()
	defer b.Close()
	streaming := c.eng.Streaming(m.ID) // asked under the rows' locks
	var recs []changestream.Record
	done := sc.done[:0]
	defer func() { sc.done = done[:0] }()
	sync := c.eng.Visibility() == table.UntilCollected
	var lo, hi []byte
	var deleted int64
	used := 0
	for _, row := range rows {
		if used > 0 && len(done) >= c.opts.BatchCells {
			break
		}
		used++
		prefix := storage.RowPrefix(m.ID, row)
		if c.eng.RowPending(m.ID, row, prefix) {
			// Readers still see the row without a write in flight: judged
			// with it, a version they see could go. Its agenda entries
			// stay for the next pass.
			res.rowsInFlight++
			continue
		}
		end := storage.PrefixEnd(prefix)
		before := res.examined
		it.SetBounds(prefix, end)
		cands, _, err := c.scanIter(it, m, now, sweepAll, rules, res, sc)
		if err != nil {
			return 0, err
		}
		for _, d := range dues[string(row)] {
			if err := b.Delete(storage.AgendaKey(m.ID, d, row)); err != nil {
				return 0, err
			}
		}
		if len(cands) == 0 {
			continue
		}
		if int64(len(cands)) == res.examined-before && len(cands) >= rangeDeleteMinCells {
			if err := b.DeleteRange(prefix, end); err != nil {
				return 0, err
			}
			res.rangeDeleted += int64(len(cands))
		} else {
			for _, cd := range cands {
				if err := b.Delete(cd.key); err != nil {
					return 0, err
				}
			}
		}
		if streaming {
			r, err := gcRecords(m, cands)
			if err != nil {
				return 0, err
			}
			recs = append(recs, r...)
		}
		for _, cd := range cands {
			sync = sync || cd.reason == table.Versions // see deleteBatch
			deleted += cd.bytes
		}
		if lo == nil {
			lo = prefix
		}
		hi = end
		// The candidates' keys are reused by the next row's scan: only
		// their other fields are read from here on.
		done = append(done, cands...)
	}
	if err := c.eng.CommitSystem(b, m, rows[:used], recs, sync); err != nil {
		return 0, err
	}
	if len(done) > 0 {
		c.m.batches.Inc()
		c.tally(m, done, now, res)
		res.spans = append(res.spans, delSpan{lo: lo, hi: hi, bytes: deleted})
	}
	return used, nil
}

// pace waits between batches on the real clock: at least Pause, and long
// enough that the pass works at most a third of the time.
func (c *Collector) pace(ctx context.Context, busy time.Time) error {
	if c.opts.Pause <= 0 {
		return nil
	}
	t := time.NewTimer(max(c.opts.Pause, 2*time.Since(busy)))
	select {
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
