package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Goals are the minimum ebbtable/emulator throughput ratios per workload
// (issue 23's targets, measured with server and client in separate
// processes).
var Goals = map[string]float64{
	WorkloadWrites:     1.5,
	WorkloadScans:      3,
	WorkloadPointReads: 1.2,
}

// CeilingShare is the alternative point-read goal: ebbtable within 10% of
// the ceiling server, for a machine where not even the ceiling reaches
// Goals[WorkloadPointReads].
const CeilingShare = 0.9

// PebbleShare is issue 23's second bulk-write goal: ebbtable at least half
// of raw Pebble's synced-batch throughput on the same cells.
const PebbleShare = 0.5

// allTargets are the targets Run knows.
var allTargets = []string{TargetEbbtable, TargetEmulator, TargetCeiling, TargetCeilingPebble, TargetCeilingWAL, TargetPebble}

// Modes of Run.
const (
	// ModeProcess runs each target as its own process (the default): what
	// a user sees, and each server's own CPU is measured apart.
	ModeProcess = "process"
	// ModeInProcess runs each target's server inside this process.
	ModeInProcess = "in-process"
)

// Options configures Run.
type Options struct {
	Config
	// Targets to run, in this order in the first round and rotated by one
	// each later round (roundOrder); nil means emulator, ebbtable, then the
	// ceiling (and raw Pebble with RawPebble).
	Targets []string
	// RawPebble adds TargetPebble and TargetCeilingPebble to the default
	// targets (writes only): raw Pebble's synced-batch throughput on the
	// writes workload's cells, in this process, and the ceiling server
	// committing them to raw Pebble, beside the servers in the same round.
	RawPebble bool
	// Rounds is how many times the targets are run in turn (zero: once).
	// Comparisons give the median ratio over the rounds and its range.
	Rounds int
	// InProcess starts the servers inside this process instead of as
	// child processes.
	InProcess bool
	// Binaries start the targets in process mode; empty fields are built
	// (see Binaries.Build).
	Binaries Binaries
	// DataDir holds ebbtable's database; empty means a temporary directory
	// per round, removed afterwards.
	DataDir string
	// CPUProfile, if set, is the path prefix of CPU profiles of ebbtable
	// under each workload (first round only): CPUProfile.writes,
	// CPUProfile.scans, CPUProfile.point-reads. In process mode they
	// profile the server process (serve --cpuprofile); in-process, this
	// whole process (client and server).
	CPUProfile string
	// Progress, if not nil, receives a line per finished workload.
	Progress io.Writer
}

// Report is the outcome of Run.
type Report struct {
	Config      Config       `json:"config"`
	Mode        string       `json:"mode"`
	Rounds      int          `json:"rounds"`
	GOMAXPROCS  int          `json:"gomaxprocs"`
	Start       time.Time    `json:"start"`
	Results     []Result     `json:"results"`
	Comparisons []Comparison `json:"comparisons,omitempty"`
}

// Comparison sets ebbtable against the emulator on one workload: medians
// over the rounds, with the ratio's range.
type Comparison struct {
	Workload           string  `json:"workload"`
	EbbtableRowsPerSec float64 `json:"ebbtable_rows_per_sec"`
	EmulatorRowsPerSec float64 `json:"emulator_rows_per_sec"`
	// Ratio is the median over rounds of ebbtable's throughput over the
	// emulator's in the same round; RatioMin and RatioMax its range.
	Ratio    float64 `json:"ratio"`
	RatioMin float64 `json:"ratio_min"`
	RatioMax float64 `json:"ratio_max"`
	Rounds   int     `json:"rounds"`
	Goal     float64 `json:"goal"`
	// Met says whether the goal was met; nil (and left out of the JSON)
	// for a workload that has no goal, such as point writes.
	Met *bool `json:"met,omitempty"`
	// MetBy says which goal was met: "emulator" (Ratio >= Goal) or
	// "ceiling" (point reads within 10% of the ceiling); empty if none.
	MetBy             string  `json:"met_by,omitempty"`
	EbbtableP99Micros float64 `json:"ebbtable_p99_us"`
	EmulatorP99Micros float64 `json:"emulator_p99_us"`
	// CeilingRatio is the median of the ceiling server's throughput over
	// the emulator's (0 when it did not run): the most any server could
	// reach here. EbbtableOfCeiling is ebbtable's over the ceiling's.
	CeilingRatio      float64 `json:"ceiling_ratio,omitempty"`
	EbbtableOfCeiling float64 `json:"ebbtable_of_ceiling,omitempty"`
	// PebbleRowsPerSec is raw Pebble's median synced-batch throughput on
	// the same cells (writes, with TargetPebble only); EbbtableOfPebble
	// and CeilingOfPebble are the medians over rounds of ebbtable's and
	// the ceiling's throughput over raw Pebble's in the same round, with
	// the range of ebbtable's.
	PebbleRowsPerSec    float64 `json:"pebble_rows_per_sec,omitempty"`
	EbbtableOfPebble    float64 `json:"ebbtable_of_pebble,omitempty"`
	EbbtableOfPebbleMin float64 `json:"ebbtable_of_pebble_min,omitempty"`
	EbbtableOfPebbleMax float64 `json:"ebbtable_of_pebble_max,omitempty"`
	CeilingOfPebble     float64 `json:"ceiling_of_pebble,omitempty"`
	// CeilingPebbleOfPebble is the median over rounds of the ceiling
	// writing to raw Pebble (TargetCeilingPebble) over raw Pebble alone,
	// with its range: the most any Pebble-backed server reaches of raw
	// Pebble behind this client on this machine.
	CeilingPebbleOfPebble    float64 `json:"ceiling_pebble_of_pebble,omitempty"`
	CeilingPebbleOfPebbleMin float64 `json:"ceiling_pebble_of_pebble_min,omitempty"`
	CeilingPebbleOfPebbleMax float64 `json:"ceiling_pebble_of_pebble_max,omitempty"`
	// CeilingWALOfPebble is the same for the ceiling appending its writes
	// to a group-committed log (TargetCeilingWAL): the most any durable
	// server reaches of raw Pebble behind this client on this machine.
	CeilingWALOfPebble    float64 `json:"ceiling_wal_of_pebble,omitempty"`
	CeilingWALOfPebbleMin float64 `json:"ceiling_wal_of_pebble_min,omitempty"`
	CeilingWALOfPebbleMax float64 `json:"ceiling_wal_of_pebble_max,omitempty"`
	// CPUShareOfPebble is, per target, the median over rounds of raw
	// Pebble's CPU per row over the target's client + server CPU per row
	// (in-process: the process's) in the same round, and
	// CPUShareOfPebbleRange its range: the share of raw Pebble's
	// throughput the target reaches when both are CPU-bound on the same
	// cores. Unlike the throughput shares it hardly moves with the
	// machine's load (raw Pebble is one process, a client and a server two,
	// and on a loaded machine each gets its own share of the CPU).
	CPUShareOfPebble      map[string]float64    `json:"cpu_share_of_pebble,omitempty"`
	CPUShareOfPebbleRange map[string][2]float64 `json:"cpu_share_of_pebble_range,omitempty"`
	// CeilingPebbleRatio is the median over rounds of ceiling-pebble's
	// throughput over the emulator's: the most a Pebble-backed server
	// reaches against the emulator here.
	CeilingPebbleRatio float64 `json:"ceiling_pebble_ratio,omitempty"`
	// Median CPU per row of each target's server process (process mode)
	// and of this process (the client; in-process mode, client and server).
	ServerCPU map[string]float64 `json:"server_cpu_us_per_row,omitempty"`
	ClientCPU map[string]float64 `json:"client_cpu_us_per_row,omitempty"`
	// RowsPerSec is each target's median throughput.
	RowsPerSec map[string]float64 `json:"rows_per_sec,omitempty"`
}

// Run runs each target in turn, Rounds times, runs the workloads against
// it through the official client, shuts it down, and returns the report.
// Only one target runs at a time, so none competes with another's
// background work; alternating them spreads the machine's drift over all,
// and each round starts one target later (roundOrder), so no target always
// runs first or always follows the same one.
func Run(ctx context.Context, opts Options) (*Report, error) {
	cfg := opts.Config.withDefaults()
	targets := opts.Targets
	if len(targets) == 0 {
		targets = []string{TargetEmulator, TargetEbbtable, TargetCeiling}
		if opts.RawPebble {
			targets = append(targets, TargetCeilingPebble, TargetCeilingWAL, TargetPebble)
		}
	}
	for _, t := range targets {
		if !slices.Contains(allTargets, t) {
			return nil, fmt.Errorf("bench: unknown target %q (want one of %s)", t, strings.Join(allTargets, ", "))
		}
	}
	rounds := max(opts.Rounds, 1)
	rep := &Report{Config: cfg, Mode: ModeProcess, Rounds: rounds, GOMAXPROCS: runtime.GOMAXPROCS(0), Start: time.Now().UTC()}
	if opts.InProcess {
		rep.Mode = ModeInProcess
	} else {
		cleanup, err := opts.Binaries.Build(ctx, opts.Progress)
		if err != nil {
			return nil, err
		}
		defer cleanup()
	}
	progress := func(r Result) {
		if opts.Progress != nil {
			srv := ""
			if r.ServerCPUSec > 0 {
				srv = fmt.Sprintf(" server %.2f cores %.1fµs/row", r.ServerCPUCores, r.ServerCPUMicrosPerRow)
			}
			fmt.Fprintf(opts.Progress, "round %d %-9s %-12s %8d rows in %6.2fs %9.0f rows/s  p50 %-7s p99 %-7s client %.2f cores %.1fµs/row%s  load %.1f\n",
				r.Round, r.Target, r.Workload, r.Rows, r.ElapsedSec, r.RowsPerSec, fmtDur(r.P50()), fmtDur(r.P99()),
				r.CPUCores, r.CPUMicrosPerRow, srv, r.Load1)
		}
	}
	for round := 1; round <= rounds; round++ {
		for _, t := range roundOrder(targets, round) {
			res, err := runTarget(ctx, t, round, cfg, opts, progress)
			rep.Results = append(rep.Results, res...)
			if err != nil {
				return rep, err
			}
			runtime.GC()
		}
	}
	rep.Comparisons = compare(rep.Results)
	return rep, nil
}

func runTarget(ctx context.Context, target string, round int, cfg Config, opts Options, progress func(Result)) (_ []Result, err error) {
	if target == TargetPebble {
		cfg.FirstRow = 0
		res, err := rawPebbleWrites(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", target, err)
		}
		for i := range res {
			res[i].Round = round
			progress(res[i])
		}
		return res, nil
	}
	dir := opts.DataDir
	if target == TargetCeilingPebble || target == TargetCeilingWAL {
		// Writes only (it keeps nothing to read), into a fresh database.
		cfg.Scans, cfg.Reads, dir = 0, 0, ""
	}
	if (target == TargetEbbtable || target == TargetCeilingPebble || target == TargetCeilingWAL) && dir == "" {
		dir, err = os.MkdirTemp("", "ebbbench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	profiling := target == TargetEbbtable && opts.CPUProfile != "" && round == 1
	var h hooks
	var e *Endpoint
	if opts.InProcess {
		switch target {
		case TargetEmulator:
			e, err = StartEmulator(ctx)
		case TargetCeiling:
			e, err = StartCeiling(ctx)
		case TargetCeilingPebble:
			e, err = StartCeilingPebble(ctx, dir)
		case TargetCeilingWAL:
			e, err = StartCeilingWAL(ctx, dir)
		case TargetEbbtable:
			e, err = StartEbbtable(ctx, dir, nil)
		}
		if err != nil {
			return nil, err
		}
		if profiling {
			h.around = func(workload string, run func() error) error {
				return profile(fmt.Sprintf("%s.%s", opts.CPUProfile, workload), run)
			}
		}
	} else {
		var profDir, prof string
		if profiling {
			if profDir, err = os.MkdirTemp("", "ebbbench-prof-"); err != nil {
				return nil, err
			}
			defer os.RemoveAll(profDir)
			prof = filepath.Join(profDir, "server")
		}
		var ch *child
		e, ch, err = startProcess(ctx, &opts.Binaries, target, dir, prof)
		if err != nil {
			return nil, err
		}
		h.serverCPU = ch.cpu
		if profiling {
			// The server's profile rotates before each workload
			// (serve --cpuprofile and SIGUSR1): server.N is the Nth
			// workload's; they are moved into place once it has stopped.
			var names []string
			h.around = func(workload string, run func() error) error {
				names = append(names, workload)
				next := fmt.Sprintf("%s.%d", prof, len(names))
				if err := nextProfile(ch.cmd.Process); err != nil {
					return err
				}
				if err := waitForFile(ctx, next); err != nil {
					return err
				}
				return run()
			}
			defer func() {
				for i, w := range names {
					if rerr := os.Rename(fmt.Sprintf("%s.%d", prof, i+1), opts.CPUProfile+"."+w); rerr != nil && err == nil {
						err = rerr
					}
				}
			}()
		}
	}
	// Close before the profiles are moved (deferred above): the server
	// writes its last profile as it stops.
	defer func() {
		if cerr := e.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	res, err := workloads(ctx, target, e.Client, e.Admin, cfg, func(r Result) {
		r.Round = round
		progress(r)
	}, h)
	for i := range res {
		res[i].Round = round
	}
	return res, err
}

// waitForFile polls until path exists (a child creating it), for up to
// ten seconds.
func waitForFile(ctx context.Context, path string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the server did not start profile %s", path)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
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

// median of xs (which it sorts); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func compare(results []Result) []Comparison {
	type key struct {
		target, workload string
		round            int
	}
	byKey := map[key]Result{}
	maxRound := 0
	for _, r := range results {
		byKey[key{r.Target, r.Workload, r.Round}] = r
		maxRound = max(maxRound, r.Round)
	}
	var out []Comparison
	for _, w := range []string{WorkloadWrites, WorkloadScans, WorkloadPointReads, WorkloadPointWrites} {
		var ratios, ceil, ofCeil, ebRate, emRate, ebP99, emP99, pbRate, ebOfPb, ceOfPb, cpOfPb, cwOfPb, cpRatio []float64
		srv, cli, cpuShare, rate := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		for round := 0; round <= maxRound; round++ {
			eb, ok1 := byKey[key{TargetEbbtable, w, round}]
			em, ok2 := byKey[key{TargetEmulator, w, round}]
			ce, ok3 := byKey[key{TargetCeiling, w, round}]
			pb, ok4 := byKey[key{TargetPebble, w, round}]
			if ok4 && pb.RowsPerSec > 0 {
				pbRate = append(pbRate, pb.RowsPerSec)
				if ok1 {
					ebOfPb = append(ebOfPb, eb.RowsPerSec/pb.RowsPerSec)
				}
				if ok3 {
					ceOfPb = append(ceOfPb, ce.RowsPerSec/pb.RowsPerSec)
				}
				if cp, ok := byKey[key{TargetCeilingPebble, w, round}]; ok {
					cpOfPb = append(cpOfPb, cp.RowsPerSec/pb.RowsPerSec)
				}
				if cw, ok := byKey[key{TargetCeilingWAL, w, round}]; ok {
					cwOfPb = append(cwOfPb, cw.RowsPerSec/pb.RowsPerSec)
				}
			}
			cp := byKey[key{TargetCeilingPebble, w, round}]
			if p := pb.ServerCPUMicrosPerRow; ok4 && p > 0 {
				for _, t := range []string{TargetEbbtable, TargetEmulator, TargetCeiling, TargetCeilingPebble, TargetCeilingWAL} {
					if r := byKey[key{t, w, round}]; r.Rows > 0 && r.CPUMicrosPerRow+r.ServerCPUMicrosPerRow > 0 {
						cpuShare[t] = append(cpuShare[t], p/(r.CPUMicrosPerRow+r.ServerCPUMicrosPerRow))
					}
				}
			}
			if cp.RowsPerSec > 0 && ok2 && em.RowsPerSec > 0 {
				cpRatio = append(cpRatio, cp.RowsPerSec/em.RowsPerSec)
			}
			for t, r := range map[string]Result{TargetEbbtable: eb, TargetEmulator: em, TargetCeiling: ce, TargetPebble: pb, TargetCeilingPebble: cp,
				TargetCeilingWAL: byKey[key{TargetCeilingWAL, w, round}]} {
				if r.Rows > 0 {
					if r.ServerCPUMicrosPerRow > 0 {
						srv[t] = append(srv[t], r.ServerCPUMicrosPerRow)
					}
					cli[t] = append(cli[t], r.CPUMicrosPerRow)
					rate[t] = append(rate[t], r.RowsPerSec)
				}
			}
			if !ok1 || !ok2 || em.RowsPerSec <= 0 {
				continue
			}
			ratios = append(ratios, eb.RowsPerSec/em.RowsPerSec)
			ebRate, emRate = append(ebRate, eb.RowsPerSec), append(emRate, em.RowsPerSec)
			ebP99, emP99 = append(ebP99, eb.P99Micros), append(emP99, em.P99Micros)
			if ok3 && ce.RowsPerSec > 0 {
				ceil = append(ceil, ce.RowsPerSec/em.RowsPerSec)
				ofCeil = append(ofCeil, eb.RowsPerSec/ce.RowsPerSec)
			}
		}
		if len(ratios) == 0 {
			continue
		}
		c := Comparison{
			Workload:           w,
			Rounds:             len(ratios),
			RatioMin:           slices.Min(ratios),
			RatioMax:           slices.Max(ratios),
			Ratio:              median(ratios),
			EbbtableRowsPerSec: median(ebRate),
			EmulatorRowsPerSec: median(emRate),
			EbbtableP99Micros:  median(ebP99),
			EmulatorP99Micros:  median(emP99),
			CeilingRatio:       median(ceil),
			EbbtableOfCeiling:  median(ofCeil),
			Goal:               Goals[w],
			ServerCPU:          map[string]float64{},
			ClientCPU:          map[string]float64{},
			RowsPerSec:         map[string]float64{},
			PebbleRowsPerSec:   median(pbRate),
			CeilingOfPebble:    median(ceOfPb),
			CeilingPebbleRatio: median(cpRatio),
		}
		if len(ebOfPb) > 0 {
			c.EbbtableOfPebbleMin, c.EbbtableOfPebbleMax = slices.Min(ebOfPb), slices.Max(ebOfPb)
			c.EbbtableOfPebble = median(ebOfPb)
		}
		if len(cpOfPb) > 0 {
			c.CeilingPebbleOfPebbleMin, c.CeilingPebbleOfPebbleMax = slices.Min(cpOfPb), slices.Max(cpOfPb)
			c.CeilingPebbleOfPebble = median(cpOfPb)
		}
		if len(cwOfPb) > 0 {
			c.CeilingWALOfPebbleMin, c.CeilingWALOfPebbleMax = slices.Min(cwOfPb), slices.Max(cwOfPb)
			c.CeilingWALOfPebble = median(cwOfPb)
		}
		for t, xs := range srv {
			c.ServerCPU[t] = median(xs)
		}
		for t, xs := range cpuShare {
			if c.CPUShareOfPebble == nil {
				c.CPUShareOfPebble, c.CPUShareOfPebbleRange = map[string]float64{}, map[string][2]float64{}
			}
			c.CPUShareOfPebble[t] = median(xs)
			c.CPUShareOfPebbleRange[t] = [2]float64{slices.Min(xs), slices.Max(xs)}
		}
		for t, xs := range cli {
			c.ClientCPU[t] = median(xs)
		}
		for t, xs := range rate {
			c.RowsPerSec[t] = median(xs)
		}
		switch {
		case c.Goal > 0 && c.Ratio >= c.Goal:
			c.MetBy = TargetEmulator
		case w == WorkloadPointReads && c.CeilingRatio > 0 && c.CeilingRatio < c.Goal && c.EbbtableOfCeiling >= CeilingShare:
			c.MetBy = TargetCeiling
		}
		if c.Goal > 0 {
			met := c.MetBy != ""
			c.Met = &met
		}
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

// WriteTable writes the report as an aligned text table: with ebbtable and
// the emulator, one line per workload comparing them; otherwise one line
// per result.
func (r *Report) WriteTable(w io.Writer) error {
	c := r.Config
	fmt.Fprintf(w, "mode=%s rounds=%d rows=%d batch=%d value=%dB workers=%d scans=%d reads=%d point-writes=%d GOMAXPROCS=%d\n",
		r.Mode, r.Rounds, c.Rows, c.BatchSize, c.ValueSize, c.Workers, c.Scans, c.Reads, c.PointWrites, r.GOMAXPROCS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	cpu := func(m map[string]float64, t string) string {
		if v, ok := m[t]; ok && v > 0 {
			return fmt.Sprintf("%.1f", v)
		}
		return "-"
	}
	if len(r.Comparisons) > 0 {
		cpuHead := "server cpu µs/row eb/em/ceil (goal eb<=em)\tclient cpu µs/row eb/em/ceil"
		if r.Mode == ModeInProcess {
			cpuHead = "process cpu µs/row eb/em/ceil"
		}
		fmt.Fprintf(tw, "workload\tebbtable rows/s\temulator rows/s\tratio (range)\tgoal\tceiling\teb/ceiling\tp99 eb/em\t%s\t\n", cpuHead)
		for _, cmp := range r.Comparisons {
			verdict := "MISS"
			goal := fmt.Sprintf(">=%.1fx", cmp.Goal)
			switch cmp.MetBy {
			case TargetEmulator:
				verdict = "ok"
			case TargetCeiling:
				verdict = fmt.Sprintf("ok (>=%.0f%% of ceiling)", CeilingShare*100)
			}
			if cmp.Goal == 0 {
				goal, verdict = "none", "-"
			}
			ceiling, ofCeil := "-", "-"
			if cmp.CeilingRatio > 0 {
				ceiling = fmt.Sprintf("%.2fx", cmp.CeilingRatio)
				ofCeil = fmt.Sprintf("%.0f%%", cmp.EbbtableOfCeiling*100)
			}
			cpus := fmt.Sprintf("%s / %s / %s", cpu(cmp.ServerCPU, TargetEbbtable), cpu(cmp.ServerCPU, TargetEmulator), cpu(cmp.ServerCPU, TargetCeiling))
			clients := fmt.Sprintf("%s / %s / %s", cpu(cmp.ClientCPU, TargetEbbtable), cpu(cmp.ClientCPU, TargetEmulator), cpu(cmp.ClientCPU, TargetCeiling))
			if r.Mode == ModeInProcess {
				cpus = clients
			} else {
				cpus += " " + serverCPUVerdict(cmp.ServerCPU) + "\t" + clients
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2fx (%.2f-%.2f)\t%s %s\t%s\t%s\t%s / %s\t%s\t\n",
				cmp.Workload, cmp.EbbtableRowsPerSec, cmp.EmulatorRowsPerSec, cmp.Ratio, cmp.RatioMin, cmp.RatioMax,
				goal, verdict, ceiling, ofCeil,
				fmtDur(time.Duration(cmp.EbbtableP99Micros*1e3)), fmtDur(time.Duration(cmp.EmulatorP99Micros*1e3)), cpus)
		}
	} else {
		fmt.Fprintln(tw, "round\ttarget\tworkload\trows/s\tops/s\tp50\tp99\tserver cpu µs/row\tclient cpu µs/row\t")
		for _, res := range r.Results {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%.0f\t%.0f\t%s\t%s\t%.1f\t%.1f\t\n",
				res.Round, res.Target, res.Workload, res.RowsPerSec, res.OpsPerSec, fmtDur(res.P50()), fmtDur(res.P99()),
				res.ServerCPUMicrosPerRow, res.CPUMicrosPerRow)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if slices.ContainsFunc(r.Comparisons, func(c Comparison) bool { return c.CeilingRatio > 0 }) {
		fmt.Fprintln(w, "ceiling: a server answering from a Go map (no storage, filters or versions), over the emulator: for writes, point reads and single-row writes, the most any server reaches with this client on this machine (its scans are not tuned, so not a bound)")
	}
	for _, cmp := range r.Comparisons {
		if cmp.Workload == WorkloadPointWrites {
			writePointWriteFloors(w, cmp)
		}
		if cmp.PebbleRowsPerSec <= 0 || cmp.Workload != WorkloadWrites {
			continue
		}
		fmt.Fprintf(w, "raw pebble (synced batches of the same cells, in this process, no gRPC): %.0f rows/s, cpu %s µs/row; ebbtable %.0f%% of it (%.0f-%.0f%%), goal >=%.0f%%; ceiling %.0f%% of it",
			cmp.PebbleRowsPerSec, cpu(cmp.ServerCPU, TargetPebble), cmp.EbbtableOfPebble*100, cmp.EbbtableOfPebbleMin*100, cmp.EbbtableOfPebbleMax*100,
			PebbleShare*100, cmp.CeilingOfPebble*100)
		if cmp.CeilingPebbleOfPebble > 0 {
			fmt.Fprintf(w, "; ceiling writing to pebble %.0f%% of it (%.0f-%.0f%%), %.2fx the emulator, server cpu %s µs/row",
				cmp.CeilingPebbleOfPebble*100, cmp.CeilingPebbleOfPebbleMin*100, cmp.CeilingPebbleOfPebbleMax*100, cmp.CeilingPebbleRatio, cpu(cmp.ServerCPU, TargetCeilingPebble))
		}
		if cmp.CeilingWALOfPebble > 0 {
			fmt.Fprintf(w, "; ceiling appending to a group-committed log %.0f%% of it (%.0f-%.0f%%), server cpu %s µs/row",
				cmp.CeilingWALOfPebble*100, cmp.CeilingWALOfPebbleMin*100, cmp.CeilingWALOfPebbleMax*100, cpu(cmp.ServerCPU, TargetCeilingWAL))
		}
		fmt.Fprintln(w)
		var shares []string
		for _, t := range []string{TargetEbbtable, TargetCeilingPebble, TargetCeilingWAL, TargetCeiling, TargetEmulator} {
			if v, ok := cmp.CPUShareOfPebble[t]; ok {
				rg := cmp.CPUShareOfPebbleRange[t]
				shares = append(shares, fmt.Sprintf("%s %.0f%% (%.0f-%.0f%%)", t, v*100, rg[0]*100, rg[1]*100))
			}
		}
		if len(shares) > 0 {
			fmt.Fprintf(w, "cpu-bound shares of raw pebble (its cpu per row over client + server cpu per row; steady under load): %s\n", strings.Join(shares, ", "))
		}
	}
	var loads []string
	for _, res := range r.Results {
		loads = append(loads, fmt.Sprintf("%.1f", res.Load1))
	}
	_, err := fmt.Fprintf(w, "machine load (1-minute average) at each workload's start: %s\n", strings.Join(loads, " "))
	return err
}

// writePointWriteFloors writes the point-writes line of the floors: for
// ebbtable, the emulator and each floor that ran (the ceiling, ceiling-wal,
// ceiling-pebble, raw Pebble's single-cell synced commits), the medians of
// server and client CPU per write and writes a second, and each durable
// floor's server CPU per write over the emulator's (issue 23's CPU target
// asks ebbtable's to be at most the emulator's). Nothing when no floor ran.
func writePointWriteFloors(w io.Writer, cmp Comparison) {
	floors := []string{TargetCeiling, TargetCeilingWAL, TargetCeilingPebble, TargetPebble}
	if !slices.ContainsFunc(floors, func(t string) bool { return cmp.RowsPerSec[t] > 0 }) {
		return
	}
	what := map[string]string{
		TargetCeiling:       "a Go map",
		TargetCeilingWAL:    "append + group-committed fdatasync",
		TargetCeilingPebble: "one synced Pebble batch",
		TargetPebble:        "raw: one-cell synced commits in this process, no gRPC",
	}
	one := func(v float64) string {
		if v > 0 {
			return fmt.Sprintf("%.1f", v)
		}
		return "-"
	}
	var parts []string
	for _, t := range append([]string{TargetEbbtable, TargetEmulator}, floors...) {
		if cmp.RowsPerSec[t] <= 0 {
			continue
		}
		name := t
		if what[t] != "" {
			name += " (" + what[t] + ")"
		}
		client := cmp.ClientCPU[t]
		if t == TargetPebble {
			client = 0 // the same process: its figure is the "server's"
		}
		parts = append(parts, fmt.Sprintf("%s %s / %s / %.0f", name, one(cmp.ServerCPU[t]), one(client), cmp.RowsPerSec[t]))
	}
	fmt.Fprintf(w, "point-writes floors, server / client cpu µs per write / writes per s: %s", strings.Join(parts, "; "))
	if em := cmp.ServerCPU[TargetEmulator]; em > 0 {
		var of []string
		for _, t := range []string{TargetCeilingWAL, TargetCeilingPebble} {
			if v := cmp.ServerCPU[t]; v > 0 {
				of = append(of, fmt.Sprintf("%s %.2fx", t, v/em))
			}
		}
		if len(of) > 0 {
			fmt.Fprintf(w, "; durable floors' server cpu over the emulator's: %s", strings.Join(of, ", "))
		}
	}
	fmt.Fprintln(w)
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

// roundOrder is the order targets run in during round (from 1): the list
// rotated left by round-1, so over as many rounds as there are targets each
// runs once in every position. Runs measured back to back are not
// independent: the one before leaves the page cache, dirty pages still
// being written back and the machine's load to the next (in session 19 the
// second of two runs of one binary measured 0.85-0.99 of the first in six
// pairs of six), and a fixed order would charge all of that to the same
// targets every round.
func roundOrder(targets []string, round int) []string {
	if len(targets) == 0 {
		return nil
	}
	k := (round - 1) % len(targets)
	return append(slices.Clone(targets[k:]), targets[:k]...)
}

// serverCPUVerdict judges issue 23's last target for one workload: the
// ebbtable server's CPU per operation no higher than the emulator's (the
// medians over the rounds), for every workload; "-" when either is
// missing.
func serverCPUVerdict(m map[string]float64) string {
	eb, em := m[TargetEbbtable], m[TargetEmulator]
	switch {
	case eb <= 0 || em <= 0:
		return "-"
	case eb <= em:
		return "ok"
	}
	return "MISS"
}
