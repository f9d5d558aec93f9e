package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/cli"
)

// WorkloadHotRows is the hot-row workload's name in results.
const WorkloadHotRows = "hot-rows"

// HotRowsConfig sizes the hot-row workload: the "latest state" pattern of
// issue 16. Workers clients each pick, per operation, one of Rows rows at
// random and either read it (ReadRow) or overwrite its one cell with a
// ValueSize-byte SetCell, half and half, for Duration. The family keeps one
// version (maxversions=1), so every write leaves a hidden version behind
// until the collector removes it: a server that reads what it stores slows
// down as the run goes on.
type HotRowsConfig struct {
	Table     string
	Rows      int
	Workers   int
	ValueSize int
	Duration  time.Duration
	Seed      uint64
	// Slice, if set, splits the timed run into slices this long and
	// records each slice's CPU per operation (Result.Slices): whether a
	// long run's cost grows within one server process, free of the
	// run-to-run noise of comparing separate runs.
	Slice time.Duration
}

// DefaultHotRows is the configuration for a run of d.
func DefaultHotRows(d time.Duration) HotRowsConfig {
	return HotRowsConfig{Table: "hot", Rows: 100, Workers: 50, ValueSize: 1 << 10, Duration: d, Seed: 1}
}

// HotRows (re)creates the table, writes every row once, then runs the
// workload. Ops counts ReadRow and SetCell calls; Rows counts the same (one
// row each), so CPUMicrosPerRow is process CPU per operation.
func HotRows(ctx context.Context, client *bigtable.Client, admin *bigtable.AdminClient, hc HotRowsConfig) (Result, error) {
	return hotRows(ctx, client, admin, hc, hooks{})
}

// hotRows is HotRows with Run's hooks: around wraps the timed part (after
// the setup and prefill), serverCPU measures the server's process over it.
func hotRows(ctx context.Context, client *bigtable.Client, admin *bigtable.AdminClient, hc HotRowsConfig, h hooks) (Result, error) {
	cfg := Config{Table: hc.Table, Family: "f", Column: "c", Seed: hc.Seed, ValueSize: hc.ValueSize}.withDefaults()
	if err := Setup(ctx, admin, cfg); err != nil {
		return Result{}, err
	}
	if err := admin.SetGCPolicy(ctx, cfg.Table, cfg.Family, bigtable.MaxVersionsPolicy(1)); err != nil {
		return Result{}, fmt.Errorf("bench: hot-rows: set GC policy: %w", err)
	}
	tbl := client.Open(cfg.Table)
	pool := newValuePool(cfg)
	set := func(ctx context.Context, i, n int) error {
		m := bigtable.NewMutation()
		m.Set(cfg.Family, cfg.Column, bigtable.ServerTime, pool.value(n))
		return tbl.Apply(ctx, cfg.Key(i), m)
	}
	for i := range hc.Rows {
		if err := set(ctx, i, i); err != nil {
			return Result{}, fmt.Errorf("bench: hot-rows: prefill: %w", err)
		}
	}
	around := h.around
	if around == nil {
		around = func(_ string, run func() error) error { return run() }
	}
	var res Result
	err := around(WorkloadHotRows, func() (err error) {
		var srv0 time.Duration
		if h.serverCPU != nil {
			srv0 = h.serverCPU()
		}
		end := time.Now().Add(hc.Duration)
		var ops atomic.Int64
		stopSlices := sliceSampler(hc.Slice, &ops, h.serverCPU, h.slice)
		res, err = runWorkers(ctx, WorkloadHotRows, hc.Workers, func(ctx context.Context, w int, rec *recorder) error {
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)+1))
			for n := 0; time.Now().Before(end); n++ {
				i := rng.IntN(hc.Rows)
				t0 := time.Now()
				if rng.IntN(2) == 0 {
					row, err := tbl.ReadRow(ctx, cfg.Key(i))
					if err != nil {
						return fmt.Errorf("ReadRow: %w", err)
					}
					// The emulator collects versions in the background, so
					// a read may see more than one there.
					if len(row[cfg.Family]) == 0 {
						return fmt.Errorf("ReadRow %q: no cells", cfg.Key(i))
					}
				} else if err := set(ctx, i, w<<20+n); err != nil {
					return fmt.Errorf("SetCell: %w", err)
				}
				rec.record(time.Since(t0), 1)
				ops.Add(1)
			}
			return nil
		})
		res.Slices = stopSlices()
		if h.serverCPU != nil && err == nil {
			res.setServerCPU(h.serverCPU() - srv0)
		}
		return err
	})
	return res, err
}

// HotRowsOptions configures RunHotRows.
type HotRowsOptions struct {
	HotRowsConfig
	// Targets to run, in order, each round; nil means the emulator, then
	// ebbtable.
	Targets []string
	// Rounds is how many times the targets are run in turn (zero: once).
	Rounds int
	// InProcess runs the servers inside this process (ebbtable at serve's
	// Go GC percent while it runs) instead of one child process each.
	InProcess bool
	// Binaries start the targets in process mode; empty fields are built.
	Binaries Binaries
	// DataDir holds ebbtable's database; empty means a temporary directory
	// per run, removed afterwards.
	DataDir string
	// CPUProfile, if set, is where ebbtable's CPU profile of the first
	// round's timed run goes: the server process's (serve --cpuprofile), or
	// in-process this whole process's.
	CPUProfile string
	// Progress, if not nil, receives a line per finished run.
	Progress io.Writer
}

// RunHotRows runs the hot-row workload against each target in turn, Rounds
// times, each on a fresh server. By default each server is its own process,
// started as users start it (ebbtable's serve, with its Go GC percent), and
// each result carries the server process's CPU (ServerCPUMicrosPerRow)
// beside this process's, the client's.
func RunHotRows(ctx context.Context, o HotRowsOptions) ([]Result, error) {
	targets := o.Targets
	if len(targets) == 0 {
		targets = []string{TargetEmulator, TargetEbbtable}
	}
	for _, t := range targets {
		if t != TargetEbbtable && t != TargetEmulator {
			return nil, fmt.Errorf("bench: hot-rows: target %q (want %s or %s)", t, TargetEbbtable, TargetEmulator)
		}
	}
	if !o.InProcess {
		cleanup, err := o.Binaries.Build(ctx, o.Progress)
		if err != nil {
			return nil, err
		}
		defer cleanup()
	}
	var out []Result
	for round := 1; round <= max(o.Rounds, 1); round++ {
		for _, t := range roundOrder(targets, round) {
			res, err := runHotTarget(ctx, o, t, round == 1 && t == TargetEbbtable && o.CPUProfile != "")
			if err != nil {
				return out, fmt.Errorf("%s: %w", t, err)
			}
			res.Round = round
			out = append(out, res)
			if o.Progress != nil {
				fmt.Fprintln(o.Progress, FormatHotRows(res))
			}
			runtime.GC()
		}
	}
	return out, nil
}

// FormatHotRows is one hot-rows result as a line of text.
func FormatHotRows(r Result) string {
	srv := ""
	if r.ServerCPUSec > 0 {
		srv = fmt.Sprintf("  server %.2f cores %.1fµs/op", r.ServerCPUCores, r.ServerCPUMicrosPerRow)
	}
	line := fmt.Sprintf("round %d %-9s %s %.1fs: %8d ops %9.0f ops/s  p50 %-8v p99 %-8v client %.2f cores %.1fµs/op%s  load %.1f",
		r.Round, r.Target, r.Workload, r.ElapsedSec, r.Ops, r.OpsPerSec, fmtDur(r.P50()), fmtDur(r.P99()),
		r.CPUCores, r.CPUMicrosPerRow, srv, r.Load1)
	if len(r.Slices) > 0 {
		var b strings.Builder
		b.WriteString(line)
		b.WriteString("\n  slices (ops/s, client µs/op, server µs/op):")
		for _, s := range r.Slices {
			fmt.Fprintf(&b, " %.0f/%.1f/%.1f", float64(s.Ops)/s.Sec, s.CPUMicrosPerRow, s.ServerCPUMicrosPerRow)
		}
		line = b.String()
	}
	return line
}

// HotRowsSummary sets ebbtable against the emulator round by round: the
// throughput ratio and the server CPU per operation ratio (process mode;
// in-process, the whole process's), with how many rounds met issue 16's
// targets (ratio ≥ 1, CPU ratio ≤ 1).
func HotRowsSummary(res []Result) string {
	type pair struct{ eb, em Result }
	byRound := map[int]*pair{}
	var rounds []int
	for _, r := range res {
		p := byRound[r.Round]
		if p == nil {
			p = &pair{}
			byRound[r.Round] = p
			rounds = append(rounds, r.Round)
		}
		switch r.Target {
		case TargetEbbtable:
			p.eb = r
		case TargetEmulator:
			p.em = r
		}
	}
	cpu := func(r Result) float64 {
		if r.ServerCPUMicrosPerRow > 0 {
			return r.ServerCPUMicrosPerRow
		}
		return r.CPUMicrosPerRow
	}
	var b strings.Builder
	var n, tput, cpuMet int
	for _, rd := range rounds {
		p := byRound[rd]
		if p.eb.OpsPerSec <= 0 || p.em.OpsPerSec <= 0 || cpu(p.em) <= 0 {
			continue
		}
		ratio, cr := p.eb.OpsPerSec/p.em.OpsPerSec, cpu(p.eb)/cpu(p.em)
		n++
		if ratio >= 1 {
			tput++
		}
		if cr <= 1 {
			cpuMet++
		}
		fmt.Fprintf(&b, "round %d: ebbtable %.0f ops/s, emulator %.0f ops/s (%.2fx); CPU/op %.1f vs %.1f µs (%.2f)\n",
			rd, p.eb.OpsPerSec, p.em.OpsPerSec, ratio, cpu(p.eb), cpu(p.em), cr)
	}
	if n > 0 {
		fmt.Fprintf(&b, "throughput >= the emulator's in %d of %d rounds; CPU/op <= the emulator's in %d of %d\n", tput, n, cpuMet, n)
	}
	return b.String()
}

// runHotTarget starts target, runs the workload once and stops it.
func runHotTarget(ctx context.Context, o HotRowsOptions, target string, profiling bool) (_ Result, err error) {
	dir := o.DataDir
	if target == TargetEbbtable && dir == "" {
		if dir, err = os.MkdirTemp("", "ebbbench-hot-"); err != nil {
			return Result{}, err
		}
		defer os.RemoveAll(dir)
	}
	var (
		h hooks
		e *Endpoint
	)
	if o.InProcess {
		switch target {
		case TargetEmulator:
			e, err = StartEmulator(ctx)
		case TargetEbbtable:
			// As serve runs it (the client in this process shares it).
			defer debug.SetGCPercent(debug.SetGCPercent(cli.DefaultGoGCPercent))
			e, err = StartEbbtable(ctx, dir, nil)
		}
		if err != nil {
			return Result{}, err
		}
		if profiling {
			h.around = func(_ string, run func() error) error { return profile(o.CPUProfile, run) }
		}
	} else {
		var profDir, prof string
		if profiling {
			if profDir, err = os.MkdirTemp("", "ebbbench-prof-"); err != nil {
				return Result{}, err
			}
			defer os.RemoveAll(profDir)
			prof = filepath.Join(profDir, "server")
		}
		var ch *child
		if e, ch, err = startProcess(ctx, &o.Binaries, target, dir, prof); err != nil {
			return Result{}, err
		}
		h.serverCPU = ch.cpu
		if profiling {
			// serve --cpuprofile profiles from the start; SIGUSR1 starts
			// prof.1 with the timed run, moved into place once the server
			// has stopped (it writes the profile's end as it stops).
			h.around = func(_ string, run func() error) error {
				if err := nextProfile(ch.cmd.Process); err != nil {
					return err
				}
				if err := waitForFile(ctx, prof+".1"); err != nil {
					return err
				}
				return run()
			}
			if o.Slice > 0 {
				// One profile per slice: CPUProfile (the first),
				// CPUProfile.2, CPUProfile.3, …
				h.slice = func() { _ = nextProfile(ch.cmd.Process) }
			}
			defer func() {
				if rerr := os.Rename(prof+".1", o.CPUProfile); rerr != nil && err == nil {
					err = rerr
				}
				for k := 2; o.Slice > 0; k++ {
					if os.Rename(fmt.Sprintf("%s.%d", prof, k), fmt.Sprintf("%s.%d", o.CPUProfile, k)) != nil {
						break
					}
				}
			}()
		}
	}
	defer func() {
		if cerr := e.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	load := loadAvg()
	res, err := hotRows(ctx, e.Client, e.Admin, o.HotRowsConfig, h)
	res.Target, res.Load1 = target, load
	return res, err
}

// sliceSampler, for a slice > 0, samples ops, this process's CPU and the
// server's (if serverCPU is set) every slice, and then calls tick (if set),
// until the returned function is called, which takes a last sample and
// returns one Slice per interval (a last one shorter than half a slice is
// left out: the server's CPU counters lag by a few milliseconds).
func sliceSampler(slice time.Duration, ops *atomic.Int64, serverCPU func() time.Duration, tick func()) func() []Slice {
	if slice <= 0 {
		return func() []Slice { return nil }
	}
	type sample struct {
		at       time.Time
		ops      int64
		cpu, srv time.Duration
	}
	take := func() sample {
		s := sample{at: time.Now(), ops: ops.Load(), cpu: processCPU()}
		if serverCPU != nil {
			s.srv = serverCPU()
		}
		return s
	}
	samples := []sample{take()}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(slice)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				samples = append(samples, take())
				if tick != nil {
					tick()
				}
			}
		}
	}()
	return func() []Slice {
		close(done)
		<-stopped
		samples = append(samples, take())
		var out []Slice
		for i := 1; i < len(samples); i++ {
			a, b := samples[i-1], samples[i]
			n := b.ops - a.ops
			if n <= 0 || b.at.Sub(a.at) < slice/2 {
				continue
			}
			out = append(out, Slice{
				Sec:                   b.at.Sub(a.at).Seconds(),
				Ops:                   n,
				CPUMicrosPerRow:       float64((b.cpu - a.cpu).Microseconds()) / float64(n),
				ServerCPUMicrosPerRow: float64((b.srv - a.srv).Microseconds()) / float64(n),
			})
		}
		return out
	}
}
