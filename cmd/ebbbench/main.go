// Command ebbbench compares ebbtable with the reference Bigtable emulator
// (bttest) in one process: it starts each in turn, runs the bench package's
// workloads (bulk writes, full scans, point reads) against it through the
// official client, and prints throughput, latency and the ratio. A third
// target, the ceiling (a server answering from a Go map), bounds the ratio
// any server could reach with this client on this machine.
//
//	go run ./cmd/ebbbench [--rows N] [--workers N] [--reads N] [--scans N]
//	    [--only ebbtable|emulator|ceiling] [--data DIR] [--json] [--cpuprofile PREFIX]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/ebbtable/ebbtable/bench"
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
	flag.IntVar(&opts.BatchSize, "batch", def.BatchSize, "rows per ApplyBulk call")
	flag.IntVar(&opts.ValueSize, "value-size", def.ValueSize, "bytes per cell value")
	flag.Uint64Var(&opts.Seed, "seed", def.Seed, "seed for keys, values and read order")
	flag.StringVar(&opts.DataDir, "data", "", "ebbtable data directory; its table \"bench\" is recreated (default: a temporary directory, removed afterwards)")
	flag.StringVar(&only, "only", "", "run only this target: ebbtable, emulator or ceiling")
	flag.BoolVar(&js, "json", false, "print the report as JSON")
	flag.StringVar(&opts.CPUProfile, "cpuprofile", "", "write CPU profiles of the ebbtable workloads to `PREFIX`.writes, .scans and .point-reads")
	flag.Parse()

	switch only {
	case "":
	case bench.TargetEbbtable, bench.TargetEmulator, bench.TargetCeiling:
		opts.Targets = []string{only}
	default:
		fmt.Fprintf(os.Stderr, "ebbbench: --only must be %s, %s or %s\n", bench.TargetEbbtable, bench.TargetEmulator, bench.TargetCeiling)
		os.Exit(2)
	}
	opts.Progress = os.Stderr

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
