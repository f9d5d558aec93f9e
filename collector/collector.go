package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/progress"
	"github.com/ebbtable/ebbtable/schedule"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configures a Collector.
type Options struct {
	// Interval between pass starts. The cadence is fixed: it does not
	// depend on how much there is to delete. Default 1m.
	Interval time.Duration
	// BatchCells caps the deletions committed in one batch. Default
	// DefaultBatchCells.
	BatchCells int
	// ScanCells caps the cells examined before a batch is cut (at a row
	// boundary). Default DefaultScanCells.
	ScanCells int
	// Pause between batches, so foreground work gets the machine. It is
	// measured on the real clock (pacing shares the machine now; the
	// injected clock decides only what is eligible). Default 1ms; a
	// negative value means no pause.
	Pause time.Duration
	// CompactMinBytes: after a table's pass deleted at least this many
	// bytes, the deleted span is compacted so the disk space comes back.
	// Default 1 MiB.
	CompactMinBytes int64
	// ReclaimRate caps how fast that compaction writes, in bytes per
	// second, so it runs in short bursts beside foreground reads rather than
	// at full speed; it is raised as far as needed to rewrite the span in
	// half an interval, so the space still comes back within the promised
	// two. Default DefaultReclaimRate; negative means unpaced.
	ReclaimRate int64
	// WholeShare: an incremental pass sweeps a table whole instead when
	// more than this share of its rows are due (visiting rows one by one
	// then costs more than streaming the table). Default 0.25; negative:
	// never for that reason.
	WholeShare float64
	// AlwaysWhole sweeps every table whole on every pass (the behaviour
	// before incremental passes; a baseline for tests and benchmarks).
	AlwaysWhole bool
	// MaxBackoff caps the wait after failed passes. Default 10m.
	MaxBackoff time.Duration
	// DecidesVersions says whether this cluster is its instance's GC
	// leader, the one cluster that collects cells a max-versions term made
	// eligible (its deletions replicate to the others). Asked once per
	// table sweep; nil means always (a single cluster).
	DecidesVersions func() bool
	Clock           clock.Clock
	Logger          *slog.Logger
	// Registerer receives the metrics; nil means they are not exported.
	Registerer prometheus.Registerer
}

// The default batch sizes. A batch's deletions are committed without a
// break, so they are kept few: 250 deletions commit in well under a
// millisecond. In BenchmarkGCPass's age case, where every examined cell is
// deleted, the reads' p99 while the pass scanned fell from about 1.3× idle
// with batches of 1,000 to about 1.1× with 256.
const (
	DefaultBatchCells = 250
	DefaultScanCells  = 2000
)

// DefaultReclaimRate paces the compaction after a pass. At full speed it
// took about half a second of a core to rewrite BenchmarkGCPass's 13 MB
// table, and reads beside it had about twice their idle p99; written at
// 4 MiB/s it takes about 2.7 s in short bursts, and the reads' p99
// meanwhile was about idle's.
const DefaultReclaimRate = 4 << 20

// EnsureDefaults fills unset options.
func (o *Options) EnsureDefaults() {
	if o.Interval == 0 {
		o.Interval = time.Minute
	}
	if o.BatchCells == 0 {
		o.BatchCells = DefaultBatchCells
	}
	if o.ScanCells == 0 {
		o.ScanCells = DefaultScanCells
	}
	if o.Pause == 0 {
		o.Pause = time.Millisecond
	}
	if o.CompactMinBytes == 0 {
		o.CompactMinBytes = 1 << 20
	}
	if o.ReclaimRate == 0 {
		o.ReclaimRate = DefaultReclaimRate
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 10 * time.Minute
	}
	if o.WholeShare == 0 {
		o.WholeShare = 0.25
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	if o.Interval < 0 || o.BatchCells < 0 || o.ScanCells < 0 {
		return fmt.Errorf("%w: collector interval and batch sizes must not be negative", table.ErrInvalid)
	}
	return nil
}

// Collector runs garbage collection over every table of an engine.
type Collector struct {
	eng  Engine
	opts Options
	log  *slog.Logger
	m    *metrics

	passMu sync.Mutex // one pass at a time
	// betweenBatches, set by tests, runs between a whole sweep's batches.
	betweenBatches func()

	holdMu sync.Mutex
	holds  map[holdKey]bool // families whose age sweeps are held
	cutMu  sync.Mutex       // age cutoff updates

	pileMu    sync.Mutex
	piles     map[uint64]map[string]time.Time // table id → row → reported (piles.go)
	pileCount int
	pileSeen  pileSeen // rows in piles, answered without pileMu (piles.go)

	incMu sync.Mutex
	inc   map[uint64]*incState // per table id, see incremental.go

	statusMu sync.Mutex
	status   map[uint64]*TableStatus
	lastPass PassStats

	loop      *schedule.Loop
	nextPass  atomic.Int64 // unix nanoseconds of the next scheduled pass; 0: none
	pilesLoop *schedule.Loop
}

// New builds a collector for eng. Call Start to run it in the background.
func New(eng Engine, opts Options) (*Collector, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := &Collector{
		eng:    eng,
		opts:   opts,
		log:    opts.Logger,
		m:      newMetrics(opts.Registerer),
		status: map[uint64]*TableStatus{},
		inc:    map[uint64]*incState{},
		piles:  map[uint64]map[string]time.Time{},
	}
	registerScheduleMetrics(opts.Registerer, c)
	eng.SetPileHook(c.notePile)
	return c, nil
}

// Interval is the configured pass cadence.
func (c *Collector) Interval() time.Duration { return c.opts.Interval }

// Start runs passes in the background every Interval until Stop.
func (c *Collector) Start() {
	c.loop = schedule.Start(schedule.Options{
		Name: "gc pass", Interval: c.opts.Interval, MaxBackoff: c.opts.MaxBackoff,
		Clock: c.opts.Clock, Logger: c.log, OnFailure: c.m.failures.Inc, Scheduled: c.setNextPass,
	}, func(ctx context.Context) error {
		_, err := c.RunPass(ctx, Selector{})
		return err
	})
	c.pilesLoop = c.startPiles()
}

// Stop ends the background loop, interrupting a running pass between
// batches, and waits for it.
func (c *Collector) Stop() {
	c.loop.Stop()
	c.pilesLoop.Stop()
	c.loop, c.pilesLoop = nil, nil
}

// Selector picks the tables of a pass; empty fields match everything.
type Selector struct {
	Instance string
	Table    string
}

func (s Selector) match(m *table.Meta) bool {
	return (s.Instance == "" || s.Instance == m.Instance) && (s.Table == "" || s.Table == m.Name)
}

// PassStats sums up one pass.
type PassStats struct {
	Tables         int
	Examined       int64
	Collected      int64
	CollectedBytes int64
	Started        time.Time
	Duration       time.Duration
	// Compaction is the wall time spent having Pebble compact collected
	// spans (part of Duration; measured on the real clock).
	Compaction time.Duration
	// Sweep is the real time spent examining and deleting cells (the
	// pass's real time less Compaction).
	Sweep time.Duration
	// ReclaimedBytes is how much the data directory shrank across the
	// reclaim compactions, once Pebble deleted the files they made
	// obsolete; ReclaimDeletingBytes is what it had not deleted yet (files
	// open reads still hold, deleted when those reads end).
	ReclaimedBytes       int64
	ReclaimDeletingBytes int64
	// ReclaimLeft counts tables with deletions left to Pebble's own
	// compactions: too few (under Options.CompactMinBytes) or too sparse
	// to compact for.
	ReclaimLeft int
	// ReclaimPendingBytes sums those tables' bytes left to Pebble.
	ReclaimPendingBytes int64
	// Incremental counts the tables passed by visiting rows rather than
	// sweeping whole, VisitedRows the rows they visited.
	Incremental int
	VisitedRows int64
}

// RunPass runs one pass now over the selected tables and returns when it is
// done. Passes never overlap.
func (c *Collector) RunPass(ctx context.Context, sel Selector) (st PassStats, err error) {
	c.passMu.Lock()
	defer c.passMu.Unlock()
	st = PassStats{Started: c.opts.Clock.Now()}
	tables := c.eng.Tables(sel.Instance)
	if sel.Table != "" && len(tablesMatching(tables, sel)) == 0 {
		return st, fmt.Errorf("%w: %s", table.ErrTableNotFound, sel.Table)
	}
	var errs []error
	realStart := time.Now()
	defer func() { st.Sweep = max(time.Since(realStart)-st.Compaction, 0) }()
	matching := tablesMatching(tables, sel)
	for i, m := range matching {
		progress.FromContext(ctx).Phase(fmt.Sprintf("table %s (%d/%d)", m.Name, i+1, len(matching)), "cells", c.examinedEstimate(m.ID))
		t0 := c.opts.Clock.Now()
		res, err := c.passTable(ctx, m)
		res.duration = c.opts.Clock.Now().Sub(t0)
		st.Tables++
		st.Examined += res.examined
		st.Collected += res.collected
		st.CollectedBytes += res.collectedBytes
		st.Compaction += res.compaction
		st.ReclaimedBytes += res.reclaimedBytes
		st.ReclaimDeletingBytes += res.deletingBytes
		if res.pendingBytes > 0 {
			st.ReclaimLeft++
			st.ReclaimPendingBytes += res.pendingBytes
		}
		if res.incremental {
			st.Incremental++
			st.VisitedRows += int64(res.visitedAgenda + res.visitedAged)
		}
		if err != nil {
			if ctx.Err() != nil {
				return st, ctx.Err()
			}
			errs = append(errs, fmt.Errorf("table %s: %w", m.Name, err))
			continue
		}
		c.record(m, res)
		if err := c.trimChanges(m); err != nil {
			errs = append(errs, fmt.Errorf("table %s: change stream retention: %w", m.Name, err))
		}
	}
	st.Duration = c.opts.Clock.Now().Sub(st.Started)
	if sel.Table == "" && sel.Instance == "" {
		c.forgetStates(tables)
	}
	if len(errs) > 0 {
		return st, errors.Join(errs...)
	}
	if sel.Table == "" {
		c.m.passDuration.Observe(st.Duration.Seconds())
		c.m.lastPass.Set(float64(c.opts.Clock.Now().UnixNano()) / 1e9)
		c.statusMu.Lock()
		c.lastPass = st
		c.statusMu.Unlock()
	}
	return st, nil
}

func tablesMatching(ms []*table.Meta, sel Selector) []*table.Meta {
	var out []*table.Meta
	for _, m := range ms {
		if sel.match(m) {
			out = append(out, m)
		}
	}
	return out
}

// BeforeRuleChange is the engine's schema hook: in the default visibility
// mode, a family is swept under its old rule before the rule changes, so
// loosening a rule never brings back a cell readers could not see.
//
// Only a change that would keep some cell the old rule makes eligible needs
// this (gcrule.Looser); a stricter change takes effect at once.
//
// The engine runs the hook only for changes made on this cluster, and the
// sweep collects versions-eligible cells too, even on a cluster that is not
// the GC leader: the cluster that loosens the rule decides those deletions
// once, and they replicate like the leader's (docs/replication.md, "GC across clusters").
func (c *Collector) BeforeRuleChange(old *table.Meta, f table.Family, next gcrule.Rule) error {
	if c.eng.Visibility() == table.UntilCollected || !gcrule.Looser(f.GC, next) {
		return nil
	}
	_, err := c.sweepTable(context.Background(), old, f.ID, false)
	return err
}

// RuleChangeGate is the engine's schema gate (table.SchemaGate): a rule
// change waits for the pass in progress and keeps the next from starting
// until it has landed, so no pass judges a table by a rule that changed
// under it (it could collect a version the new rule keeps visible). The
// schema hook, BeforeRuleChange, runs under it.
func (c *Collector) RuleChangeGate() (release func()) {
	c.passMu.Lock()
	return c.passMu.Unlock
}

// trimChanges drops a table's change-stream records older than its
// retention. While the engine replicates, every table keeps its records
// for at least table.ReplicationRetention, for peers to pull.
func (c *Collector) trimChanges(m *table.Meta) error {
	var keep time.Duration
	if m.ChangeStream != nil {
		keep = m.ChangeStream.Retention
	}
	if _, ok := c.eng.Replicating(); ok {
		keep = max(keep, table.ReplicationRetention)
	}
	if keep == 0 {
		return nil
	}
	cutoff := clock.Micros(c.opts.Clock.Now()) - keep.Microseconds()
	n, err := c.eng.TrimChanges(m, cutoff)
	if err != nil {
		return err
	}
	c.m.recordsExpired.WithLabelValues(m.Instance, m.Name).Add(float64(n))
	return nil
}
