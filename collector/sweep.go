package collector

import (
	"bytes"
	"context"
	"encoding/binary"
	"runtime"
	"slices"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/progress"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

// sweepAll selects every family of a table in sweepTable.
const sweepAll = 0

// candidate is a cell found eligible in a scan, to be deleted under its row
// lock.
type candidate struct {
	key      []byte
	rowLen   int
	family   string
	reason   table.Reason
	bytes    int64
	exp      int64 // the expiry seen, re-checked for cell-ttl deletions
	eligible int64 // when it became eligible (micros), 0 if unknown
}

// tableResult is what one table's sweep found and did.
type tableResult struct {
	examined       int64
	collected      int64
	collectedBytes int64
	liveBytes      int64
	fullScan       bool
	// rows the sweep passed (a whole sweep: the table's rows).
	rows int64
	// incremental: the pass visited rows (visitedAgenda from the agenda,
	// visitedAged holding cells that aged since the last pass) instead of
	// sweeping the table whole.
	incremental   bool
	visitedAgenda int
	visitedAged   int
	// rangeDeleted counts cells deleted by whole-row range deletions.
	rangeDeleted int64
	// rowsInFlight counts rows left for the next pass because a write to
	// them was in flight (table.Engine.RowPending).
	rowsInFlight int64
	debtCells    int64
	debtBytes    int64
	debtOldest   time.Duration
	compaction   time.Duration
	// spans are the key spans of the committed deletion batches, in key
	// order, with the bytes each deleted: reclaim compacts the dense ones.
	spans []delSpan
	// reclaimedBytes is how much the data directory shrank across the
	// reclaim compactions, measured once Pebble deleted the files they made
	// obsolete; deletingBytes are obsolete files it had not deleted yet
	// (still read by open iterators, or past the wait). pendingBytes were
	// collected where deletions were too sparse (or too few) to compact
	// for, left to Pebble's own compactions.
	reclaimedBytes int64
	deletingBytes  int64
	pendingBytes   int64
	dropped        []uint32
	// leftToLeader counts versions-eligible cells this (non-leader)
	// cluster left for the GC leader; versionsFound counts every
	// versions-eligible cell found (collected or left).
	leftToLeader  int64
	versionsFound int64
	// duration is the table's sweep and reclaim on the collector's clock.
	duration time.Duration
}

// delSpan is the key span [lo, hi) of one deletion batch.
type delSpan struct {
	lo, hi []byte
	bytes  int64
}

// sweepTable collects one table (or one family of it) under the rules in m,
// at the time the sweep starts; with skipVersions it leaves versions-eligible
// cells to the GC leader.
func (c *Collector) sweepTable(ctx context.Context, m *table.Meta, onlyFamily uint32, skipVersions bool) (tableResult, error) {
	return c.sweepTableAt(ctx, m, onlyFamily, sweepRules{skipVersions: skipVersions, held: c.heldFamilies(m)}, clock.Micros(c.opts.Clock.Now()))
}

// sweepRules say which eligible cells a sweep leaves alone: versions-
// eligible ones on a cluster that is not the GC leader, age-eligible ones
// of families whose age sweeps are held (a coordinated raise).
type sweepRules struct {
	skipVersions bool
	held         map[uint32]bool
}

// sweepTableAt is sweepTable as if the sweep started at now (micros).
func (c *Collector) sweepTableAt(ctx context.Context, m *table.Meta, onlyFamily uint32, rules sweepRules, now int64) (tableResult, error) {
	res := tableResult{}
	res.fullScan = onlyFamily == sweepAll
	lo, hi := storage.TablePrefix(m.ID), storage.TableEnd(m.ID)
	// A whole sweep reads every cell. (A block-property filter cannot
	// find cells past their native expiry: Pebble's columnar SSTables hand
	// collectors no values, so expiries leave no trace in a property.
	// Incremental passes find those through the GC agenda, incremental.go.)
	var sc scratch
	cursor := lo
	for cursor != nil {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		before := res.examined
		busy := time.Now()
		cands, next, err := c.scanBatch(m, cursor, hi, now, onlyFamily, rules, &res, &sc)
		c.m.cellsExamined.Add(float64(res.examined - before))
		progress.FromContext(ctx).Add(res.examined - before)
		if err != nil {
			return res, err
		}
		if len(cands) > 0 {
			deleted := res.collectedBytes
			if err := c.deleteBatch(m, cands, now, &res, &sc); err != nil {
				return res, err
			}
			// The candidates' keys are reused by the next batch.
			if deleted = res.collectedBytes - deleted; deleted > 0 {
				res.spans = append(res.spans, delSpan{lo: bytes.Clone(cands[0].key),
					hi: storage.PrefixEnd(cands[len(cands)-1].key), bytes: deleted})
			}
		}
		cursor = next
		if cursor != nil {
			if c.betweenBatches != nil {
				c.betweenBatches()
			}
			if err := c.pace(ctx, busy); err != nil {
				return res, err
			}
		}
	}
	if res.fullScan {
		res.dropped = m.DroppedFamilies
	}
	if err := c.finishTable(ctx, m, now, onlyFamily, rules, &res); err != nil {
		return res, err
	}
	return res, nil
}

// finishTable ends a table's sweep or visits: it makes the deletions
// durable, reclaims their space where they are dense, forgets the dropped
// families swept and advances the age cutoffs.
func (c *Collector) finishTable(ctx context.Context, m *table.Meta, now int64, onlyFamily uint32, rules sweepRules, res *tableResult) error {
	if res.collected > 0 {
		// Deletions in the default visibility mode are committed without
		// an fsync; one now makes the whole pass durable before it
		// reports, so a crash cannot bring back what it says it removed.
		if err := c.eng.SyncWAL(); err != nil {
			return err
		}
	}
	if err := c.reclaimDense(ctx, res); err != nil {
		return err
	}
	if len(res.dropped) > 0 {
		if err := c.eng.ForgetDropped(m.Instance, m.Name, res.dropped); err != nil {
			return err
		}
	}
	return c.advanceAgeCutoffs(m, now, onlyFamily, rules.held)
}

// reclaimDenseShare: a deletion span is compacted when what it deleted is
// at least this share of its estimated disk size.
const reclaimDenseShare = 0.25

// reclaimEstimates bounds the disk-usage estimates a table's reclaim makes
// (each reads index blocks of the files at its bounds): the deletion spans
// are judged in at most this many groups of consecutive spans.
const reclaimEstimates = 32

// coarseSpans merges consecutive spans (in key order) into at most n groups.
func coarseSpans(spans []delSpan, n int) []delSpan {
	if len(spans) <= n {
		return spans
	}
	per := (len(spans) + n - 1) / n
	var out []delSpan
	for i := 0; i < len(spans); i += per {
		g := spans[i:min(i+per, len(spans))]
		d := delSpan{lo: g[0].lo, hi: g[len(g)-1].hi}
		for _, s := range g {
			d.bytes += s.bytes
		}
		out = append(out, d)
	}
	return out
}

// reclaimDense compacts the runs of dense deletion spans, so their space
// comes back within the pass; sparse spans (a few deletions among many
// live cells) are left to Pebble's compactions, which its tombstone-density
// heuristics schedule, and reported as pending. Deleted cells that lived
// only in the memtable make a span of no disk size, dense: compacting it
// flushes them.
func (c *Collector) reclaimDense(ctx context.Context, res *tableResult) error {
	if res.collected == 0 {
		return nil
	}
	if res.collectedBytes < c.opts.CompactMinBytes {
		res.pendingBytes = res.collectedBytes
		return nil
	}
	type run struct{ lo, hi []byte }
	var runs []run
	open := false // the last span was dense: a dense one extends its run
	for _, s := range coarseSpans(res.spans, reclaimEstimates) {
		disk, err := c.eng.EstimateDiskUsage(s.lo, s.hi)
		if err != nil {
			return err
		}
		if disk > 0 && float64(s.bytes) < reclaimDenseShare*float64(disk) {
			res.pendingBytes += s.bytes
			open = false
			continue
		}
		if open {
			runs[len(runs)-1].hi = s.hi
		} else {
			runs = append(runs, run{s.lo, s.hi})
		}
		open = true
	}
	if len(runs) == 0 {
		return nil
	}
	// The data directory's size, WAL included: deleted cells may have
	// lived only in the memtable and its WAL, which the compaction flushes.
	// It is measured once the files earlier work made obsolete are gone,
	// and again once those the reclaim made obsolete are (Pebble deletes
	// them in the background, after the compaction returns).
	before, err := c.eng.Settle(ctx, reclaimSettleMax)
	if err != nil {
		return err
	}
	t0 := time.Now()
	for _, r := range runs {
		if err := c.reclaim(ctx, r.lo, r.hi); err != nil {
			return err
		}
	}
	after, err := c.eng.Settle(ctx, reclaimSettleMax)
	res.compaction = time.Since(t0)
	if err != nil {
		return err
	}
	res.reclaimedBytes = max(int64(before.DirBytes)-int64(after.DirBytes), 0)
	// Files open reads still hold (whichever compaction made them
	// obsolete) come back when those reads end.
	res.deletingBytes = int64(after.Deleting + after.Zombie)
	return nil
}

// reclaimSettleMax bounds the wait for Pebble to delete the files a
// reclaim made obsolete (it usually takes milliseconds); what is left then
// is reported as still being deleted.
const reclaimSettleMax = 10 * time.Second

// reclaim compacts [start, end) so the space of what a pass deleted comes
// back, at the reclaim rate, or faster when the span would not be rewritten
// within half an interval at that rate.
func (c *Collector) reclaim(ctx context.Context, start, end []byte) error {
	rate := c.opts.ReclaimRate
	if rate > 0 {
		size, err := c.eng.EstimateDiskUsage(start, end)
		if err != nil {
			return err
		}
		if half := c.opts.Interval / 2; half > 0 {
			rate = max(rate, int64(float64(size)/half.Seconds()))
		}
	}
	return c.eng.CompactPaced(ctx, start, end, rate)
}

// scanBatch examines cells from cursor until a batch is full, stopping at a
// row boundary, and returns the eligible ones and where to go on from (nil
// when the table is done).
//
// rules.skipVersions (a cluster that is not the instance's GC leader) leaves
// cells a max-versions term made eligible for the leader, whose deletions
// arrive by replication; rules.held leaves the age-eligible cells of
// families whose age sweeps are held. sc holds memory reused across batches.
func (c *Collector) scanBatch(m *table.Meta, cursor, hi []byte, now int64, onlyFamily uint32, rules sweepRules, res *tableResult, sc *scratch) ([]candidate, []byte, error) {
	it, err := c.eng.RawIter(cursor, hi)
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	return c.scanIter(it, m, now, onlyFamily, rules, res, sc)
}

// scanIter is scanBatch over an iterator already bounded to its span (a
// visit reuses one iterator for the rows of its batch).
func (c *Collector) scanIter(it *table.RawIter, m *table.Meta, now int64, onlyFamily uint32, rules sweepRules, res *tableResult, sc *scratch) ([]candidate, []byte, error) {
	var (
		cands    = sc.cands[:0]
		examined int
		rowKey   = sc.rowKey[:0]
		// The column being gathered. Its versions differ only in their
		// suffix, so only the timestamps are kept; a candidate's key is
		// rebuilt from colPrefix and its timestamp.
		colPrefix = sc.colPrefix[:0]
		colFam    *table.Family
		colFamID  uint32
		gathered  int
		sizes     = sc.sizes[:0]
		ts, exp   = sc.ts[:0], sc.exp[:0]
		reasons   = sc.reasons[:0]
		rowLen    int
		arena     = sc.arena[:0]
	)
	defer func() {
		sc.cands, sc.rowKey, sc.colPrefix, sc.sizes, sc.ts, sc.exp, sc.reasons, sc.arena = cands, rowKey, colPrefix, sizes, ts, exp, reasons, arena
	}()
	// Candidate keys are carved from a chunk reused batch after batch.
	keyOf := func(t int64) []byte {
		n := len(colPrefix) + storage.SuffixLen
		if cap(arena)-len(arena) < n {
			// Keys already handed out keep the old chunk alive.
			arena = make([]byte, 0, max(2*cap(arena), n, 4<<10))
		}
		start := len(arena)
		arena = storage.AppendSuffix(append(arena, colPrefix...), t)
		return arena[start:len(arena):len(arena)]
	}
	flush := func() {
		if gathered == 0 {
			return
		}
		if colFam == nil {
			for i := range ts {
				cands = append(cands, candidate{key: keyOf(ts[i]), rowLen: rowLen, reason: table.Dropped, bytes: sizes[i]})
			}
		} else {
			reasons = table.ColumnEligibility(colFam.GC, ts, exp, now, reasons)
			for i, r := range reasons {
				if r == table.Keep {
					res.liveBytes += sizes[i]
					continue
				}
				if r == table.Versions {
					res.versionsFound++
				}
				if r == table.Versions && rules.skipVersions {
					res.leftToLeader++
					continue
				}
				if r == table.Age && rules.held[colFamID] {
					continue // the family's age sweeps are held
				}
				cands = append(cands, candidate{key: keyOf(ts[i]), rowLen: rowLen, family: colFam.Name, reason: r,
					bytes: sizes[i], exp: exp[i], eligible: eligibleSince(colFam.GC, r, ts[i], exp[i])})
			}
		}
		gathered, sizes, ts, exp = 0, sizes[:0], ts[:0], exp[:0]
	}
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		n := storage.RowKeyLen(k)
		if rowKey == nil || !bytes.Equal(rowKey, k[:n]) {
			flush()
			colPrefix = colPrefix[:0]
			if examined >= c.opts.ScanCells || len(cands) >= c.opts.BatchCells {
				return cands, bytes.Clone(k[:n]), it.Error()
			}
			rowKey = append(rowKey[:0], k[:n]...)
			rowLen = n
			res.rows++
		}
		examined++
		res.examined++
		if examined%32 == 0 {
			// Let waiting foreground goroutines onto the processor: a pass
			// is background work and must not hold a core for a whole batch.
			// 32 cells take about 10µs; every 256 (about 80µs) showed in the
			// reads' p99 while a versions pass scanned.
			runtime.Gosched()
		}
		ck := k[:len(k)-storage.SuffixLen]
		if !bytes.Equal(ck, colPrefix) {
			flush()
			colPrefix = append(colPrefix[:0], ck...)
			if len(ck) < n+4 {
				return nil, nil, storage.ErrCorruptKey
			}
			colFamID = binary.BigEndian.Uint32(ck[n:])
			colFam, _ = m.FamilyByID(colFamID)
		}
		if onlyFamily != sweepAll && colFamID != onlyFamily {
			continue
		}
		if colFam == nil && onlyFamily == sweepAll && !isDropped(m, colFamID) {
			// A family created after this pass read the schema.
			continue
		}
		v, err := it.Value()
		if err != nil {
			return nil, nil, err
		}
		gathered++
		sizes = append(sizes, int64(len(k)+len(v)))
		ts = append(ts, storage.DecodeSuffix(k[len(k)-storage.SuffixLen:]))
		exp = append(exp, storage.ValueExpiry(v))
	}
	flush()
	return cands, nil, it.Error()
}

// scratch is the memory a pass reuses from batch to batch. A batch's
// candidates, and the keys they point into, are valid only until the next
// batch is scanned. A pass that allocated per examined or deleted cell makes
// the Go collector run often, and its mark worker takes one of a small
// machine's processors from foreground reads: the cost measured in the age
// case of BenchmarkGCPass, where every examined cell is deleted.
type scratch struct {
	cands          []candidate
	rowKey         []byte
	colPrefix      []byte
	sizes, ts, exp []int64
	reasons        []table.Reason
	arena          []byte
	done           []candidate
	rows           [][]byte
}

func isDropped(m *table.Meta, id uint32) bool {
	for _, d := range m.DroppedFamilies {
		if d == id {
			return true
		}
	}
	return false
}

// eligibleSince estimates when a cell became collectable, for the debt
// gauge: its expiry, or its timestamp plus the rule's shortest max age.
func eligibleSince(rule gcrule.Rule, r table.Reason, ts, exp int64) int64 {
	switch r {
	case table.TTL:
		return exp
	case table.Age:
		if a := rule.MinMaxAge(); a > 0 {
			return ts + a.Microseconds()
		}
	}
	return 0
}

// deleteBatch deletes candidates under their rows' locks in one batch.
// A cell-ttl candidate is deleted only if the cell still carries the expiry
// seen in the scan: a writer may have replaced it since.
func (c *Collector) deleteBatch(m *table.Meta, cands []candidate, now int64, res *tableResult, sc *scratch) error {
	rows := sc.rows[:0]
	defer func() { sc.rows = rows[:0] }()
	var last []byte
	for _, cd := range cands {
		if last == nil || !bytes.Equal(last, cd.key[:cd.rowLen]) {
			last = cd.key[:cd.rowLen]
			rk, err := storage.DecodeRowKey(last)
			if err != nil {
				return err
			}
			rows = append(rows, rk)
		}
	}
	unlock := c.eng.LockRows(m.ID, rows)
	defer unlock()
	b := c.eng.NewDeleteBatch()
	defer b.Close()
	done := sc.done[:0]
	defer func() { sc.done = done[:0] }()
	var pendingRow []byte // the last row found with a write in flight
	last = nil
	for _, cd := range cands {
		if prefix := cd.key[:cd.rowLen]; last == nil || !bytes.Equal(last, prefix) {
			last, pendingRow = prefix, nil
			rk, err := storage.DecodeRowKey(prefix)
			if err != nil {
				return err
			}
			if c.eng.RowPending(m.ID, rk, prefix) {
				// See visitBatch: the row waits for the next pass.
				pendingRow = prefix
				res.rowsInFlight++
			}
		}
		if pendingRow != nil {
			continue
		}
		if cd.reason == table.TTL {
			var same bool
			found, err := c.eng.RawGet(cd.key, func(v []byte) { same = storage.ValueExpiry(v) == cd.exp })
			if err != nil {
				return err
			}
			if !found || !same {
				continue
			}
		}
		if err := b.Delete(cd.key); err != nil {
			return err
		}
		done = append(done, cd)
	}
	if len(done) == 0 {
		return nil
	}
	var recs []changestream.Record
	if c.eng.Streaming(m.ID) { // asked under the rows' locks
		var err error
		if recs, err = gcRecords(m, done); err != nil {
			return err
		}
	}
	// In until-collected mode a deletion lost in a crash would make a
	// collected cell readable again, so it is synced like any write. In the
	// default mode readers never see an eligible cell, so a lost deletion
	// (with its change-stream records, which share the batch) is only found
	// again by the next pass: no fsync needed, as long as the cell stays
	// eligible. Age and TTL eligibility only grow with time, but a version
	// position counts only unexpired cells: once a newer version's native
	// expiry passes, a cell collected for its position is readable again,
	// and a crash that lost its deletion would bring back what readers saw
	// gone. A batch with such a deletion is synced.
	sync := c.eng.Visibility() == table.UntilCollected ||
		slices.ContainsFunc(done, func(cd candidate) bool { return cd.reason == table.Versions })
	if err := c.eng.CommitSystem(b, m, rows, recs, sync); err != nil {
		return err
	}
	c.m.batches.Inc()
	c.tally(m, done, now, res)
	return nil
}

// tally adds committed deletions to the pass's result and the metrics. It
// reads the candidates' families, reasons, sizes and eligibility, not their
// keys.
func (c *Collector) tally(m *table.Meta, done []candidate, now int64, res *tableResult) {
	// The metrics are added per family and reason once a batch, not looked
	// up twice for every cell.
	type group struct {
		family string
		reason table.Reason
	}
	var groups []group
	var cells, sizes []int64
	for _, cd := range done {
		res.collected++
		res.collectedBytes += cd.bytes
		i := len(groups) - 1
		if i < 0 || groups[i] != (group{cd.family, cd.reason}) {
			i = slices.Index(groups, group{cd.family, cd.reason})
			if i < 0 {
				groups, cells, sizes = append(groups, group{cd.family, cd.reason}), append(cells, 0), append(sizes, 0)
				i = len(groups) - 1
			}
		}
		cells[i]++
		sizes[i] += cd.bytes
		res.debtCells++
		res.debtBytes += cd.bytes
		if cd.eligible > 0 && cd.eligible < now {
			if age := time.Duration(now-cd.eligible) * time.Microsecond; age > res.debtOldest {
				res.debtOldest = age
			}
		}
	}
	for i, g := range groups {
		c.m.cellsCollected.WithLabelValues(m.Instance, m.Name, g.family, g.reason.String()).Add(float64(cells[i]))
		c.m.bytesCollected.WithLabelValues(m.Instance, m.Name, g.family, g.reason.String()).Add(float64(sizes[i]))
	}
}

// gcReason is the change-stream reason of a collection.
func gcReason(r table.Reason) string {
	switch r {
	case table.Age:
		return changestream.ReasonGCAge
	case table.Versions:
		return changestream.ReasonGCVersions
	case table.TTL:
		return changestream.ReasonCellTTL
	}
	return changestream.ReasonDropped
}

// gcRecords describes deleted candidates (in key order) as change-stream
// records: one per row and reason, each cell a DeleteFromColumn over its
// millisecond.
func gcRecords(m *table.Meta, done []candidate) ([]changestream.Record, error) {
	var recs []changestream.Record
	idx := map[string]int{} // row + reason → index in recs
	for _, cd := range done {
		d, err := storage.DecodeCellKey(cd.key)
		if err != nil {
			return nil, err
		}
		reason := gcReason(cd.reason)
		k := string(cd.key[:cd.rowLen]) + "\x00" + reason
		i, ok := idx[k]
		if !ok {
			i = len(recs)
			idx[k] = i
			recs = append(recs, changestream.Record{Type: changestream.GarbageCollection, Reason: reason,
				TransactionTag: changestream.TagGarbageCollection, IsSystem: true, RowKey: d.Row})
		}
		fam := m.DroppedNames[d.FamilyID]
		if f, ok := m.FamilyByID(d.FamilyID); ok {
			fam = f.Name
		}
		recs[i].Mods = append(recs[i].Mods, changestream.Mod{Kind: changestream.DeleteFromColumn, Family: fam,
			Qualifier: d.Qualifier, StartTS: d.Timestamp, EndTS: d.Timestamp + 1000})
	}
	return recs, nil
}
