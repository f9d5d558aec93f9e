package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"cloud.google.com/go/bigtable"
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
}

// DefaultHotRows is the configuration for a run of d.
func DefaultHotRows(d time.Duration) HotRowsConfig {
	return HotRowsConfig{Table: "hot", Rows: 100, Workers: 50, ValueSize: 1 << 10, Duration: d, Seed: 1}
}

// HotRows (re)creates the table, writes every row once, then runs the
// workload. Ops counts ReadRow and SetCell calls; Rows counts the same (one
// row each), so CPUMicrosPerRow is process CPU per operation.
func HotRows(ctx context.Context, client *bigtable.Client, admin *bigtable.AdminClient, hc HotRowsConfig) (Result, error) {
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
	end := time.Now().Add(hc.Duration)
	return runWorkers(ctx, WorkloadHotRows, hc.Workers, func(ctx context.Context, w int, rec *recorder) error {
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
		}
		return nil
	})
}

// RunHotRows runs the hot-row workload against each target in turn
// (default: the emulator, then ebbtable), each on a fresh endpoint.
func RunHotRows(ctx context.Context, hc HotRowsConfig, targets []string, dataDir string) ([]Result, error) {
	if len(targets) == 0 {
		targets = []string{TargetEmulator, TargetEbbtable}
	}
	var out []Result
	for _, t := range targets {
		var (
			e   *Endpoint
			err error
		)
		switch t {
		case TargetEmulator:
			e, err = StartEmulator(ctx)
		case TargetEbbtable:
			e, err = startEbbtableIn(ctx, dataDir)
		default:
			return out, fmt.Errorf("bench: hot-rows: target %q (want %s or %s)", t, TargetEbbtable, TargetEmulator)
		}
		if err != nil {
			return out, err
		}
		load := loadAvg()
		res, err := HotRows(ctx, e.Client, e.Admin, hc)
		e.Close()
		if err != nil {
			return out, fmt.Errorf("%s: %w", t, err)
		}
		res.Target, res.Load1 = t, load
		out = append(out, res)
	}
	return out, nil
}

// startEbbtableIn starts ebbtable on dir, or on a temporary directory
// removed when the endpoint closes.
func startEbbtableIn(ctx context.Context, dir string) (*Endpoint, error) {
	if dir != "" {
		return StartEbbtable(ctx, dir, nil)
	}
	tmp, err := os.MkdirTemp("", "ebbbench-hot-")
	if err != nil {
		return nil, err
	}
	e, err := StartEbbtable(ctx, tmp, nil)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	stop := e.stop
	e.stop = func() error {
		err := stop()
		return errors.Join(err, os.RemoveAll(tmp))
	}
	return e, nil
}
