package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

// serveCeilingEnv makes this test binary serve the ceiling (as ebbbench
// --serve-ceiling does), so the process mode can start it as a child.
const serveCeilingEnv = "EBBBENCH_TEST_SERVE_CEILING"

func TestMain(m *testing.M) {
	if os.Getenv(serveCeilingEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		addr := "127.0.0.1:0"
		for i, a := range os.Args {
			if a == "--addr" && i+1 < len(os.Args) {
				addr = os.Args[i+1]
			}
		}
		err := ServeCeiling(ctx, addr, os.Stdout)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestEbbtableAsAProcess runs the default (process) mode at a tiny size:
// ebbtable's and the emulator's binaries built and started as children,
// the ceiling as this test binary, two rounds. Every server's own CPU is
// measured, every comparison has a range, and the server's CPU profile of
// each workload is a gzipped profile.
func TestEbbtableAsAProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries")
	}
	t.Parallel()
	// The test kit's builds are shared with the other packages that run
	// ebbtable and kept between runs; Binaries.Build is ebbbench's.
	ebb, err := testkit.Build("github.com/ebbtable/ebbtable/cmd/ebbtable", "ebbtable")
	if err != nil {
		t.Fatal(err)
	}
	emu, err := testkit.Build("cloud.google.com/go/bigtable/cmd/emulator", "emulator")
	if err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(t.TempDir(), "prof")
	var progress bytes.Buffer
	rep, err := Run(context.Background(), Options{
		Config:     Config{Rows: 300, BatchSize: 50, Workers: 2, Scans: 2, Reads: 60, PointWrites: 40},
		Rounds:     2,
		CPUProfile: prefix,
		Progress:   &progress,
		Binaries: Binaries{Ebbtable: ebb, Emulator: emu, Ceiling: Command{
			Path: os.Args[0],
			Env:  []string{serveCeilingEnv + "=1"},
		}},
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if rep.Mode != ModeProcess || len(rep.Results) != 2*3*4 || len(rep.Comparisons) != 4 {
		t.Fatalf("mode %s, %d results, %d comparisons; want process, 24 and 4", rep.Mode, len(rep.Results), len(rep.Comparisons))
	}
	for _, r := range rep.Results {
		if r.Round < 1 || r.Round > 2 || r.RowsPerSec <= 0 {
			t.Errorf("implausible result %+v", r)
		}
	}
	for _, c := range rep.Comparisons {
		if c.Rounds != 2 || c.RatioMin > c.Ratio || c.Ratio > c.RatioMax || c.CeilingRatio <= 0 {
			t.Errorf("%s: implausible comparison %+v", c.Workload, c)
		}
		for _, target := range []string{TargetEbbtable, TargetEmulator, TargetCeiling} {
			if c.ServerCPU[target] <= 0 {
				t.Errorf("%s: no server CPU measured for %s: %+v", c.Workload, target, c.ServerCPU)
			}
		}
		if c.ClientCPU[TargetEbbtable] <= 0 {
			t.Errorf("%s: no client CPU measured", c.Workload)
		}
	}
	var tbl bytes.Buffer
	if err := rep.WriteTable(&tbl); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"mode=process", "server cpu", "client cpu", WorkloadPointReads, "("} {
		if !strings.Contains(tbl.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, tbl.String())
		}
	}
	// Each workload's server CPU comes with the verdict on ebbtable's
	// against the emulator's.
	for _, c := range rep.Comparisons {
		v := serverCPUVerdict(c.ServerCPU)
		want := fmt.Sprintf("%.1f / %.1f / %.1f %s", c.ServerCPU[TargetEbbtable], c.ServerCPU[TargetEmulator], c.ServerCPU[TargetCeiling], v)
		if v == "-" || !strings.Contains(tbl.String(), want) {
			t.Errorf("%s: table lacks %q:\n%s", c.Workload, want, tbl.String())
		}
	}
	// The point writes' floors: the ceiling's server and client CPU per
	// write beside ebbtable's and the emulator's.
	pw := rep.Comparisons[3]
	for _, target := range []string{TargetEbbtable, TargetEmulator, TargetCeiling} {
		want := fmt.Sprintf(" %.1f / %.1f / %.0f", pw.ServerCPU[target], pw.ClientCPU[target], pw.RowsPerSec[target])
		if pw.Workload != WorkloadPointWrites || !strings.Contains(tbl.String(), "point-writes floors") || !strings.Contains(tbl.String(), want) {
			t.Errorf("%s: the point-writes floors lack %q:\n%s", target, want, tbl.String())
		}
	}
	for _, w := range []string{WorkloadWrites, WorkloadScans, WorkloadPointReads, WorkloadPointWrites} {
		// A pprof profile is a gzipped protocol buffer.
		b, err := os.ReadFile(prefix + "." + w)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 20 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("server profile of %s: %d bytes, not a gzipped profile", w, len(b))
		}
	}
}

// TestHotRowsAsAProcess runs the hot-row workload briefly with each server
// its own process, two rounds: every result has the server's own CPU per
// operation, the summary counts both rounds, and the ebbtable server's
// profile is written; with slices of 50 ms each result also has the CPU
// per operation of each slice.
func TestHotRowsAsAProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries")
	}
	// Not parallel: it counts the operations of 150 ms (at least 10).
	ebb, err := testkit.Build("github.com/ebbtable/ebbtable/cmd/ebbtable", "ebbtable")
	if err != nil {
		t.Fatal(err)
	}
	emu, err := testkit.Build("cloud.google.com/go/bigtable/cmd/emulator", "emulator")
	if err != nil {
		t.Fatal(err)
	}
	hc := DefaultHotRows(150 * time.Millisecond)
	hc.Workers, hc.Rows, hc.ValueSize = 4, 10, 64
	hc.Slice = 50 * time.Millisecond
	prof := filepath.Join(t.TempDir(), "prof.hot-rows")
	res, err := RunHotRows(context.Background(), HotRowsOptions{HotRowsConfig: hc, Rounds: 2, CPUProfile: prof,
		Binaries: Binaries{Ebbtable: ebb, Emulator: emu}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("%d results, want 4", len(res))
	}
	for _, r := range res {
		if r.Workload != WorkloadHotRows || r.Ops < 10 || r.ServerCPUMicrosPerRow <= 0 || r.CPUMicrosPerRow <= 0 || r.Round < 1 {
			t.Errorf("%s: implausible %+v", r.Target, r)
		}
		var n int64
		for _, s := range r.Slices {
			if s.Sec <= 0 || s.Ops <= 0 || s.ServerCPUMicrosPerRow < 0 {
				t.Errorf("%s: implausible slice %+v", r.Target, s)
			}
			n += s.Ops
		}
		if len(r.Slices) == 0 || n > r.Ops {
			t.Errorf("%s: %d ops in slices %+v, of %d", r.Target, n, r.Slices, r.Ops)
		}
	}
	if sum := HotRowsSummary(res); !strings.Contains(sum, "of 2 rounds") {
		t.Errorf("summary:\n%s", sum)
	}
	if b, err := os.ReadFile(prof); err != nil || len(b) < 20 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("server profile: %d bytes, %v; want a gzipped profile", len(b), err)
	}
}
