package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/rowttl"
	"github.com/ebbtable/ebbtable/server"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
	"github.com/spf13/cobra"
)

// serveFlags holds the serve command's flag values.
type serveFlags struct {
	addr       string
	hostPort   string
	dataDir    string
	httpAddr   string
	visibility string
	clusterID  string
	join       string
	debugClock string
	advertise  string

	gcInterval    time.Duration
	gcBatchCells  int
	gcPause       time.Duration
	gcReclaimRate float64

	ttlInterval  time.Duration
	ttlBatchSize int

	goGCPercent int

	maxSyncDuration time.Duration
	undelete        time.Duration
	ballastSize     string

	console, consoleWrites bool
	viewRules              string // --materialized-view-rules
	// sec: TLS, tokens, peers, resource bounds (serve_security.go).
	sec        securityFlags
	cpuProfile string
	// cluster: --etcd, --node-id, --shared-storage… (cluster.go).
	cluster clusterFlags
}

func newServeCmd(stdout, stderr io.Writer) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run an ebbtable server",
		Long: `Run an ebbtable server: the Bigtable Data and Table Admin gRPC APIs on
--addr, and the web console (/), /metrics, /healthz and /readyz on --http-addr.

Once the server accepts connections it prints one line to stdout:

    ebbtable running on HOST:PORT

with the address it actually listens on (so --addr 127.0.0.1:0 reveals the
chosen port). Logs go to stderr. SIGINT or SIGTERM stops the server
gracefully; a second signal kills it.

The garbage collector starts a pass every --gc-interval (a fixed cadence,
however long a pass runs); 'ebbtable gc run' starts one at once. A pass
deletes at most --gc-batch-cells cells per batch (examining up to 2,000 cells,
or twice the batch size when that is more) and waits at least --gc-pause
between batches. It then compacts what it deleted so the disk space comes
back, writing at --gc-reclaim-rate (faster when the span would not be
rewritten within half an interval at that rate).

Several processes form one instance, each serving one cluster: start the
first with --cluster-id A, then each further one with its own --cluster-id
and --join HOST:PORT of a running cluster. A joining process copies the
instance's data before it serves (so it prints its "running" line only
then), and replicates with every cluster from then on. Its data directory is
its own: a process that joined once rejoins by itself on restart.

Cluster mode (docs/scale-out.md): --etcd ENDPOINTS --node-id ID joins a
cluster of nodes that share etcd and, with --shared-storage, an SSTable
store. Each table is cut into tablets, each owned by one node under its
etcd lease; every node serves the whole API, forwarding each tablet's part
of a request to its owner. 'ebbtable nodes', 'node' and 'tablets' operate it.

TLS, tokens, peers and resource bounds (the --tls-*, --auth-token-file,
--peer-*, --insecure and --max-* flags) are described in docs/security.md. A
non-loopback --addr or --http-addr needs TLS and tokens, or --insecure.
SIGHUP re-reads the certificate, its key and the token file.`,
		Example: `  ebbtable serve --data /var/lib/ebbtable
  ebbtable serve --cluster-id b --addr 127.0.0.1:9002 --data ./b --join 127.0.0.1:8086
  ebbtable serve --addr 127.0.0.1:0 --http-addr off --data /tmp/ebb
  ebbtable serve --gc-interval 10m --gc-batch-cells 500 --gc-pause 5ms
  ebbtable serve --etcd 127.0.0.1:2379 --node-id n1 --shared-storage file:///srv/sst --data ./n1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := f.options(cmd)
			if err != nil {
				return err
			}
			opts.Logger = slog.New(slog.NewTextHandler(stderr, nil))
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			opts.Security.Reload = reloadOnSIGHUP(ctx)
			// Fail-stop: the server has already stopped serving and logged
			// the cause; a process that cannot trust its disk exits rather
			// than linger half-alive.
			opts.OnFatal = func(error) { os.Exit(exitFatal) }
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(f.goGCPercent)
			}
			f.sec.setMemoryLimit()
			if f.cpuProfile != "" {
				stop, err := startCPUProfile(f.cpuProfile, opts.Logger)
				if err != nil {
					return err
				}
				defer stop()
			}
			return serve(ctx, opts, stdout)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "addr", "localhost:8086", "gRPC listen address, HOST:PORT (port 0 picks a free port)")
	fl.StringVar(&f.hostPort, "host-port", "", "alias for --addr")
	fl.StringVar(&f.dataDir, "data", "./ebbtable-data", "data directory (created if missing)")
	fl.StringVar(&f.httpAddr, "http-addr", "localhost:8087", `metrics and health address, HOST:PORT, or "off" to disable`)
	fl.StringVar(&f.visibility, "gc-visibility", "hidden", "cells a GC rule makes eligible: hidden at once, or readable until-collected")
	fl.StringVar(&f.clusterID, "cluster-id", "ebbtable", "this process's cluster id in the instance (each replicating process needs its own)")
	fl.StringVar(&f.join, "join", "", "HOST:PORT of a running cluster: join its instance as a further cluster, copying its data before serving (with --etcd, give it to every node: the cluster joins once, one node copies, docs/replication.md)")
	fl.StringVar(&f.advertise, "advertise-addr", "", "HOST:PORT peers reach this process at (default: the listen address)")
	fl.StringVar(&f.debugClock, "debug-clock", "", `debugging only: run on a clock that 'ebbtable debug clock' can move forward, starting at this RFC 3339 time (or "now")`)
	fl.DurationVar(&f.gcInterval, "gc-interval", time.Minute, "start a garbage-collection pass this often")
	fl.IntVar(&f.gcBatchCells, "gc-batch-cells", collector.DefaultBatchCells, "most cells the garbage collector deletes in one batch")
	fl.DurationVar(&f.gcPause, "gc-pause", time.Millisecond, "pause between the garbage collector's batches, so foreground reads keep their latency (0: none)")
	fl.Float64Var(&f.gcReclaimRate, "gc-reclaim-rate", float64(collector.DefaultReclaimRate)/(1<<20), "MiB/s the compaction after a GC pass writes at, raised when needed to finish within half an interval (0: full speed)")
	fl.DurationVar(&f.ttlInterval, "ttl-interval", time.Hour, "start a run of the row deletion job this often")
	fl.IntVar(&f.ttlBatchSize, "ttl-batch-size", 500, "most expired rows the row deletion job deletes in one atomic batch")
	fl.IntVar(&f.goGCPercent, "go-gc-percent", DefaultGoGCPercent, "the Go runtime's GC percent for this process (the GOGC environment variable, when set, wins)")
	fl.DurationVar(&f.undelete, "undelete-retention", server.DefaultUndeleteRetention, "how long a deleted table stays restorable with UndeleteTable (its data is kept until then); 0: deleted at once")
	fl.DurationVar(&f.maxSyncDuration, "max-sync-duration", table.DefaultMaxSyncDuration, "a disk write or sync taking longer than this stops the server (a stalled disk); 0 disables the check")
	fl.StringVar(&f.ballastSize, "ballast-size", "1%", `size of the emergency ballast file DATA/`+storage.BallastName+` that gives a full disk a way back: bytes with a unit (64MiB), a percentage of the filesystem (at most 1 GiB), or 0 for none`)
	fl.BoolVar(&f.console, "console", true, "serve the web console at / on --http-addr (docs/console.md)")
	fl.BoolVar(&f.consoleWrites, "console-writes", false, "let the web console run actions that change data (a GC pass, a row deletion run); off, it only reads")
	fl.StringVar(&f.viewRules, "materialized-view-rules", "bigtable", "which materialized view queries CreateMaterializedView accepts: bigtable (Cloud Bigtable's rules) or any (also whole-table aggregates, DISTINCT, ARRAY_AGG…, which Cloud Bigtable refuses; docs/sql.md)")
	f.sec.register(fl)
	f.cluster.register(fl)
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write the server's CPU profile to `FILE` until it stops; SIGUSR1 starts the next in FILE.1, FILE.2, …")
	return cmd
}

// options validates the flags and turns them into server options. Invalid
// values are usage errors.
func (f *serveFlags) options(cmd *cobra.Command) (server.Options, error) {
	addr := f.addr
	if cmd.Flags().Changed("host-port") {
		if cmd.Flags().Changed("addr") && f.addr != f.hostPort {
			return server.Options{}, usagef("--addr %q and --host-port %q disagree; give one of them", f.addr, f.hostPort)
		}
		addr = f.hostPort
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return server.Options{}, usagef("--addr %q: want HOST:PORT: %w", addr, err)
	}
	if f.httpAddr != "off" {
		if _, _, err := net.SplitHostPort(f.httpAddr); err != nil {
			return server.Options{}, usagef("--http-addr %q: want HOST:PORT or off: %w", f.httpAddr, err)
		}
	}
	if f.dataDir == "" {
		return server.Options{}, usagef("--data must not be empty")
	}
	if f.clusterID == "" {
		return server.Options{}, usagef("--cluster-id must not be empty")
	}
	for name, v := range map[string]string{"--join": f.join, "--advertise-addr": f.advertise} {
		if v == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(v); err != nil {
			return server.Options{}, usagef("%s %q: want HOST:PORT: %w", name, v, err)
		}
	}
	vis, err := table.ParseVisibility(f.visibility)
	if err != nil {
		return server.Options{}, usageError{err}
	}
	gc, err := f.gcOptions()
	if err != nil {
		return server.Options{}, err
	}
	if f.goGCPercent <= 0 {
		return server.Options{}, usagef("--go-gc-percent %d must be positive", f.goGCPercent)
	}
	if f.ttlInterval <= 0 {
		return server.Options{}, usagef("--ttl-interval %v must be positive", f.ttlInterval)
	}
	if f.ttlBatchSize <= 0 || f.ttlBatchSize > maxBatchCells {
		return server.Options{}, usagef("--ttl-batch-size %d must be between 1 and %d", f.ttlBatchSize, maxBatchCells)
	}
	if f.maxSyncDuration < 0 {
		return server.Options{}, usagef("--max-sync-duration %v is negative", f.maxSyncDuration)
	}
	if f.undelete < 0 {
		return server.Options{}, usagef("--undelete-retention %v is negative", f.undelete)
	}
	undelete := f.undelete
	if undelete == 0 {
		undelete = -1 // the server's "none"; its zero means the default
	}
	maxSync := f.maxSyncDuration
	if maxSync == 0 {
		maxSync = -1 // the engine's "no check"; its zero means the default
	}
	ballast, err := parseBallast(f.ballastSize)
	if err != nil {
		return server.Options{}, err
	}
	sec, err := f.sec.options()
	if err != nil {
		return server.Options{}, err
	}
	var clk clock.Clock
	switch f.debugClock {
	case "":
	case "now":
		clk = clock.NewShifted(time.Now())
	default:
		start, err := time.Parse(time.RFC3339Nano, f.debugClock)
		if err != nil {
			return server.Options{}, usagef("--debug-clock %q: want an RFC 3339 time or now", f.debugClock)
		}
		clk = clock.NewShifted(start)
	}
	if f.viewRules != "bigtable" && f.viewRules != "any" {
		return server.Options{}, usagef("--materialized-view-rules %q: want bigtable or any", f.viewRules)
	}
	cl, err := f.cluster.options(cmd)
	if err != nil {
		return server.Options{}, err
	}
	return server.Options{
		Cluster:       cl,
		Clock:         clk,
		TTL:           rowttl.Options{Interval: f.ttlInterval, BatchRows: f.ttlBatchSize},
		Addr:          addr,
		DataDir:       f.dataDir,
		FullMemtable:  true,
		HTTPAddr:      f.httpAddr,
		ClusterID:     f.clusterID,
		Join:          f.join,
		AdvertiseAddr: f.advertise,
		Visibility:    vis,
		GC:            gc,

		MaxSyncDuration: maxSync,
		Ballast:         ballast,
		ConsoleOff:      !f.console,
		ConsoleWrites:   f.consoleWrites,
		AnyViewQuery:    f.viewRules == "any",

		UndeleteRetention: undelete,
		Security:          sec,
	}, nil
}

// exitFatal is the exit status after a fatal storage error.
const exitFatal = 3

// parseBallast reads --ballast-size: "0", a percentage ("1%"), or a size
// with a unit (B, KiB, MiB, GiB; KB, MB, GB are read as powers of 1024 too).
func parseBallast(v string) (storage.Ballast, error) {
	v = strings.TrimSpace(v)
	bad := usagef("--ballast-size %q: want 0, a percentage such as 1%%, or a size such as 64MiB", v)
	if v == "0" {
		return storage.Ballast{}, nil
	}
	if p, ok := strings.CutSuffix(v, "%"); ok {
		pct, err := strconv.ParseFloat(p, 64)
		if err != nil || pct <= 0 || pct > 50 {
			return storage.Ballast{}, bad
		}
		return storage.Ballast{Percent: pct}, nil
	}
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"GB", 1 << 30}, {"G", 1 << 30}, {"MiB", 1 << 20}, {"MB", 1 << 20}, {"M", 1 << 20},
		{"KiB", 1 << 10}, {"KB", 1 << 10}, {"K", 1 << 10}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(v, u.suffix); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || n < 0 {
				return storage.Ballast{}, bad
			}
			return storage.Ballast{Bytes: int64(n * float64(u.mult))}, nil
		}
	}
	return storage.Ballast{}, bad
}

// DefaultGoGCPercent is the Go GC percent a server runs with. Its Go heap is
// small (Pebble keeps its block cache and memtables outside it), so at Go's
// default of 100 the runtime collects every few megabytes of allocation, and
// on a two-core machine each cycle's mark worker shares a core with
// foreground reads while a compaction holds the other: the cost measured by
// the collector's BenchmarkGCPass. Four times the live heap buys far fewer
// cycles for a few more megabytes.
const DefaultGoGCPercent = 400

// maxBatchCells bounds --gc-batch-cells, so a batch (and the cells examined
// for it) stays a size one Pebble batch can hold.
const maxBatchCells = 1 << 20

// gcOptions validates the --gc-* flags and turns them into collector
// options. The collector reads zero as "use the default", so the flags'
// zero values are refused or translated here.
func (f *serveFlags) gcOptions() (collector.Options, error) {
	if f.gcInterval <= 0 {
		return collector.Options{}, usagef("--gc-interval %v must be positive", f.gcInterval)
	}
	if f.gcBatchCells <= 0 || f.gcBatchCells > maxBatchCells {
		return collector.Options{}, usagef("--gc-batch-cells %d must be between 1 and %d", f.gcBatchCells, maxBatchCells)
	}
	if f.gcPause < 0 {
		return collector.Options{}, usagef("--gc-pause %v is negative", f.gcPause)
	}
	pause := f.gcPause
	if pause == 0 {
		pause = -1 // the collector's "no pause"; its zero means 1ms
	}
	if f.gcReclaimRate < 0 {
		return collector.Options{}, usagef("--gc-reclaim-rate %v is negative", f.gcReclaimRate)
	}
	reclaim := int64(f.gcReclaimRate * (1 << 20))
	if reclaim == 0 {
		reclaim = -1 // the collector's "unpaced"; its zero means the default
	}
	return collector.Options{
		Interval:   f.gcInterval,
		BatchCells: f.gcBatchCells,
		// A batch examines up to the collector's default scan size, or
		// twice the batch size when that is more.
		ScanCells:   max(collector.DefaultScanCells, 2*f.gcBatchCells),
		Pause:       pause,
		ReclaimRate: reclaim,
	}, nil
}

// serve runs the server until SIGINT or SIGTERM. It announces the listen
// address on stdout once connections are accepted.
func serve(ctx context.Context, opts server.Options, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	finished, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			// Restore default signal handling so a second signal kills a
			// shutdown that hangs.
			stop()
			opts.Logger.Info("shutting down")
		case <-finished:
		}
	}()
	defer func() {
		close(finished)
		<-watched
		stop()
	}()
	err := server.Run(ctx, opts, func(addr string) {
		opts.Logger.Info("serving", "addr", addr, "data", opts.DataDir, "http", opts.HTTPAddr, "gc_visibility", opts.Visibility.String(),
			"gc_interval", opts.GC.Interval, "gc_batch_cells", opts.GC.BatchCells, "gc_pause", max(opts.GC.Pause, 0),
			"gc_reclaim_bytes_per_sec", max(opts.GC.ReclaimRate, 0),
			"ttl_interval", opts.TTL.Interval, "ttl_batch_size", opts.TTL.BatchRows)
		fmt.Fprintf(stdout, "ebbtable running on %s\n", addr)
	})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	opts.Logger.Info("stopped")
	return nil
}
