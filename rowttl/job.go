package rowttl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/progress"
	"github.com/ebbtable/ebbtable/schedule"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configures a Job.
type Options struct {
	// Interval between run starts (fixed cadence). Default 1h.
	Interval time.Duration
	// BatchRows caps the expired rows deleted in one batch (their
	// interleaved children come on top). Default 500.
	BatchRows int
	// ScanRows caps the rows read before a batch is cut. Default 4×BatchRows.
	ScanRows int
	// Pause is the least wait between batches, on the real clock, so
	// foreground work keeps its latency. Default 10ms; negative means none.
	Pause time.Duration
	// Duty is the largest share of wall time the job spends working: after
	// a batch that took t it waits at least t×(1−Duty)/Duty (so it adapts to
	// the machine's speed). Default 0.03; 1 means no such wait.
	Duty float64
	// MaxBackoff caps the wait after failed runs. Default 10m.
	MaxBackoff time.Duration
	// Auditor sees every batch before it commits, for observers beyond the
	// change stream (which the engine writes itself). Default NoAudit.
	Auditor    Auditor
	Clock      clock.Clock
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// EnsureDefaults fills unset options.
func (o *Options) EnsureDefaults() {
	if o.Interval == 0 {
		o.Interval = time.Hour
	}
	if o.BatchRows == 0 {
		o.BatchRows = 500
	}
	if o.ScanRows == 0 {
		o.ScanRows = 4 * o.BatchRows
	}
	if o.Pause == 0 {
		o.Pause = 10 * time.Millisecond
	}
	if o.Duty == 0 {
		o.Duty = 0.03
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 10 * time.Minute
	}
	if o.Auditor == nil {
		o.Auditor = NoAudit{}
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
	if o.Interval < 0 || o.BatchRows < 0 || o.ScanRows < 0 {
		return fmt.Errorf("%w: row deletion interval and batch sizes must not be negative", table.ErrInvalid)
	}
	if o.Duty < 0 || o.Duty > 1 {
		return fmt.Errorf("%w: row deletion duty %v must be in (0, 1]", table.ErrInvalid, o.Duty)
	}
	return nil
}

// Job is the row deletion job: it deletes the rows each table's policy has
// expired, in bounded atomic batches.
type Job struct {
	eng  Engine
	opts Options
	log  *slog.Logger
	m    *metrics

	runMu sync.Mutex // one run at a time

	statusMu sync.Mutex
	status   map[uint64]*TableStatus

	loop    *schedule.Loop
	nextRun atomic.Int64 // unix nanoseconds of the next scheduled run; 0: none
}

// New builds a job for eng. Call Start to run it in the background.
func New(eng Engine, opts Options) (*Job, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	j := &Job{eng: eng, opts: opts, log: opts.Logger, status: map[uint64]*TableStatus{}}
	j.m = newMetrics(opts.Registerer, j)
	return j, nil
}

// Interval is the configured cadence.
func (j *Job) Interval() time.Duration { return j.opts.Interval }

// Start runs the job in the background every Interval until Stop.
func (j *Job) Start() {
	j.loop = schedule.Start(schedule.Options{
		Name: "row deletion run", Interval: j.opts.Interval, MaxBackoff: j.opts.MaxBackoff,
		Clock: j.opts.Clock, Logger: j.log, OnFailure: j.m.failures.Inc, Scheduled: j.setNextRun,
	}, func(ctx context.Context) error {
		_, err := j.Run(ctx, Selector{})
		return err
	})
}

// Stop ends the background loop, interrupting a run between batches, and
// waits for it.
func (j *Job) Stop() {
	j.loop.Stop()
	j.loop = nil
}

// Selector picks the tables of a run; empty fields match everything.
type Selector struct {
	Instance string
	Table    string
}

// RunStats sums up one run.
type RunStats struct {
	Tables int
	// Scanned rows, Deleted rows (expired rows and their children),
	// Children among them, and Undeletable rows found.
	Scanned, Deleted, Children, Undeletable int64
	Batches                                 int64
	Started                                 time.Time
	Duration                                time.Duration
}

// Run runs the job now over the selected tables with a policy and returns
// when it is done. Runs never overlap.
func (j *Job) Run(ctx context.Context, sel Selector) (RunStats, error) {
	j.runMu.Lock()
	defer j.runMu.Unlock()
	st := RunStats{Started: j.opts.Clock.Now()}
	found := false
	var errs []error
	for _, m := range j.eng.Tables(sel.Instance) {
		if sel.Table != "" && m.Name != sel.Table {
			continue
		}
		found = true
		if m.RowPolicy == nil || m.RowPolicy.Paused {
			continue
		}
		progress.FromContext(ctx).Phase("table "+m.Name, "rows", j.scannedEstimate(m.ID))
		res, err := j.runTable(ctx, m)
		st.Tables++
		st.Scanned += res.scanned
		st.Deleted += res.deleted
		st.Children += res.children
		st.Undeletable += res.undeletable
		st.Batches += res.batches
		if err != nil {
			if ctx.Err() != nil {
				return st, ctx.Err()
			}
			errs = append(errs, fmt.Errorf("table %s: %w", m.Name, err))
			continue
		}
		j.record(m, res)
	}
	st.Duration = j.opts.Clock.Now().Sub(st.Started)
	if sel.Table != "" && !found {
		return st, fmt.Errorf("%w: %s", table.ErrTableNotFound, sel.Table)
	}
	return st, errors.Join(errs...)
}

// tableResult is what one table's run found and did.
type tableResult struct {
	now                                 int64 // the run's time: its watermark once complete
	scanned, deleted, children, batches int64
	undeletable                         int64
	smallestUndeletable                 int64
	hasSmallest                         bool
}

func (r *tableResult) undeletableAt(ts int64) {
	r.undeletable++
	if !r.hasSmallest || ts < r.smallestUndeletable {
		r.smallestUndeletable, r.hasSmallest = ts, true
	}
}

var errBatchFull = errors.New("batch full")

// runTable deletes the expired rows of one table, as of the run's start.
func (j *Job) runTable(ctx context.Context, m *table.Meta) (tableResult, error) {
	res := tableResult{now: clock.Micros(j.opts.Clock.Now())}
	var cursor []byte
	first := true
	for first || cursor != nil {
		first = false
		if err := ctx.Err(); err != nil {
			return res, err
		}
		busy := time.Now() // pacing is about sharing the machine now: real clock
		cur, ok := j.eng.TableByID(m.ID)
		if !ok || cur.RowPolicy == nil || cur.RowPolicy.Paused {
			return res, nil // dropped or paused meanwhile
		}
		pol := FromTable(*cur.RowPolicy)
		var keys [][]byte
		var scanned int
		next := []byte(nil)
		req := table.ReadRequest{IgnoreRowPolicy: true}
		if cursor != nil {
			req.Ranges = []table.RowRange{{Start: cursor, StartOpen: true}}
		}
		err := j.eng.ReadRows(ctx, cur.Instance, cur.Name, req, func(r cell.Row) error {
			scanned++
			switch st, _ := pol.Evaluate(r.Cells, res.now); st {
			case Expired:
				keys = append(keys, r.Key)
			case Unparsable:
				res.undeletable++
			}
			if len(keys) >= j.opts.BatchRows || scanned >= j.opts.ScanRows {
				next = r.Key
				return errBatchFull
			}
			return nil
		})
		if err != nil && err != errBatchFull {
			return res, err
		}
		res.scanned += int64(scanned)
		j.m.scanned.Add(float64(scanned))
		progress.FromContext(ctx).Add(int64(scanned))
		if len(keys) > 0 {
			if err := j.deleteKeys(ctx, cur, pol, keys, res.now, &res); err != nil {
				return res, err
			}
		}
		cursor = next
		if wait := j.pause(time.Since(busy)); cursor != nil && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return res, ctx.Err()
			case <-t.C:
			}
		}
	}
	return res, nil
}

// pause is the wait after a batch that took busy.
func (j *Job) pause(busy time.Duration) time.Duration {
	wait := j.opts.Pause
	if d := j.opts.Duty; d > 0 && d < 1 {
		wait = max(wait, time.Duration(float64(busy)*(1-d)/d))
	}
	return wait
}

// deleteKeys deletes rows in one batch; a batch that fails is retried as
// two halves, down to single rows. A single row whose deletion fails is
// undeletable this run (counted, its timestamp tracked); the next run tries
// it again.
func (j *Job) deleteKeys(ctx context.Context, m *table.Meta, pol Policy, keys [][]byte, now int64, res *tableResult) error {
	still := func(r cell.Row) bool {
		st, _ := pol.Evaluate(r.Cells, now)
		return st == Expired
	}
	var commit int64
	audit := func(rows []table.DeletedRow) error {
		commit = clock.Micros(j.opts.Clock.Now())
		return j.opts.Auditor.RowsDeleted(Deletion{
			Instance: m.Instance, Table: m.Name, TableID: m.ID, CommitMicros: commit,
			TransactionTag: TransactionTag, IsSystemTransaction: IsSystemTransaction, Rows: rows,
		})
	}
	deleted, err := j.eng.DeleteRows(ctx, m, keys, still, audit)
	if err == nil {
		res.batches++
		j.m.batches.Inc()
		for _, d := range deleted {
			res.deleted++
			if d.Parent != nil {
				res.children++
			}
		}
		j.m.deleted.WithLabelValues(m.Instance, m.Name).Add(float64(len(deleted)))
		return nil
	}
	if ctx.Err() != nil || errors.Is(err, table.ErrClosed) {
		return err
	}
	j.m.batchFailures.Inc()
	if len(keys) > 1 {
		j.log.Warn("row deletion batch failed; retrying in halves", "table", m.Name, "rows", len(keys), "err", err)
		h := len(keys) / 2
		if err := j.deleteKeys(ctx, m, pol, keys[:h], now, res); err != nil {
			return err
		}
		return j.deleteKeys(ctx, m, pol, keys[h:], now, res)
	}
	j.log.Warn("row cannot be deleted; counted as undeletable", "table", m.Name, "row", fmt.Sprintf("%q", keys[0]), "err", err)
	ts := now
	if r, ok := j.rowTimestamp(ctx, m, pol, keys[0]); ok {
		ts = r
	}
	res.undeletableAt(ts)
	return nil
}

func (j *Job) rowTimestamp(ctx context.Context, m *table.Meta, pol Policy, key []byte) (int64, bool) {
	var ts int64
	var ok bool
	j.eng.ReadRows(ctx, m.Instance, m.Name, table.ReadRequest{Keys: [][]byte{key}, IgnoreRowPolicy: true}, func(r cell.Row) error {
		st, t := pol.Evaluate(r.Cells, clock.Micros(j.opts.Clock.Now()))
		ok = st == Expired || st == Live
		ts = t
		return nil
	})
	return ts, ok
}

// TableStatus is the job's view of one table with a policy.
type TableStatus struct {
	Instance, Table string
	Expression      string
	Separator       string
	// Paused: the policy came with a restore and waits to be resumed.
	Paused bool
	// Watermark: every row the policy had expired by this time has been
	// deleted (but undeletable ones). Zero before the first complete run.
	Watermark time.Time
	LastRun   time.Time
	// Figures of the last complete run.
	Scanned, Deleted, Children int64
	Undeletable                int64
	// SmallestUndeletable is the smallest timestamp among undeletable
	// rows whose timestamp is known (zero time if none).
	SmallestUndeletable time.Time
}

func (j *Job) record(m *table.Meta, res tableResult) {
	j.statusMu.Lock()
	defer j.statusMu.Unlock()
	st := j.status[m.ID]
	if st == nil {
		st = &TableStatus{}
		j.status[m.ID] = st
	}
	st.Instance, st.Table = m.Instance, m.Name
	st.Watermark = time.UnixMicro(res.now).UTC()
	st.LastRun = j.opts.Clock.Now()
	st.Scanned, st.Deleted, st.Children, st.Undeletable = res.scanned, res.deleted, res.children, res.undeletable
	st.SmallestUndeletable = time.Time{}
	if res.hasSmallest {
		st.SmallestUndeletable = time.UnixMicro(res.smallestUndeletable).UTC()
	}
	j.m.undeletable.WithLabelValues(m.Instance, m.Name).Set(float64(res.undeletable))
}

// Status lists the tables of instance ("" for all) that have a policy, with
// what the job last did there.
func (j *Job) Status(instance string) []TableStatus {
	j.statusMu.Lock()
	defer j.statusMu.Unlock()
	var out []TableStatus
	for _, m := range j.eng.Tables(instance) {
		if m.RowPolicy == nil {
			continue
		}
		st := TableStatus{Instance: m.Instance, Table: m.Name}
		if s, ok := j.status[m.ID]; ok {
			st = *s
		}
		st.Expression = FromTable(*m.RowPolicy).Expression()
		st.Separator = string(m.InterleaveSeparator)
		st.Paused = m.RowPolicy.Paused
		out = append(out, st)
	}
	return out
}

// PlanResult counts what a policy would delete now.
type PlanResult struct {
	Expression string
	// Rows the policy has expired (not counting interleaved children),
	// Children that would go with them, Null rows (no value: kept),
	// Undeletable rows (a value that is not a timestamp), Scanned rows.
	Rows, Children, Null, Undeletable, Scanned int64
}

// Plan counts, changing nothing, the rows pol would delete now from a table.
func (j *Job) Plan(ctx context.Context, instance, name string, pol Policy) (PlanResult, error) {
	m, err := j.eng.Table(instance, name)
	if err != nil {
		return PlanResult{}, err
	}
	if _, ok := m.Family(pol.Family); !ok {
		return PlanResult{}, fmt.Errorf("%w: %q in table %s (the policy's column)", table.ErrFamilyNotFound, pol.Family, name)
	}
	pr := PlanResult{Expression: pol.Expression()}
	now := clock.Micros(j.opts.Clock.Now())
	var parents [][]byte // child-key prefixes of expired rows, innermost last
	err = j.eng.ReadRows(ctx, instance, name, table.ReadRequest{IgnoreRowPolicy: true}, func(r cell.Row) error {
		pr.Scanned++
		for len(parents) > 0 && !bytes.HasPrefix(r.Key, parents[len(parents)-1]) {
			parents = parents[:len(parents)-1]
		}
		if len(parents) > 0 {
			pr.Children++
			return nil
		}
		switch st, _ := pol.Evaluate(r.Cells, now); st {
		case Expired:
			pr.Rows++
			if len(m.InterleaveSeparator) > 0 {
				parents = append(parents, append(bytes.Clone(r.Key), m.InterleaveSeparator...))
			}
		case Null:
			pr.Null++
		case Unparsable:
			pr.Undeletable++
		}
		return nil
	})
	return pr, err
}
