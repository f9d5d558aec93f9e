package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Goals are the minimum ebbtable/emulator throughput ratios per workload.
var Goals = map[string]float64{
	WorkloadWrites:     1.5,
	WorkloadScans:      2,
	WorkloadPointReads: 2,
}

// Options configures Run.
type Options struct {
	Config
	// Targets to run, in order; nil means emulator, ebbtable, then the
	// ceiling.
	Targets []string
	// DataDir holds ebbtable's database; empty means a temporary directory
	// removed afterwards.
	DataDir string
	// CPUProfile, if set, is the path prefix of CPU profiles of the
	// ebbtable workloads, one per workload: CPUProfile.writes,
	// CPUProfile.scans, CPUProfile.point-reads (client and server side,
	// as both run in this process).
	CPUProfile string
	// Progress, if not nil, receives a line per finished workload.
	Progress io.Writer
}

// Report is the outcome of Run.
type Report struct {
	Config      Config       `json:"config"`
	GOMAXPROCS  int          `json:"gomaxprocs"`
	Start       time.Time    `json:"start"`
	Results     []Result     `json:"results"`
	Comparisons []Comparison `json:"comparisons,omitempty"`
}

// Comparison sets ebbtable against the emulator on one workload.
type Comparison struct {
	Workload           string  `json:"workload"`
	EbbtableRowsPerSec float64 `json:"ebbtable_rows_per_sec"`
	EmulatorRowsPerSec float64 `json:"emulator_rows_per_sec"`
	Ratio              float64 `json:"ratio"`
	Goal               float64 `json:"goal"`
	Met                bool    `json:"met"`
	EbbtableP99Micros  float64 `json:"ebbtable_p99_us"`
	EmulatorP99Micros  float64 `json:"emulator_p99_us"`
	// CeilingRatio is the ceiling server's throughput over the emulator's
	// (0 when it did not run): the most any server could reach here.
	CeilingRatio float64 `json:"ceiling_ratio,omitempty"`
}

// Run starts each target in turn in this process, runs the workloads
// against it through the official client, shuts it down, and returns the
// report. Only one target runs at a time, so neither competes with the
// other's background work.
func Run(ctx context.Context, opts Options) (*Report, error) {
	cfg := opts.Config.withDefaults()
	targets := opts.Targets
	if len(targets) == 0 {
		targets = []string{TargetEmulator, TargetEbbtable, TargetCeiling}
	}
	rep := &Report{Config: cfg, GOMAXPROCS: runtime.GOMAXPROCS(0), Start: time.Now().UTC()}
	progress := func(r Result) {
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "%-9s %-12s %8d rows in %6.2fs %9.0f rows/s  p50 %-7s p99 %-7s cpu %.2f cores %.1fµs/row  load %.1f\n",
				r.Target, r.Workload, r.Rows, r.ElapsedSec, r.RowsPerSec, fmtDur(r.P50()), fmtDur(r.P99()),
				r.CPUCores, r.CPUMicrosPerRow, r.Load1)
		}
	}
	for _, t := range targets {
		res, err := runTarget(ctx, t, cfg, opts, progress)
		rep.Results = append(rep.Results, res...)
		if err != nil {
			return rep, err
		}
		runtime.GC()
	}
	rep.Comparisons = compare(rep.Results)
	return rep, nil
}

func runTarget(ctx context.Context, target string, cfg Config, opts Options, progress func(Result)) ([]Result, error) {
	var (
		e   *Endpoint
		err error
	)
	switch target {
	case TargetEmulator:
		e, err = StartEmulator(ctx)
	case TargetCeiling:
		e, err = StartCeiling(ctx)
	case TargetEbbtable:
		dir := opts.DataDir
		if dir == "" {
			dir, err = os.MkdirTemp("", "ebbbench-")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(dir)
		}
		e, err = StartEbbtable(ctx, dir, nil)
	default:
		return nil, fmt.Errorf("bench: unknown target %q (want %s, %s or %s)", target, TargetEbbtable, TargetEmulator, TargetCeiling)
	}
	if err != nil {
		return nil, err
	}
	defer e.Close()
	var around func(string, func() error) error
	if target == TargetEbbtable && opts.CPUProfile != "" {
		around = func(workload string, run func() error) error {
			return profile(fmt.Sprintf("%s.%s", opts.CPUProfile, workload), run)
		}
	}
	return workloads(ctx, target, e.Client, e.Admin, cfg, progress, around)
}

// profile runs run under a CPU profile written to path.
func profile(path string, run func() error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	runErr := run()
	pprof.StopCPUProfile()
	if err := f.Close(); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

func compare(results []Result) []Comparison {
	find := func(target, workload string) (Result, bool) {
		i := slices.IndexFunc(results, func(r Result) bool { return r.Target == target && r.Workload == workload })
		if i < 0 {
			return Result{}, false
		}
		return results[i], true
	}
	var out []Comparison
	for _, w := range []string{WorkloadWrites, WorkloadScans, WorkloadPointReads} {
		eb, ok1 := find(TargetEbbtable, w)
		em, ok2 := find(TargetEmulator, w)
		if !ok1 || !ok2 {
			continue
		}
		c := Comparison{
			Workload:           w,
			EbbtableRowsPerSec: eb.RowsPerSec,
			EmulatorRowsPerSec: em.RowsPerSec,
			Goal:               Goals[w],
			EbbtableP99Micros:  eb.P99Micros,
			EmulatorP99Micros:  em.P99Micros,
		}
		if em.RowsPerSec > 0 {
			c.Ratio = eb.RowsPerSec / em.RowsPerSec
			if ce, ok := find(TargetCeiling, w); ok {
				c.CeilingRatio = ce.RowsPerSec / em.RowsPerSec
			}
		}
		c.Met = c.Ratio >= c.Goal
		out = append(out, c)
	}
	return out
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as an aligned text table: with both targets,
// one line per workload comparing them; otherwise one line per result.
func (r *Report) WriteTable(w io.Writer) error {
	c := r.Config
	fmt.Fprintf(w, "rows=%d batch=%d value=%dB workers=%d scans=%d reads=%d GOMAXPROCS=%d\n",
		c.Rows, c.BatchSize, c.ValueSize, c.Workers, c.Scans, c.Reads, r.GOMAXPROCS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(r.Comparisons) > 0 {
		fmt.Fprintln(tw, "workload\tebbtable rows/s\temulator rows/s\tratio\tgoal\tceiling\tebbtable p50/p99\temulator p50/p99\tcpu µs/row eb/em/ceil\t")
		for _, cmp := range r.Comparisons {
			eb, em := r.result(TargetEbbtable, cmp.Workload), r.result(TargetEmulator, cmp.Workload)
			verdict := "MISS"
			if cmp.Met {
				verdict = "ok"
			}
			ceiling, ceilCPU := "-", "-"
			if cmp.CeilingRatio > 0 {
				ceiling = fmt.Sprintf("%.2fx", cmp.CeilingRatio)
				ceilCPU = fmt.Sprintf("%.1f", r.result(TargetCeiling, cmp.Workload).CPUMicrosPerRow)
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2fx\t>=%.1fx %s\t%s\t%s / %s\t%s / %s\t%.1f / %.1f / %s\t\n",
				cmp.Workload, cmp.EbbtableRowsPerSec, cmp.EmulatorRowsPerSec, cmp.Ratio, cmp.Goal, verdict, ceiling,
				fmtDur(eb.P50()), fmtDur(eb.P99()), fmtDur(em.P50()), fmtDur(em.P99()),
				eb.CPUMicrosPerRow, em.CPUMicrosPerRow, ceilCPU)
		}
	} else {
		fmt.Fprintln(tw, "target\tworkload\trows/s\tops/s\tp50\tp99\tcpu µs/row\t")
		for _, res := range r.Results {
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%s\t%s\t%.1f\t\n",
				res.Target, res.Workload, res.RowsPerSec, res.OpsPerSec, fmtDur(res.P50()), fmtDur(res.P99()), res.CPUMicrosPerRow)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if slices.ContainsFunc(r.Comparisons, func(c Comparison) bool { return c.CeilingRatio > 0 }) {
		fmt.Fprintln(w, "ceiling: a server answering from a Go map (no storage, filters or versions), over the emulator: for writes and point reads, the most any server reaches with this client on this machine (its scans are not tuned, so not a bound)")
	}
	var cores []string
	for _, res := range r.Results {
		cores = append(cores, fmt.Sprintf("%s/%s %.2f", res.Target, res.Workload, res.CPUCores))
	}
	_, err := fmt.Fprintf(w, "process CPU use in cores (of %d; low on a CPU-bound workload = contended machine): %s\n",
		r.GOMAXPROCS, strings.Join(cores, ", "))
	return err
}

func (r *Report) result(target, workload string) Result {
	for _, res := range r.Results {
		if res.Target == target && res.Workload == workload {
			return res
		}
	}
	return Result{}
}

// fmtDur prints a latency with three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3gs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3gms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3gµs", float64(d)/float64(time.Microsecond))
	}
}
