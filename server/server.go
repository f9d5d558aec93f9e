package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/backup"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/console"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/rowttl"
	"github.com/ebbtable/ebbtable/schedule"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Options configures a Server.
type Options struct {
	// Addr is the gRPC listen address. Default localhost:8086.
	Addr string
	// DataDir holds the database. Default ./ebbtable-data.
	DataDir string
	// HTTPAddr serves /metrics, /healthz and /readyz; "off" disables it.
	// Default localhost:8087.
	HTTPAddr string
	// ClusterID names this cluster in replication views. Default "ebbtable".
	ClusterID string
	// Join, when set, is the address of a running cluster of the instance
	// this process joins as a further cluster (see docs/replication.md).
	Join string
	// AdvertiseAddr is the address peers reach this process at; default
	// the listen address.
	AdvertiseAddr string
	// Visibility of GC-eligible cells to readers.
	Visibility table.Visibility
	// Clock; nil means the real clock.
	Clock clock.Clock
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the server's metrics; nil means a new registry.
	Registry *prometheus.Registry
	// MaxMessageBytes caps request and response sizes. Default 256 MiB.
	MaxMessageBytes int
	// BackupExpiryInterval is how often expired backups are looked for and
	// deleted. Default 1m.
	BackupExpiryInterval time.Duration
	// GC configures the garbage collector (interval, batches, pauses).
	// Its clock, logger and registerer come from these options.
	GC collector.Options
	// TTL configures the row deletion job (interval, batch size, pacing,
	// auditor). Its clock, logger and registerer come from these options.
	TTL rowttl.Options
	// MaxSyncDuration: a disk write or sync taking longer stops the server
	// (see table.Options). 0 means table.DefaultMaxSyncDuration.
	MaxSyncDuration time.Duration
	// Ballast sizes the emergency ballast in the data directory; zero:
	// none.
	Ballast storage.Ballast
	// ConsoleOff turns the web console at / on HTTPAddr off;
	// ConsoleWrites lets it run actions that change data (docs/console.md).
	ConsoleOff, ConsoleWrites bool
	// UndeleteRetention is how long a deleted table stays restorable
	// (UndeleteTable); 0 means DefaultUndeleteRetention, negative: none.
	UndeleteRetention time.Duration
	// FullMemtable: table.Options.FullMemtable (serve sets it).
	FullMemtable bool
	// OnFatal is called once when the engine meets a fatal storage error,
	// after the server has stopped serving (health NOT_SERVING, every call
	// Unavailable). The serve command exits the process from it
	// (fail-stop); nil leaves the process up, serving nothing.
	OnFatal func(error)
	// Security: TLS, tokens, peers allowed, resource bounds
	// (security.go, docs/security.md).
	Security SecurityOptions
	// Cluster, when set, joins a cluster of nodes through etcd
	// (cluster.go, docs/scale-out.md); nil runs one node alone.
	Cluster *ClusterOptions
	// AnyViewQuery accepts materialized view queries beyond the rules
	// Cloud Bigtable sets (sqlquery's mvrules.go): aggregates without
	// GROUP BY, DISTINCT, ARRAY_AGG, LOGICAL_*, SELECT *, ... (serve
	// --materialized-view-rules any, docs/sql.md). Off, such a query is
	// INVALID_ARGUMENT, as in Cloud Bigtable.
	AnyViewQuery bool
	// knobs: tests' hooks and bounds (testknobs.go); nil in production.
	knobs *testKnobs
}

// EnsureDefaults fills unset options.
func (o *Options) EnsureDefaults() {
	if o.Addr == "" {
		o.Addr = "localhost:8086"
	}
	if o.DataDir == "" {
		o.DataDir = "./ebbtable-data"
	}
	if o.HTTPAddr == "" {
		o.HTTPAddr = "localhost:8087"
	}
	if o.ClusterID == "" {
		o.ClusterID = "ebbtable"
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = 256 << 20
	}
	if o.UndeleteRetention == 0 {
		o.UndeleteRetention = DefaultUndeleteRetention
	}
}

// streamWorkers is how many gRPC stream workers a server keeps (more
// concurrent streams each start a goroutine of their own, as without them).
// Calls that wait for a WAL sync hold their worker meanwhile, so there are
// enough for many clients' calls in flight at once: with 16, fifty clients
// of the hot-row workload sent most calls to fresh goroutines, whose stacks
// grew on every call (a tenth of the server's CPU). An idle worker costs
// its stack.
func streamWorkers() uint32 { return uint32(max(128, 16*runtime.GOMAXPROCS(0))) }

// Server is a running ebbtable: the engine, its background jobs and the gRPC
// and HTTP endpoints.
type Server struct {
	opts      Options
	engine    *table.Engine
	grpc      *grpc.Server
	health    *health.Server
	ops       *operations
	progress  lazyProgress // long calls' progress, by client-chosen id (progress.go)
	mviews    mviews       // maintained materialized views (mviewmaint.go)
	inst      *instanceServer
	peers     *peerSet
	repl      *replication.Replicator
	http      *http.Server
	collector *collector.Collector
	backups   *backup.Manager
	opWait    time.Duration // see defaultOpWait
	ttl       *rowttl.Job
	autoBkps  *schedule.Loop // takes automated backups (autobackup.go)
	purge     *schedule.Loop // purges deleted tables (undelete.go)
	lis       net.Listener
	hlis      net.Listener
	log       *slog.Logger
	// stopping is closed when Close begins, so calls that never end on
	// their own (tailing change streams) end and let the server stop.
	stopping  chan struct{}
	closeOnce sync.Once
	// failed is set once the engine met a fatal storage error.
	failed atomic.Bool
	// console serves / on the HTTP port (nil when off).
	console *console.Console
	sec     *security
	// cluster is this node's membership in a cluster (nil alone).
	cluster *clusterMember
	// replJoinPending: started with --join in a cluster, which has not
	// joined yet (clusterjoin.go).
	replJoinPending atomic.Bool

	// consoleTailLines counts the records the console's tail streams
	// handed to its merges (tests compare it with the records delivered).
	consoleTailLines atomic.Int64
}

// New opens the engine and builds the services. It does not listen yet.
func New(opts Options) (*Server, error) {
	opts.EnsureDefaults()
	sec, err := newSecurity(&opts)
	if err != nil {
		return nil, err
	}
	// The server is built below; a fatal error before then is Open's to
	// return, or is handled once the health server exists.
	var srv atomic.Pointer[Server]
	var early atomic.Pointer[error]
	cl, err := newClusterMember(&opts)
	if err != nil {
		return nil, err
	}
	eng, err := table.Open(table.Options{Dir: opts.DataDir, Shared: cl.sharedOptions(), Clock: opts.Clock, Logger: opts.Logger, Visibility: opts.Visibility,
		MaxSyncDuration: opts.MaxSyncDuration, Ballast: opts.Ballast, UndeleteRetention: max(opts.UndeleteRetention, 0),
		FullMemtable: opts.FullMemtable,
		OnFatal: func(err error) {
			if s := srv.Load(); s != nil {
				s.fatal(err)
				return
			}
			early.Store(&err)
		}})
	if err != nil {
		cl.closeStore()
		return nil, err
	}
	gcOpts := opts.GC
	gcOpts.Clock, gcOpts.Logger, gcOpts.Registerer = opts.Clock, opts.Logger, opts.Registry
	// The server is built below; the collector asks it only once running.
	var self *Server
	if gcOpts.DecidesVersions == nil {
		gcOpts.DecidesVersions = func() bool { return self.isGCLeader() }
	}
	col, err := collector.New(eng, gcOpts)
	if err != nil {
		eng.Close()
		return nil, err
	}
	eng.SetSchemaHook(col.BeforeRuleChange)
	eng.SetSchemaGate(col.RuleChangeGate)
	ttlOpts := opts.TTL
	ttlOpts.Clock, ttlOpts.Logger, ttlOpts.Registerer = opts.Clock, opts.Logger, opts.Registry
	job, err := rowttl.New(eng, ttlOpts)
	if err != nil {
		eng.Close()
		return nil, err
	}
	bk, err := backup.New(backup.Options{DataDir: opts.DataDir, Engine: eng, Clock: opts.Clock, Logger: opts.Logger, Registerer: opts.Registry, ExpiryInterval: opts.BackupExpiryInterval})
	if err != nil {
		eng.Close()
		return nil, err
	}
	eng.SetRowExpiry(rowttl.RowExpired)
	s := &Server{opts: opts, engine: eng, collector: col, ttl: job, backups: bk, opWait: defaultOpWait, ops: newOperations(), health: health.NewServer(), log: opts.Logger,
		stopping: make(chan struct{}), sec: sec, cluster: cl}
	sec.iam, sec.httpIAM = s.checkIAMCtx, s.consoleIAM
	s.replJoinPending.Store(cl != nil && opts.Join != "")
	self = s
	srv.Store(s)
	if p := early.Load(); p != nil {
		s.fatal(*p)
	}
	s.grpc = grpc.NewServer(append(sec.serverOptions(),
		grpc.MaxRecvMsgSize(opts.MaxMessageBytes),
		grpc.MaxSendMsgSize(opts.MaxMessageBytes),
		grpc.UnaryInterceptor(s.unaryInterceptor()), // interceptors.go
		grpc.StreamInterceptor(s.streamInterceptor()),
		// Streams run on long-lived workers, whose stacks have grown once:
		// a goroutine per stream grew its stack on every ReadRows (Pebble's
		// iterator setup is deep), a seventh of a point read's server CPU.
		grpc.NumStreamWorkers(streamWorkers()),
		// gRPC's buffer pool without clearing what it hands out
		// (bufpool.go; docs/performance.md, "gRPC serving").
		experimental.BufferPool(s.knobs().bufferPool.or(&dirtyPool{})),
	)...)
	btpb.RegisterBigtableServer(s.grpc, s.dataService())
	adminpb.RegisterBigtableTableAdminServer(s.grpc, s.tableAdminService())
	s.registerCluster()
	s.inst = &instanceServer{s: s}
	s.peers = newPeerSet(s)
	if err := s.peers.load(); err != nil {
		eng.Close()
		return nil, err
	}
	s.repl = newReplicator(s)
	s.peers.onAdd = func(p peerInfo) { s.repl.Run(p.ID) }
	if len(s.peers.list()) > 0 {
		if err := eng.SetReplicating(opts.ClusterID); err != nil {
			eng.Close()
			return nil, err
		}
	}
	adminpb.RegisterBigtableInstanceAdminServer(s.grpc, s.inst)
	longrunningpb.RegisterOperationsServer(s.grpc, s.ops)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	ebbadminpb.RegisterEbbAdminServer(s.grpc, &ebbAdmin{s: s})
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	opts.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := eng.Err(); err != nil {
		eng.Close()
		return nil, err
	}
	return s, nil
}

// fatal stops serving after the engine met a fatal storage error: health
// NOT_SERVING at once (and kept so: Start does not turn it back), then the
// OnFatal callback, which in the serve command exits the process.
func (s *Server) fatal(err error) {
	s.failed.Store(true)
	s.health.Shutdown()
	s.log.Error("fatal storage error; stopping", "err", err)
	if s.opts.OnFatal != nil {
		s.opts.OnFatal(err)
	}
}

// Engine exposes the table engine (for in-process tests and tools).
func (s *Server) Engine() *table.Engine { return s.engine }

// Start listens on the configured addresses and serves in the background.
// It returns once connections are accepted.
func (s *Server) Start() error {
	lis, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("ebbtable: listen on %s: %w", s.opts.Addr, err)
	}
	s.lis = s.sec.listen(lis)
	lis = s.lis
	if s.opts.Join != "" && s.cluster == nil {
		if err := s.joinCluster(s.opts.Join); err != nil {
			lis.Close()
			return err
		}
	}
	if s.opts.HTTPAddr != "off" {
		hlis, err := net.Listen("tcp", s.opts.HTTPAddr)
		if err != nil {
			lis.Close()
			return fmt.Errorf("ebbtable: listen on %s for metrics: %w", s.opts.HTTPAddr, err)
		}
		s.hlis = s.sec.listenHTTP(hlis)
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ready") })
		if err := s.mountConsole(mux); err != nil {
			lis.Close()
			hlis.Close()
			return err
		}
		s.http = &http.Server{Handler: s.sec.httpHandler(mux), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := s.http.Serve(s.hlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("metrics server stopped", "err", err)
			}
		}()
	}
	go func() {
		if err := s.grpc.Serve(lis); err != nil {
			s.log.Error("grpc server stopped", "err", err)
		}
	}()
	if err := s.startCluster(); err != nil {
		s.grpc.Stop()
		return err
	}
	if s.cluster != nil { // clusterrepl.go
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.syncClusterPeers(ctx)
		cancel()
		if err != nil {
			s.grpc.Stop()
			return err
		}
		go s.clusterPeerLoop()
		if s.opts.Join != "" { // clusterjoin.go
			if err := s.clusterJoinInstance(s.opts.Join); err != nil {
				s.grpc.Stop()
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := s.syncClusterPeers(ctx)
			cancel()
			if err != nil {
				s.grpc.Stop()
				return err
			}
			s.replJoinPending.Store(false)
		}
	}
	s.collector.Start()
	s.backups.Start()
	s.autoBkps = s.startAutoBackups()
	s.purge = s.startPurge()
	s.ttl.Start()
	s.mviews.start(s) // mviewmaint.go
	go s.watchReload()
	for _, p := range s.peers.list() {
		s.repl.Run(p.ID)
	}
	if s.failed.Load() {
		return s.engine.Err()
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	return nil
}

// Addr is the gRPC address the server listens on (after Start).
func (s *Server) Addr() string {
	if s.lis == nil {
		return s.opts.Addr
	}
	return s.lis.Addr().String()
}

// HTTPAddr is the metrics address (after Start), or "" when disabled.
func (s *Server) HTTPAddr() string {
	if s.hlis == nil {
		return ""
	}
	return s.hlis.Addr().String()
}

// Close stops accepting work, waits for running calls (up to 10 s), stops
// background jobs and closes the database.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { close(s.stopping) })
	s.repl.Stop()
	s.health.Shutdown()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.grpc.Stop()
	}
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.http.Shutdown(ctx)
		cancel()
	}
	if s.console != nil {
		s.console.Stop()
	}
	s.collector.Stop()
	s.autoBkps.Stop()
	s.purge.Stop()
	s.backups.Stop()
	s.ttl.Stop()
	s.mviews.stopMaint()
	s.peers.close()
	if s.cluster != nil {
		s.cluster.close()
	}
	err := s.engine.Close()
	s.cluster.closeStore()
	return err
}

// Run starts a server, calls ready with its address, and serves until ctx is
// done, then shuts down gracefully.
func Run(ctx context.Context, opts Options, ready func(addr string)) error {
	s, err := New(opts)
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		s.engine.Close()
		return err
	}
	if ready != nil {
		ready(s.Addr())
	}
	<-ctx.Done()
	return s.Close()
}
