// Command ebbbench compares ebbtable with the reference Bigtable emulator
// (bttest): it starts each in turn, runs the bench package's workloads
// (bulk writes, full scans, point reads) against it through the official
// client, and prints throughput, latency, CPU per row and the ratio. A
// third target, the ceiling (a server answering from a Go map), bounds the
// ratio any server could reach with this client on this machine.
//
// By default every target runs as its own process, as users run them:
// ebbtable's binary and the emulator's (cloud.google.com/go/bigtable/cmd/emulator)
// are built at start, the ceiling is this command with --serve-ceiling.
// The targets are alternated for --rounds rounds; each workload's line
// gives the median ratio and its range, and each server process's own CPU
// per row (from /proc) beside the client's. --in-process runs the servers
// inside this process instead.
//
//	go run ./cmd/ebbbench [--rounds N] [--rows N] [--workers N] [--reads N] [--scans N]
//	    [--only ebbtable|emulator|ceiling] [--data DIR] [--json] [--cpuprofile PREFIX]
//	    [--in-process] [--ebbtable-bin PATH] [--emulator-bin PATH] [--raw-pebble]
//
// --raw-pebble adds three write-only targets to each round: raw Pebble
// (bench.TargetPebble: the writes workload's cells, encoded as ebbtable
// encodes them, committed in synced batches of --batch rows by --workers
// goroutines straight into a Pebble opened with ebbtable's options, in
// this process, no gRPC), the ceiling committing each call's cells to
// such a Pebble before acknowledging it (bench.TargetCeilingPebble, its
// own process) and the ceiling appending each call's request bytes,
// undecoded, to one log file, acknowledged after a group-committed
// fdatasync covers them
// (bench.TargetCeilingWAL, its own process: the least any durable server
// does per write behind this client). The writes line is then followed by
// ebbtable's, the ceiling's, ceiling-pebble's and ceiling-wal's throughput
// as shares of raw Pebble's in the same round. With --point-writes N all
// of them take the single-row writes too (the ceilings serve MutateRow as
// they serve MutateRows; raw Pebble commits each of the N cells alone, with
// pebble.Sync, from --workers goroutines), and a "point-writes floors"
// line gives each target's server and client CPU per write and writes a
// second beside ebbtable's and the emulator's: the least a durable server
// pays per single-row write, against the CPU target. The ceiling processes run
// at ebbtable serve's Go GC percent. With --raw-pebble this process re-executes itself with glibc's
// huge-page tunable (internal/hugepages), as ebbtable's serve does, so raw
// Pebble's memtable is on the same pages as serve's; its children inherit
// it (an ebbtable binary older than serve's own re-exec then gets it too).
//
// --cpuprofile PREFIX writes the ebbtable server's CPU profile under each
// workload of the first round to PREFIX.writes, PREFIX.scans and
// PREFIX.point-reads (and PREFIX.point-writes; go tool pprof
// PREFIX.writes).
//
// With --hot-rows DURATION it runs only the hot-row workload instead
// (bench.HotRows: 50 clients, half ReadRow and half 1 KiB SetCell on 100
// rows of a maxversions=1 family) for DURATION against the emulator and
// ebbtable, alternated for --rounds rounds, each server its own process as
// in the default mode (ebbtable's serve runs at its own Go GC percent), and
// prints each server's CPU per operation and, per round, ebbtable's
// throughput and CPU per operation against the emulator's. With
// --cpuprofile PREFIX the ebbtable server's profile of the first round's
// timed run goes to PREFIX.hot-rows. --hot-slice INTERVAL also prints the
// CPU per operation of each consecutive INTERVAL of every run (whether a
// long run's cost grows within one server process), and with --cpuprofile
// splits the profile likewise (PREFIX.hot-rows, PREFIX.hot-rows.2, …):
//
//	go run ./cmd/ebbbench --hot-rows 2s --rounds 3
//	go run ./cmd/ebbbench --hot-rows 16s --only ebbtable --rounds 1
//	go run ./cmd/ebbbench --hot-rows 40s --hot-slice 4s --only ebbtable --rounds 1
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/ebbtable/ebbtable/bench"
	"github.com/ebbtable/ebbtable/cli"
	"github.com/ebbtable/ebbtable/internal/hugepages"
)

func main() {
	def := bench.DefaultConfig()
	var (
		opts bench.Options
		only string
		js   bool
	)
	opts.Config = def
	flag.IntVar(&opts.Rows, "rows", def.Rows, "rows to write (and then scan and read)")
	flag.IntVar(&opts.Workers, "workers", def.Workers, "concurrent client workers")
	flag.IntVar(&opts.Reads, "reads", def.Reads, "random point reads (0 skips them)")
	flag.IntVar(&opts.Scans, "scans", def.Scans, "full-table scans (0 skips them)")
	flag.IntVar(&opts.PointWrites, "point-writes", def.PointWrites, "single-row writes: Apply calls of one SetCell each, to new rows (0 skips them)")
	flag.IntVar(&opts.BatchSize, "batch", def.BatchSize, "rows per ApplyBulk call")
	flag.IntVar(&opts.ValueSize, "value-size", def.ValueSize, "bytes per cell value")
	flag.Uint64Var(&opts.Seed, "seed", def.Seed, "seed for keys, values and read order")
	flag.StringVar(&opts.DataDir, "data", "", "ebbtable data directory; its table \"bench\" is recreated (default: a temporary directory, removed afterwards)")
	flag.StringVar(&only, "only", "", "run only this target: ebbtable, emulator, ceiling, ceiling-pebble, ceiling-wal or pebble")
	flag.BoolVar(&js, "json", false, "print the report as JSON")
	flag.StringVar(&opts.CPUProfile, "cpuprofile", "", "write CPU profiles of the ebbtable workloads to `PREFIX`.writes, .scans and .point-reads (with --hot-rows: PREFIX.hot-rows, of the first round's ebbtable run)")
	hot := flag.Duration("hot-rows", 0, "run only the hot-row workload, for this long")
	slice := flag.Duration("hot-slice", 0, "with --hot-rows: also report the CPU per operation of each consecutive `INTERVAL` of the run")
	flag.IntVar(&opts.Rounds, "rounds", 3, "run the targets in turn this many times; ratios are the median over rounds, with their range")
	flag.BoolVar(&opts.RawPebble, "raw-pebble", false, "also run, each round, the ceiling committing its writes to Pebble (ceiling-pebble), the ceiling appending them to a group-committed log (ceiling-wal) and raw Pebble itself: synced batches of the writes workload's cells into a Pebble opened with ebbtable's options, in this process, no gRPC (the servers' write throughput is given as shares of raw Pebble's); with --point-writes, their single-row writes too (raw Pebble: one cell per synced commit)")
	flag.BoolVar(&opts.InProcess, "in-process", false, "run the servers inside this process instead of one process each")
	flag.StringVar(&opts.Binaries.Ebbtable, "ebbtable-bin", "", "ebbtable binary to run (default: built from this module at start)")
	flag.StringVar(&opts.Binaries.Emulator, "emulator-bin", "", "emulator binary to run (default: built from cloud.google.com/go/bigtable/cmd/emulator at start)")
	serveCeiling := flag.Bool("serve-ceiling", false, "only serve the ceiling target on --addr (the process mode starts this)")
	ceilingAddr := flag.String("addr", "127.0.0.1:0", "with --serve-ceiling: the address to listen on")
	ceilingWAL := flag.String("ceiling-wal", "", "with --serve-ceiling: append each MutateRows and MutateRow call's request bytes, undecoded, to a log file in `DIR` and acknowledge it once a group-committed fdatasync covers them (the ceiling-wal target)")
	ceilingPebble := flag.String("ceiling-pebble", "", "with --serve-ceiling: commit each MutateRows and MutateRow call's cells to a Pebble database in `DIR` with a synced batch before acknowledging it (the ceiling-pebble target)")
	flag.Parse()
	if opts.RawPebble {
		// Raw Pebble (here) and ceiling-pebble (a child) on huge pages,
		// as ebbtable's serve runs its Pebble: the children inherit the
		// environment, which leaves the emulator and the ceiling (pure
		// Go) alone.
		hugepages.Reexec()
	}

	if *serveCeiling {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		// The ceiling bounds what a server reaches: it runs at the Go GC
		// percent ebbtable's serve runs at, as serve does (GOGC, if set,
		// wins). At Go's default 100 its GC alone cost the no-op
		// ceiling about a fifth of its CPU per written row.
		if os.Getenv("GOGC") == "" {
			debug.SetGCPercent(cli.DefaultGoGCPercent)
		}
		serve := func() error { return bench.ServeCeilingPebble(ctx, *ceilingAddr, *ceilingPebble, os.Stdout) }
		if *ceilingWAL != "" {
			serve = func() error { return bench.ServeCeilingWAL(ctx, *ceilingAddr, *ceilingWAL, os.Stdout) }
		}
		if err := serve(); err != nil {
			fmt.Fprintln(os.Stderr, "ebbbench:", err)
			os.Exit(1)
		}
		return
	}

	switch only {
	case "":
	case bench.TargetEbbtable, bench.TargetEmulator, bench.TargetCeiling, bench.TargetCeilingPebble, bench.TargetCeilingWAL, bench.TargetPebble:
		opts.Targets = []string{only}
	default:
		fmt.Fprintf(os.Stderr, "ebbbench: --only must be %s, %s, %s, %s, %s or %s\n", bench.TargetEbbtable, bench.TargetEmulator, bench.TargetCeiling, bench.TargetCeilingPebble, bench.TargetCeilingWAL, bench.TargetPebble)
		os.Exit(2)
	}
	opts.Progress = os.Stderr
	if *hot > 0 {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		hc := bench.DefaultHotRows(*hot)
		hc.Slice = *slice
		ho := bench.HotRowsOptions{HotRowsConfig: hc, Targets: opts.Targets, Rounds: opts.Rounds,
			InProcess: opts.InProcess, Binaries: opts.Binaries, DataDir: opts.DataDir, Progress: os.Stderr}
		if opts.CPUProfile != "" {
			ho.CPUProfile = opts.CPUProfile + ".hot-rows"
		}
		// Each run's line goes to stderr as it ends (Progress); stdout
		// gets the per-round comparison.
		res, err := bench.RunHotRows(ctx, ho)
		if only != "" {
			for _, r := range res {
				fmt.Println(bench.FormatHotRows(r))
			}
		}
		fmt.Print(bench.HotRowsSummary(res))
		if err != nil {
			fmt.Fprintln(os.Stderr, "ebbbench:", err)
			os.Exit(1)
		}
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := bench.Run(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ebbbench:", err)
		os.Exit(1)
	}
	if js {
		err = rep.WriteJSON(os.Stdout)
	} else {
		err = rep.WriteTable(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ebbbench:", err)
		os.Exit(1)
	}
}
