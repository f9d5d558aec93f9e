package collector

import (
	"context"
	"fmt"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

// TableStatus is what the last pass over a table found and did.
type TableStatus struct {
	Instance       string
	Table          string
	LastPass       time.Time
	Examined       int64
	Collected      int64
	CollectedBytes int64
	// Debt: what the last pass found eligible and not yet collected (and
	// then collected), and how long the oldest had been eligible. Live
	// debt comes from DebtOf.
	DebtCells  int64
	DebtBytes  int64
	DebtOldest time.Duration
	// LogicalBytes of live cells as of the last full scan (0 if none yet).
	LogicalBytes int64
	DiskBytes    int64
	// ReclaimedBytes: disk freed by the last pass's compaction.
	// ReclaimPendingBytes: bytes the last pass collected without
	// compacting (too few to be worth it; Pebble's compactions free them).
	// ReclaimDeletingBytes: files the compaction made obsolete that were
	// not deleted yet when the pass ended (still read by open iterators:
	// they go when those reads end).
	ReclaimedBytes       int64
	ReclaimPendingBytes  int64
	ReclaimDeletingBytes int64
	// Incremental: the last pass visited rows (VisitedRows of them)
	// instead of sweeping the table whole.
	Incremental bool
	VisitedRows int64
	// AgendaDue and AgendaLater count the GC agenda's entries after the
	// last pass: due now (the next pass visits their rows) and due later
	// (native expiries ahead). Counted up to agendaCountLimit each.
	AgendaDue, AgendaLater int
	// HiddenVersions: versions-eligible cells the last pass found.
	HiddenVersions int64
}

// agendaCountLimit bounds the agenda entries counted for the status.
const agendaCountLimit = 100_000

func (c *Collector) record(m *table.Meta, res tableResult) {
	disk, _ := c.eng.EstimateDiskUsage(storage.TablePrefix(m.ID), storage.TableEnd(m.ID))
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	st := c.status[m.ID]
	if st == nil {
		st = &TableStatus{}
		c.status[m.ID] = st
	}
	st.Instance, st.Table = m.Instance, m.Name
	st.LastPass = c.opts.Clock.Now()
	st.Examined, st.Collected, st.CollectedBytes = res.examined, res.collected, res.collectedBytes
	st.DebtCells, st.DebtBytes, st.DebtOldest = res.debtCells, res.debtBytes, res.debtOldest
	if res.fullScan {
		st.LogicalBytes = res.liveBytes
		c.m.logicalBytes.WithLabelValues(m.Instance, m.Name).Set(float64(res.liveBytes))
	}
	st.DiskBytes = int64(disk)
	st.ReclaimedBytes, st.ReclaimPendingBytes, st.ReclaimDeletingBytes = res.reclaimedBytes, res.pendingBytes, res.deletingBytes
	st.Incremental, st.VisitedRows = res.incremental, int64(res.visitedAgenda+res.visitedAged)
	st.HiddenVersions = res.versionsFound
	if due, later, err := c.eng.AgendaCounts(m, clock.Micros(c.opts.Clock.Now()), agendaCountLimit); err == nil {
		st.AgendaDue, st.AgendaLater = due, later
	}
	kind := "whole"
	if res.incremental {
		kind = "incremental"
	}
	c.m.tablePasses.WithLabelValues(kind).Inc()
	c.m.rangeDeleted.Add(float64(res.rangeDeleted))
	c.m.agendaRows.WithLabelValues(m.Instance, m.Name, "now").Set(float64(st.AgendaDue))
	c.m.agendaRows.WithLabelValues(m.Instance, m.Name, "later").Set(float64(st.AgendaLater))
	c.m.hiddenVersions.WithLabelValues(m.Instance, m.Name).Set(float64(st.HiddenVersions))
	c.m.reclaimPending.WithLabelValues(m.Instance, m.Name).Set(float64(st.ReclaimPendingBytes))
	c.m.reclaimed.WithLabelValues(m.Instance, m.Name).Add(float64(res.reclaimedBytes))
	c.m.debtCells.WithLabelValues(m.Instance, m.Name).Set(float64(res.debtCells))
	c.m.debtBytes.WithLabelValues(m.Instance, m.Name).Set(float64(res.debtBytes))
	c.m.debtOldest.WithLabelValues(m.Instance, m.Name).Set(res.debtOldest.Seconds())
	c.m.diskBytes.WithLabelValues(m.Instance, m.Name).Set(float64(disk))
	c.m.tablePass.WithLabelValues(m.Instance, m.Name).Set(res.duration.Seconds())
}

// Status returns the last pass's figures for every table that still exists.
func (c *Collector) Status(instance string) ([]TableStatus, PassStats) {
	tables := c.eng.Tables(instance)
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	var out []TableStatus
	for _, m := range tables {
		st, ok := c.status[m.ID]
		if !ok {
			out = append(out, TableStatus{Instance: m.Instance, Table: m.Name})
			continue
		}
		out = append(out, *st)
	}
	return out, c.lastPass
}

// Debt is what is eligible for collection but not yet collected.
type Debt struct {
	Cells, Bytes int64
	// Oldest is how long the longest-waiting eligible cell has been
	// eligible (0 when only version-count eligibility is waiting: the
	// moment a newer version displaced a cell is not recorded).
	Oldest time.Duration
	// Partial: the scan stopped at debtScanLimit cells examined, so the
	// figures are what that part of the table holds (a lower bound).
	Partial bool
}

// debtScanLimit bounds the cells one DebtOf examines: gc status asks for
// every table on every call, and must not cost a whole sweep of a large
// one. Tests lower it.
var debtScanLimit int64 = 250_000

// DebtOf scans a table, changing nothing, and returns its expiry debt now,
// from at most debtScanLimit cells (Partial when it stopped there). The
// gauges are updated with a whole table's debt only.
func (c *Collector) DebtOf(ctx context.Context, m *table.Meta) (Debt, error) {
	now := clock.Micros(c.opts.Clock.Now())
	var d Debt
	var res tableResult
	cursor, hi := storage.TablePrefix(m.ID), storage.TableEnd(m.ID)
	var sc scratch
	for cursor != nil {
		if err := ctx.Err(); err != nil {
			return d, err
		}
		if res.examined >= debtScanLimit {
			d.Partial = true
			return d, nil
		}
		cands, next, err := c.scanBatch(m, cursor, hi, now, sweepAll, sweepRules{}, &res, &sc)
		if err != nil {
			return d, err
		}
		for _, cd := range cands {
			d.Cells++
			d.Bytes += cd.bytes
			if cd.eligible > 0 && cd.eligible < now {
				d.Oldest = max(d.Oldest, time.Duration(now-cd.eligible)*time.Microsecond)
			}
		}
		cursor = next
	}
	c.m.debtCells.WithLabelValues(m.Instance, m.Name).Set(float64(d.Cells))
	c.m.debtBytes.WithLabelValues(m.Instance, m.Name).Set(float64(d.Bytes))
	c.m.debtOldest.WithLabelValues(m.Instance, m.Name).Set(d.Oldest.Seconds())
	return d, nil
}

// PlanResult is a dry run's answer: what a rule would make eligible now.
type PlanResult struct {
	Cells, Bytes int64
	// Currently* is what the family's present rule makes eligible now.
	CurrentlyCells, CurrentlyBytes int64
	Examined                       int64
}

// Plan counts the cells and bytes of one family that rule would make
// eligible if applied now, changing nothing.
func (c *Collector) Plan(ctx context.Context, instance, name, family string, rule gcrule.Rule) (PlanResult, error) {
	var pr PlanResult
	if err := rule.Validate(); err != nil {
		return pr, fmt.Errorf("%w: %w", table.ErrInvalid, err)
	}
	m, err := c.eng.Table(instance, name)
	if err != nil {
		return pr, err
	}
	f, ok := m.Family(family)
	if !ok {
		return pr, fmt.Errorf("%w: %q in table %s", table.ErrFamilyNotFound, family, name)
	}
	now := clock.Micros(c.opts.Clock.Now())
	it, err := c.eng.RawIter(storage.TablePrefix(m.ID), storage.TableEnd(m.ID))
	if err != nil {
		return pr, err
	}
	defer it.Close()
	var colPrefix []byte
	var ts, exp, sizes []int64
	var reasons []table.Reason
	flush := func() {
		if len(ts) == 0 {
			return
		}
		reasons = table.ColumnEligibility(rule, ts, exp, now, reasons)
		for i, r := range reasons {
			if r != table.Keep {
				pr.Cells++
				pr.Bytes += sizes[i]
			}
		}
		reasons = table.ColumnEligibility(f.GC, ts, exp, now, reasons)
		for i, r := range reasons {
			if r != table.Keep {
				pr.CurrentlyCells++
				pr.CurrentlyBytes += sizes[i]
			}
		}
		ts, exp, sizes = ts[:0], exp[:0], sizes[:0]
	}
	for valid := it.First(); valid; valid = it.Next() {
		if pr.Examined%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return pr, err
			}
		}
		k := it.Key()
		d, err := storage.DecodeCellKey(k)
		if err != nil {
			return pr, err
		}
		if d.FamilyID != f.ID {
			continue
		}
		pr.Examined++
		ck := k[:len(k)-storage.SuffixLen]
		if string(ck) != string(colPrefix) {
			flush()
			colPrefix = append(colPrefix[:0], ck...)
		}
		v, err := it.Value()
		if err != nil {
			return pr, err
		}
		ts = append(ts, d.Timestamp)
		exp = append(exp, storage.ValueExpiry(v))
		sizes = append(sizes, int64(len(k)+len(v)))
	}
	flush()
	return pr, it.Error()
}
