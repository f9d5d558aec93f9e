package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/storage"
)

// start brings up one target for a test or benchmark and closes it at the end.
func start(tb testing.TB, target string) *Endpoint {
	tb.Helper()
	var (
		e   *Endpoint
		err error
	)
	switch target {
	case TargetEbbtable:
		e, err = StartEbbtable(context.Background(), tb.TempDir(), discardLogger())
	case TargetEmulator:
		e, err = StartEmulator(context.Background())
	case TargetCeiling:
		e, err = StartCeiling(context.Background())
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := e.Close(); err != nil {
			tb.Log("close:", err)
		}
	})
	return e
}

var targets = []string{TargetEbbtable, TargetEmulator, TargetCeiling}

func TestKeys(t *testing.T) {
	c := Config{Seed: 7}
	seen := map[string]bool{}
	for i := range 10000 {
		k := c.Key(i)
		if len(k) != 17 || seen[k] {
			t.Fatalf("key %d = %q: bad length or duplicate", i, k)
		}
		seen[k] = true
	}
	if c.Key(42) != (Config{Seed: 7}).Key(42) || c.Key(42) == (Config{Seed: 8}).Key(42) {
		t.Fatal("keys are not a deterministic function of (seed, index)")
	}
}

// TestWorkloads runs every workload on each target with a few hundred rows
// and checks the counts, and that the point writes wrote their rows.
func TestWorkloads(t *testing.T) {
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Table: "t", Rows: 300, BatchSize: 40, Workers: 4, Scans: 3, Reads: 200, PointWrites: 100, Seed: 3}
			e := start(t, target)
			res, err := Workloads(context.Background(), target, e.Client, e.Admin, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := []struct {
				workload  string
				ops, rows int64
			}{
				{WorkloadWrites, 8, 300}, // ceil(300/40) batches
				{WorkloadScans, 3, 900},
				{WorkloadPointReads, 200, 200},
				{WorkloadPointWrites, 100, 100},
			}
			// Every row of both write workloads is there, each with its
			// value (a scan of 400 rows; point reads of rows 300..399).
			all := cfg
			all.Rows, all.Scans = 400, 1
			if _, err := Scans(context.Background(), e.Client, all); err != nil {
				t.Fatal("scan after the point writes:", err)
			}
			pool := newValuePool(cfg.withDefaults())
			for i := 300; i < 400; i++ {
				row, err := e.Client.Open(cfg.Table).ReadRow(context.Background(), cfg.Key(i))
				if err != nil {
					t.Fatal(err)
				}
				if err := checkRow(row, cfg.Key(i), cfg.withDefaults(), pool.value(i)); err != nil {
					t.Fatal("after the point writes:", err)
				}
			}
			if len(res) != len(want) {
				t.Fatalf("got %d results, want %d", len(res), len(want))
			}
			for i, w := range want {
				r := res[i]
				if r.Workload != w.workload || r.Target != target || r.Ops != w.ops || r.Rows != w.rows {
					t.Errorf("result %d = %s/%s ops=%d rows=%d, want %s/%s ops=%d rows=%d",
						i, r.Target, r.Workload, r.Ops, r.Rows, target, w.workload, w.ops, w.rows)
				}
				if r.RowsPerSec <= 0 || r.P50Micros <= 0 || r.P99Micros < r.P50Micros {
					t.Errorf("%s: implausible figures %+v", r.Workload, r)
				}
			}
			// A second Setup starts over from an empty table.
			if err := Setup(context.Background(), e.Admin, cfg); err != nil {
				t.Fatal(err)
			}
			small := cfg
			small.Rows = 0
			if _, err := Scans(context.Background(), e.Client, small); err != nil {
				t.Fatal("scan after re-Setup:", err)
			}
		})
	}
}

// TestRunReport runs the whole comparison at a tiny size and checks both
// report formats.
func TestRunReport(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Options{
		Config:    Config{Rows: 200, BatchSize: 50, Workers: 2, Scans: 2, Reads: 50, PointWrites: 20},
		DataDir:   t.TempDir(),
		InProcess: true,
		Rounds:    2,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Per round 3 targets × 4 workloads.
	if len(rep.Results) != 24 || len(rep.Comparisons) != 4 {
		t.Fatalf("got %d results and %d comparisons, want 24 and 4", len(rep.Results), len(rep.Comparisons))
	}
	// The second round starts one target later: ebbtable, the ceiling,
	// then the emulator.
	var order []string
	for _, r := range rep.Results {
		if r.Round == 2 && (len(order) == 0 || order[len(order)-1] != r.Target) {
			order = append(order, r.Target)
		}
	}
	if want := []string{TargetEbbtable, TargetCeiling, TargetEmulator}; !slices.Equal(order, want) {
		t.Errorf("round 2 ran %v, want %v", order, want)
	}
	for _, c := range rep.Comparisons {
		if c.Workload == WorkloadPointWrites {
			// No goal: the report must not say it was missed.
			if c.Goal != 0 || c.Met != nil {
				t.Errorf("%s: goal %v, met %v; want no goal and no verdict", c.Workload, c.Goal, c.Met)
			}
			if c.CeilingRatio <= 0 || c.RowsPerSec[TargetCeiling] <= 0 {
				t.Errorf("%s: no ceiling: %+v", c.Workload, c)
			}
			continue
		}
		if c.CeilingRatio <= 0 {
			t.Errorf("%s: no ceiling ratio", c.Workload)
		}
		if c.Goal <= 0 || c.Met == nil || *c.Met != (c.MetBy != "") {
			t.Errorf("%s: goal %v, met %v, met by %q; want a goal and a verdict that agrees", c.Workload, c.Goal, c.Met, c.MetBy)
		}
	}
	var tbl bytes.Buffer
	if err := rep.WriteTable(&tbl); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{WorkloadWrites, WorkloadScans, WorkloadPointReads, "ratio", "ceiling",
		"point-writes floors, server / client cpu µs per write / writes per s: ebbtable - / ", "; ceiling (a Go map) - / "} {
		if !strings.Contains(tbl.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, tbl.String())
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Comparisons) != 4 || back.Comparisons[0].EmulatorRowsPerSec <= 0 || back.Comparisons[3].Met != nil || strings.Count(js.String(), `"met"`) != 3 {
		t.Fatalf("JSON round trip lost data: %s", js.String())
	}

	if _, err := Run(context.Background(), Options{Targets: []string{"nope"}, InProcess: true}); err == nil {
		t.Fatal("unknown target accepted")
	}
}

// TestServerCPUVerdict: ebbtable's server CPU per operation at most the
// emulator's is met, above it missed, and without both figures no verdict.
func TestServerCPUVerdict(t *testing.T) {
	for _, c := range []struct {
		eb, em float64
		want   string
	}{{4.4, 11.9, "ok"}, {60, 60, "ok"}, {93.8, 63.1, "MISS"}, {0, 63.1, "-"}, {4.4, 0, "-"}} {
		m := map[string]float64{TargetEbbtable: c.eb, TargetEmulator: c.em, TargetCeiling: 1}
		if got := serverCPUVerdict(m); got != c.want {
			t.Errorf("ebbtable %.1f, emulator %.1f µs: %q, want %q", c.eb, c.em, got, c.want)
		}
	}
}

// TestRoundOrder: over as many rounds as there are targets, every target
// runs once in every position, and the caller's list is left as it was.
func TestRoundOrder(t *testing.T) {
	targets := []string{"a", "b", "c", "d"}
	for n := 1; n <= len(targets); n++ {
		ts := targets[:n]
		seen := map[string]map[int]bool{}
		for round := 1; round <= n; round++ {
			order := roundOrder(ts, round)
			if len(order) != n {
				t.Fatalf("%d targets, round %d: %v", n, round, order)
			}
			for pos, x := range order {
				if seen[x] == nil {
					seen[x] = map[int]bool{}
				}
				seen[x][pos] = true
			}
		}
		for _, x := range ts {
			if len(seen[x]) != n {
				t.Errorf("%d targets: %q ran in positions %v, want each of %d once", n, x, seen[x], n)
			}
		}
		if got := roundOrder(ts, 1); !slices.Equal(got, ts) {
			t.Errorf("round 1 ran %v, want the given order %v", got, ts)
		}
	}
	if !slices.Equal(targets, []string{"a", "b", "c", "d"}) {
		t.Errorf("roundOrder changed its argument: %v", targets)
	}
}

// Benchmark sizes: small, so the whole suite runs in well under a minute.
const (
	benchRows    = 5000
	benchWorkers = 8
)

func report(b *testing.B, r Result) {
	b.ReportMetric(r.RowsPerSec, "rows/s")
	b.ReportMetric(r.P50Micros, "p50-µs")
	b.ReportMetric(r.P99Micros, "p99-µs")
}

// BenchmarkWrites: one op is one row written (ApplyBulk, 100 rows a call).
func BenchmarkWrites(b *testing.B) {
	for _, target := range targets {
		b.Run(target, func(b *testing.B) {
			e := start(b, target)
			cfg := Config{Table: "writes", Workers: benchWorkers}
			if err := Setup(context.Background(), e.Admin, cfg); err != nil {
				b.Fatal(err)
			}
			cfg.Rows = b.N
			b.ResetTimer()
			r, err := Writes(context.Background(), e.Client, cfg)
			if err != nil {
				b.Fatal(err)
			}
			report(b, r)
		})
	}
}

// preload starts target with benchRows rows in table "t".
func preload(b *testing.B, target string) (*Endpoint, Config) {
	e := start(b, target)
	cfg := Config{Table: "t", Rows: benchRows, Workers: benchWorkers}
	if err := Setup(context.Background(), e.Admin, cfg); err != nil {
		b.Fatal(err)
	}
	if _, err := Writes(context.Background(), e.Client, cfg); err != nil {
		b.Fatal(err)
	}
	return e, cfg
}

// BenchmarkScans: one op is one full scan of benchRows rows.
func BenchmarkScans(b *testing.B) {
	for _, target := range targets {
		b.Run(target, func(b *testing.B) {
			e, cfg := preload(b, target)
			cfg.Scans = b.N
			b.ResetTimer()
			r, err := Scans(context.Background(), e.Client, cfg)
			if err != nil {
				b.Fatal(err)
			}
			report(b, r)
		})
	}
}

// BenchmarkPointReads: one op is one ReadRow of a random existing row.
func BenchmarkPointReads(b *testing.B) {
	for _, target := range targets {
		b.Run(target, func(b *testing.B) {
			e, cfg := preload(b, target)
			cfg.Reads = b.N
			b.ResetTimer()
			r, err := PointReads(context.Background(), e.Client, cfg)
			if err != nil {
				b.Fatal(err)
			}
			report(b, r)
		})
	}
}

// TestHotRows runs the hot-row workload briefly against ebbtable and the
// emulator: it must run operations of both kinds without error and report
// CPU per operation.
func TestHotRows(t *testing.T) {
	// Not parallel: it counts the operations of 150 ms (at least 10).
	hc := DefaultHotRows(150 * time.Millisecond)
	hc.Workers, hc.Rows, hc.ValueSize = 4, 10, 64
	res, err := RunHotRows(context.Background(), HotRowsOptions{HotRowsConfig: hc, Targets: []string{TargetEbbtable, TargetEmulator}, InProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results, want 2", len(res))
	}
	for _, r := range res {
		if r.Workload != WorkloadHotRows || r.Ops < 10 || r.Ops != r.Rows || r.P50Micros <= 0 {
			t.Errorf("%s: implausible %+v", r.Target, r)
		}
	}
}

// TestRawPebble runs raw Pebble beside ebbtable (RawPebble) and checks the
// writes comparison gives ebbtable's throughput as a share of it.
func TestRawPebble(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Options{
		Config:    Config{Rows: 300, BatchSize: 50, Workers: 2, PointWrites: 40},
		DataDir:   t.TempDir(),
		InProcess: true,
		RawPebble: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var pb, pbPoint *Result
	for i, r := range rep.Results {
		if r.Target == TargetPebble && r.Workload == WorkloadWrites {
			pb = &rep.Results[i]
		}
		if r.Target == TargetPebble && r.Workload == WorkloadPointWrites {
			pbPoint = &rep.Results[i]
		}
	}
	// Six targets, each writes and point writes.
	if len(rep.Results) != 12 || pb == nil || pb.Rows != 300 || pb.Ops != 6 || pb.RowsPerSec <= 0 ||
		pbPoint == nil || pbPoint.Rows != 40 || pbPoint.Ops != 40 || pbPoint.RowsPerSec <= 0 || pbPoint.ServerCPUMicrosPerRow <= 0 {
		t.Fatalf("results %+v: want twelve, one a raw Pebble write of 300 rows in 6 batches, one of 40 single-row commits", rep.Results)
	}
	if len(rep.Comparisons) != 2 {
		t.Fatalf("got %d comparisons, want 2", len(rep.Comparisons))
	}
	c := rep.Comparisons[0]
	if c.PebbleRowsPerSec != pb.RowsPerSec || c.EbbtableOfPebble <= 0 || c.CeilingOfPebble <= 0 ||
		c.EbbtableOfPebbleMin > c.EbbtableOfPebble || c.EbbtableOfPebble > c.EbbtableOfPebbleMax || c.CeilingPebbleOfPebble <= 0 ||
		c.CeilingWALOfPebble <= 0 || c.CeilingWALOfPebbleMin > c.CeilingWALOfPebble || c.CeilingWALOfPebble > c.CeilingWALOfPebbleMax {
		t.Fatalf("implausible comparison %+v", c)
	}
	// In-process, a target's client CPU is the whole process's, so its
	// CPU share of raw Pebble is raw Pebble's CPU per row over it.
	for _, target := range []string{TargetEbbtable, TargetEmulator, TargetCeiling, TargetCeilingPebble, TargetCeilingWAL} {
		var r Result
		for _, x := range rep.Results {
			if x.Target == target && x.Workload == WorkloadWrites {
				r = x
			}
		}
		want := pb.ServerCPUMicrosPerRow / (r.CPUMicrosPerRow + r.ServerCPUMicrosPerRow)
		if got, rg := c.CPUShareOfPebble[target], c.CPUShareOfPebbleRange[target]; got <= 0 || math.Abs(got-want) > 1e-9 || rg[0] != got || rg[1] != got {
			t.Errorf("%s: cpu share of raw Pebble %v (range %v), want %v", target, got, rg, want)
		}
	}
	var tbl bytes.Buffer
	if err := rep.WriteTable(&tbl); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tbl.String(), "raw pebble") || !strings.Contains(tbl.String(), "group-committed log") ||
		!strings.Contains(tbl.String(), "steady under load): ebbtable") || strings.Count(tbl.String(), "raw pebble (synced batches") != 1 {
		t.Errorf("table lacks raw Pebble's line, or has it twice:\n%s", tbl.String())
	}
	// The point-writes line gives every floor's throughput (in process, only
	// raw Pebble has a server CPU apart from the client's).
	pw := rep.Comparisons[1]
	for _, target := range []string{TargetCeiling, TargetCeilingWAL, TargetCeilingPebble} {
		want := fmt.Sprintf("; %s (", target)
		if pw.Workload != WorkloadPointWrites || pw.RowsPerSec[target] <= 0 || !strings.Contains(tbl.String(), want) {
			t.Errorf("%s: no point writes in %+v, or the table lacks %q:\n%s", target, pw, want, tbl.String())
		}
	}
	if want := fmt.Sprintf("pebble (raw: one-cell synced commits in this process, no gRPC) %.1f / - / ", pbPoint.ServerCPUMicrosPerRow); !strings.Contains(tbl.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, tbl.String())
	}
}

// writeThroughCeiling starts a ceiling target that keeps its writes in a
// test directory, writes cfg's rows through it (and its point writes, one
// MutateRow each), closes it and returns the directory.
func writeThroughCeiling(t *testing.T, cfg Config, start func(context.Context, string) (*Endpoint, error)) string {
	t.Helper()
	// The client retries a refused write (Internal) until its deadline:
	// a minute, not the test binary's ten.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	e, err := start(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(ctx, e.Admin, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := Writes(ctx, e.Client, cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.PointWrites > 0 {
		if _, err := PointWrites(ctx, e.Client, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCeilingPebbleWrites checks the ceiling-pebble target commits every
// cell written, by MutateRows and by MutateRow, to its Pebble database
// under ebbtable's key and value encoding, and raw Pebble's value encoding
// is storage.EncodeValue's.
func TestCeilingPebbleWrites(t *testing.T) {
	t.Parallel()
	cfg := Config{Table: "t", Rows: 250, BatchSize: 40, Workers: 3, PointWrites: 30, Seed: 5}
	dir := writeThroughCeiling(t, cfg, StartCeilingPebble)
	db, err := storage.Open(storage.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	pool := newValuePool(cfg.withDefaults())
	want := map[string][]byte{}
	for i := range cfg.Rows + cfg.PointWrites {
		want[cfg.Key(i)] = pool.value(i)
	}
	n := 0
	for it.First(); it.Valid(); it.Next() {
		k, err := storage.DecodeCellKey(it.Key())
		if err != nil {
			continue // the full-memtable tombstone's key, say
		}
		v, _, err := storage.DecodeValue(it.Value())
		if err != nil || !bytes.Equal(v, want[string(k.Row)]) || string(k.Qualifier) != "c" {
			t.Fatalf("cell %q: value %x (err %v), want %x", k.Row, v, err, want[string(k.Row)])
		}
		n++
	}
	if n != cfg.Rows+cfg.PointWrites {
		t.Fatalf("%d cells in Pebble, want %d", n, cfg.Rows+cfg.PointWrites)
	}
	if v := []byte("value"); !bytes.Equal(storage.EncodeValue(v, 0), append([]byte{0}, v...)) {
		t.Fatal("storage.EncodeValue(v, 0) is no longer a zero byte and v: fix writePebble and rawPebbleWrites")
	}
}
