package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/HdrHistogram/hdrhistogram-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Workload names, as they appear in results.
const (
	WorkloadWrites     = "writes"
	WorkloadScans      = "scans"
	WorkloadPointReads = "point-reads"
	// WorkloadPointWrites is single-row writes: one Apply (MutateRow) of
	// one SetCell per operation.
	WorkloadPointWrites = "point-writes"
)

// Config sizes a run of the workloads. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	// Table is the table the workloads use; Setup (re)creates it.
	Table string `json:"table"`
	// Family and Column name the one cell written per row.
	Family string `json:"family"`
	Column string `json:"column"`
	// Rows is how many rows Writes writes and how many rows Scans and
	// PointReads expect to exist (row indexes FirstRow..FirstRow+Rows-1 for
	// Writes, 0..Rows-1 for the readers).
	Rows int `json:"rows"`
	// FirstRow offsets the row indexes Writes writes (benchmarks use it to
	// keep inserting new rows).
	FirstRow int `json:"first_row,omitempty"`
	// BatchSize is the number of rows per ApplyBulk call.
	BatchSize int `json:"batch_size"`
	// ValueSize is the size in bytes of each cell value.
	ValueSize int `json:"value_size"`
	// Workers is the number of concurrent client goroutines.
	Workers int `json:"workers"`
	// Scans is the number of full-table scans (run by up to Workers at once).
	Scans int `json:"scans"`
	// Reads is the number of point reads.
	Reads int `json:"reads"`
	// PointWrites is the number of single-row writes (zero: none).
	PointWrites int `json:"point_writes,omitempty"`
	// Seed drives key, value and read-order generation.
	Seed uint64 `json:"seed"`
}

// DefaultConfig is the configuration cmd/ebbbench runs by default.
func DefaultConfig() Config {
	return Config{
		Table:     "bench",
		Family:    "f",
		Column:    "c",
		Rows:      200000,
		BatchSize: 100,
		ValueSize: 100,
		Workers:   8,
		Scans:     8,
		Reads:     30000,
		Seed:      1,
	}
}

// withDefaults fills zero fields from DefaultConfig (Rows, Scans and Reads
// are left alone: zero means "none").
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Table == "" {
		c.Table = d.Table
	}
	if c.Family == "" {
		c.Family = d.Family
	}
	if c.Column == "" {
		c.Column = d.Column
	}
	if c.BatchSize <= 0 {
		c.BatchSize = d.BatchSize
	}
	if c.ValueSize <= 0 {
		c.ValueSize = d.ValueSize
	}
	if c.Workers <= 0 {
		c.Workers = d.Workers
	}
	return c
}

// Result is one workload's outcome against one target.
type Result struct {
	Workload string `json:"workload"`
	Target   string `json:"target"`
	Workers  int    `json:"workers"`
	// Ops counts client calls: ApplyBulk batches, full scans or ReadRow calls.
	Ops int64 `json:"ops"`
	// Rows counts rows written, scanned or read.
	Rows       int64   `json:"rows"`
	ElapsedSec float64 `json:"elapsed_sec"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	RowsPerSec float64 `json:"rows_per_sec"`
	// Per-operation latency percentiles, in microseconds.
	P50Micros float64 `json:"p50_us"`
	P99Micros float64 `json:"p99_us"`
	MaxMicros float64 `json:"max_us"`
	// CPUSec is the CPU time this whole process (client and, for
	// in-process endpoints, server) used during the workload; CPUCores is
	// CPUSec per elapsed second. CPU per row is steadier than throughput on
	// a shared machine; CPUCores well under GOMAXPROCS on a CPU-bound
	// workload means other processes took the cores.
	CPUSec          float64 `json:"cpu_sec,omitempty"`
	CPUCores        float64 `json:"cpu_cores,omitempty"`
	CPUMicrosPerRow float64 `json:"cpu_us_per_row,omitempty"`
	// ServerCPUSec is the CPU time the server's own process used during
	// the workload (process mode only; 0 otherwise), and ServerCPUCores
	// and ServerCPUMicrosPerRow the same per elapsed second and per row.
	ServerCPUSec          float64 `json:"server_cpu_sec,omitempty"`
	ServerCPUCores        float64 `json:"server_cpu_cores,omitempty"`
	ServerCPUMicrosPerRow float64 `json:"server_cpu_us_per_row,omitempty"`
	// Round is the round of Run this result belongs to (from 1).
	Round int `json:"round,omitempty"`
	// Load1 is the machine's 1-minute load average when the workload
	// started (0 where unknown).
	Load1 float64 `json:"load1,omitempty"`
	// Slices, for a hot-rows run with HotRowsConfig.Slice set, divides
	// the timed run into consecutive slices.
	Slices []Slice `json:"slices,omitempty"`
}

// Slice is one interval of a timed run: its length, its operations and the
// CPU per operation of this process and (process mode) the server's.
type Slice struct {
	Sec                   float64 `json:"sec"`
	Ops                   int64   `json:"ops"`
	CPUMicrosPerRow       float64 `json:"cpu_us_per_op"`
	ServerCPUMicrosPerRow float64 `json:"server_cpu_us_per_op,omitempty"`
}

// P50 is the median per-operation latency.
func (r Result) P50() time.Duration { return time.Duration(r.P50Micros * float64(time.Microsecond)) }

// P99 is the 99th-percentile per-operation latency.
func (r Result) P99() time.Duration { return time.Duration(r.P99Micros * float64(time.Microsecond)) }

// Key is the row key of row index i: a fixed-width hex string of a
// seed-dependent bijective mix of i, so keys are unique, deterministic and
// spread over the key space (writes arrive in random key order).
func (c Config) Key(i int) string {
	return string(c.appendKey(nil, i))
}

func (c Config) appendKey(dst []byte, i int) []byte {
	const hex = "0123456789abcdef"
	x := mix64(uint64(i) ^ mix64(c.Seed))
	dst = append(dst, 'r')
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hex[(x>>uint(shift))&0xf])
	}
	return dst
}

// mix64 is the SplitMix64 finalizer, a bijection on uint64.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// valuePool is seeded pseudo-random bytes that values are cut from.
type valuePool struct {
	buf  []byte
	size int
}

func newValuePool(c Config) *valuePool {
	const poolSize = 64 << 10
	rng := rand.New(rand.NewPCG(c.Seed, 0x76616c756573))
	buf := make([]byte, poolSize+c.ValueSize)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	return &valuePool{buf: buf, size: c.ValueSize}
}

// value is the cell value of row index i (shared, do not modify).
func (p *valuePool) value(i int) []byte {
	off := int(mix64(uint64(i)) % uint64(len(p.buf)-p.size))
	return p.buf[off : off+p.size : off+p.size]
}

// Setup (re)creates cfg.Table with one column family and no GC policy.
func Setup(ctx context.Context, admin *bigtable.AdminClient, cfg Config) error {
	cfg = cfg.withDefaults()
	tables, err := admin.Tables(ctx)
	if err != nil {
		return fmt.Errorf("bench: list tables: %w", err)
	}
	for _, t := range tables {
		if t == cfg.Table {
			if err := admin.DeleteTable(ctx, cfg.Table); err != nil {
				return fmt.Errorf("bench: delete table %s: %w", cfg.Table, err)
			}
		}
	}
	conf := &bigtable.TableConf{
		TableID:        cfg.Table,
		ColumnFamilies: map[string]bigtable.Family{cfg.Family: {}},
	}
	if err := admin.CreateTableFromConf(ctx, conf); err != nil {
		return fmt.Errorf("bench: create table %s: %w", cfg.Table, err)
	}
	return nil
}

// recorder collects one worker's latencies and counts.
type recorder struct {
	hist *hdrhistogram.Histogram
	ops  int64
	rows int64
}

func newRecorder() *recorder {
	// 1 µs .. 10 min, 3 significant digits.
	return &recorder{hist: hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)}
}

func (r *recorder) record(d time.Duration, rows int64) {
	us := d.Microseconds()
	if us < 1 {
		us = 1
	}
	_ = r.hist.RecordValue(us) // values above the range are dropped
	r.ops++
	r.rows += rows
}

// runWorkers runs fn(worker, rec) on n goroutines, stops the others at the
// first error, and folds the recorders into a Result.
func runWorkers(ctx context.Context, workload string, n int, fn func(ctx context.Context, w int, rec *recorder) error) (Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recs := make([]*recorder, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), processCPU()
	for w := range n {
		recs[w] = newRecorder()
		wg.Go(func() {
			if err := fn(ctx, w, recs[w]); err != nil {
				errs[w] = err
				cancel()
			}
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	if err := firstCause(errs); err != nil {
		return Result{}, fmt.Errorf("bench: %s: %w", workload, err)
	}
	total := newRecorder()
	for _, r := range recs {
		total.hist.Merge(r.hist)
		total.ops += r.ops
		total.rows += r.rows
	}
	secs := elapsed.Seconds()
	res := Result{
		Workload:   workload,
		Workers:    n,
		Ops:        total.ops,
		Rows:       total.rows,
		ElapsedSec: secs,
		P50Micros:  float64(total.hist.ValueAtQuantile(50)),
		P99Micros:  float64(total.hist.ValueAtQuantile(99)),
		MaxMicros:  float64(total.hist.Max()),
	}
	if secs > 0 {
		res.OpsPerSec = float64(total.ops) / secs
		res.RowsPerSec = float64(total.rows) / secs
	}
	if cpu > 0 {
		res.CPUSec = cpu.Seconds()
		if secs > 0 {
			res.CPUCores = res.CPUSec / secs
		}
		if total.rows > 0 {
			res.CPUMicrosPerRow = float64(cpu.Microseconds()) / float64(total.rows)
		}
	}
	return res, nil
}

// firstCause prefers an error that is not a cancellation caused by another
// worker's failure.
func firstCause(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if first == nil {
			first = err
		}
		if !errors.Is(err, context.Canceled) && status.Code(err) != codes.Canceled {
			return err
		}
	}
	return first
}

// share splits total items over n workers: worker w gets [lo, hi).
func share(total, n, w int) (lo, hi int) {
	return total * w / n, total * (w + 1) / n
}

// Writes writes rows FirstRow..FirstRow+Rows-1 with ApplyBulk, BatchSize
// rows per call, batches split evenly over Workers. Rows counts rows
// written; Ops counts ApplyBulk calls.
func Writes(ctx context.Context, client *bigtable.Client, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	tbl := client.Open(cfg.Table)
	pool := newValuePool(cfg)
	ts := bigtable.Now().TruncateToMilliseconds()
	batches := (cfg.Rows + cfg.BatchSize - 1) / cfg.BatchSize
	workers := min(cfg.Workers, max(batches, 1))
	return runWorkers(ctx, WorkloadWrites, workers, func(ctx context.Context, w int, rec *recorder) error {
		lo, hi := share(batches, workers, w)
		keys := make([]string, 0, cfg.BatchSize)
		muts := make([]*bigtable.Mutation, 0, cfg.BatchSize)
		for b := lo; b < hi; b++ {
			keys, muts = keys[:0], muts[:0]
			first := b * cfg.BatchSize
			last := min(first+cfg.BatchSize, cfg.Rows)
			for i := first; i < last; i++ {
				row := cfg.FirstRow + i
				m := bigtable.NewMutation()
				m.Set(cfg.Family, cfg.Column, ts, pool.value(row))
				keys = append(keys, cfg.Key(row))
				muts = append(muts, m)
			}
			t0 := time.Now()
			rowErrs, err := tbl.ApplyBulk(ctx, keys, muts)
			d := time.Since(t0)
			if err != nil {
				return fmt.Errorf("ApplyBulk: %w", err)
			}
			for i, e := range rowErrs {
				if e != nil {
					return fmt.Errorf("ApplyBulk row %q: %w", keys[i], e)
				}
			}
			rec.record(d, int64(len(keys)))
		}
		return nil
	})
}

// Scans runs Scans full-table ReadRows calls, up to Workers at a time, and
// checks each sees exactly Rows rows. Rows counts rows scanned; Ops counts
// scans.
func Scans(ctx context.Context, client *bigtable.Client, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	tbl := client.Open(cfg.Table)
	workers := min(cfg.Workers, max(cfg.Scans, 1))
	return runWorkers(ctx, WorkloadScans, workers, func(ctx context.Context, w int, rec *recorder) error {
		lo, hi := share(cfg.Scans, workers, w)
		for range hi - lo {
			var n int64
			t0 := time.Now()
			err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(bigtable.Row) bool {
				n++
				return true
			})
			d := time.Since(t0)
			if err != nil {
				return fmt.Errorf("ReadRows: %w", err)
			}
			if n != int64(cfg.Rows) {
				return fmt.Errorf("full scan saw %d rows, want %d", n, cfg.Rows)
			}
			rec.record(d, n)
		}
		return nil
	})
}

// PointReads issues Reads ReadRow calls on keys drawn uniformly (seeded,
// per worker) from rows 0..Rows-1, split evenly over Workers, and checks
// each row comes back with its value.
func PointReads(ctx context.Context, client *bigtable.Client, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	if cfg.Rows <= 0 {
		return Result{}, errors.New("bench: point-reads: Rows must be > 0")
	}
	tbl := client.Open(cfg.Table)
	pool := newValuePool(cfg)
	workers := min(cfg.Workers, max(cfg.Reads, 1))
	return runWorkers(ctx, WorkloadPointReads, workers, func(ctx context.Context, w int, rec *recorder) error {
		lo, hi := share(cfg.Reads, workers, w)
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)+1))
		for range hi - lo {
			i := rng.IntN(cfg.Rows)
			key := cfg.Key(i)
			t0 := time.Now()
			row, err := tbl.ReadRow(ctx, key)
			d := time.Since(t0)
			if err != nil {
				return fmt.Errorf("ReadRow %q: %w", key, err)
			}
			if err := checkRow(row, key, cfg, pool.value(i)); err != nil {
				return err
			}
			rec.record(d, 1)
		}
		return nil
	})
}

// PointWrites issues PointWrites Apply calls of one SetCell each (a
// single-row MutateRow, as cbt set and Table.Apply send), to new rows
// Rows+FirstRow.. (keys spread as Writes'), split evenly over Workers. Rows
// and Ops count Apply calls.
func PointWrites(ctx context.Context, client *bigtable.Client, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	tbl := client.Open(cfg.Table)
	pool := newValuePool(cfg)
	ts := bigtable.Now().TruncateToMilliseconds()
	workers := min(cfg.Workers, max(cfg.PointWrites, 1))
	return runWorkers(ctx, WorkloadPointWrites, workers, func(ctx context.Context, w int, rec *recorder) error {
		lo, hi := share(cfg.PointWrites, workers, w)
		for i := lo; i < hi; i++ {
			row := cfg.Rows + cfg.FirstRow + i
			m := bigtable.NewMutation()
			m.Set(cfg.Family, cfg.Column, ts, pool.value(row))
			key := cfg.Key(row)
			t0 := time.Now()
			err := tbl.Apply(ctx, key, m)
			d := time.Since(t0)
			if err != nil {
				return fmt.Errorf("Apply %q: %w", key, err)
			}
			rec.record(d, 1)
		}
		return nil
	})
}

func checkRow(row bigtable.Row, key string, cfg Config, want []byte) error {
	items := row[cfg.Family]
	if len(items) != 1 {
		return fmt.Errorf("ReadRow %q: got %d cells in family %q, want 1", key, len(items), cfg.Family)
	}
	it := items[0]
	if it.Row != key || !bytes.Equal(it.Value, want) {
		return fmt.Errorf("ReadRow %q: got row %q with a %d-byte value, want its %d-byte value", key, it.Row, len(it.Value), len(want))
	}
	return nil
}

// Workloads runs Setup, then Writes, Scans (if cfg.Scans > 0), PointReads
// (if cfg.Reads > 0) and PointWrites (if cfg.PointWrites > 0) against one
// endpoint, labelling the results
// with target. progress, if not nil, is called after each workload.
func Workloads(ctx context.Context, target string, client *bigtable.Client, admin *bigtable.AdminClient, cfg Config, progress func(Result)) ([]Result, error) {
	return workloads(ctx, target, client, admin, cfg, progress, hooks{})
}

// hooks are Run's additions to Workloads.
type hooks struct {
	// around, if set, wraps each workload's run (for CPU profiles).
	around func(workload string, run func() error) error
	// serverCPU, if set, is the CPU time the server's process has used so
	// far (process mode).
	serverCPU func() time.Duration
	// slice, if set, is called at the end of each of a hot-rows run's
	// slices (HotRowsConfig.Slice).
	slice func()
}

// workloads is Workloads with Run's hooks.
func workloads(ctx context.Context, target string, client *bigtable.Client, admin *bigtable.AdminClient, cfg Config,
	progress func(Result), h hooks) ([]Result, error) {
	around := h.around
	cfg = cfg.withDefaults()
	cfg.FirstRow = 0
	if err := Setup(ctx, admin, cfg); err != nil {
		return nil, err
	}
	if around == nil {
		around = func(_ string, run func() error) error { return run() }
	}
	steps := []struct {
		name string
		run  func(context.Context, *bigtable.Client, Config) (Result, error)
		on   bool
	}{
		{WorkloadWrites, Writes, true},
		{WorkloadScans, Scans, cfg.Scans > 0},
		{WorkloadPointReads, PointReads, cfg.Reads > 0 && cfg.Rows > 0},
		{WorkloadPointWrites, PointWrites, cfg.PointWrites > 0},
	}
	var out []Result
	for _, s := range steps {
		if !s.on {
			continue
		}
		load := loadAvg()
		var res Result
		err := around(s.name, func() (err error) {
			var srv0 time.Duration
			if h.serverCPU != nil {
				srv0 = h.serverCPU()
			}
			res, err = s.run(ctx, client, cfg)
			if h.serverCPU != nil && err == nil {
				res.setServerCPU(h.serverCPU() - srv0)
			}
			return err
		})
		if err != nil {
			return out, fmt.Errorf("%s: %w", target, err)
		}
		res.Target = target
		res.Load1 = load
		out = append(out, res)
		if progress != nil {
			progress(res)
		}
	}
	return out, nil
}

// setServerCPU records the server process's CPU time over the workload.
func (r *Result) setServerCPU(cpu time.Duration) {
	if cpu <= 0 {
		return
	}
	r.ServerCPUSec = cpu.Seconds()
	if r.ElapsedSec > 0 {
		r.ServerCPUCores = r.ServerCPUSec / r.ElapsedSec
	}
	if r.Rows > 0 {
		r.ServerCPUMicrosPerRow = float64(cpu.Microseconds()) / float64(r.Rows)
	}
}

// loadAvg is the machine's 1-minute load average, or 0 where unknown. The
// benchmark shares the machine; a load well above GOMAXPROCS at the start
// of a workload means its figures are depressed.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, _ := strconv.ParseFloat(f, 64)
	return v
}
