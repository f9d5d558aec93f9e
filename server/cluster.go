package server

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/internal/durable"
	"github.com/ebbtable/ebbtable/objstore"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Cluster mode (docs/scale-out.md): the node joins a cluster through etcd
// (package clusteretcd), every table is split into tablets owned by nodes
// (package cluster), and a request for a tablet this node does not own is
// forwarded to its owner (clusterdata.go). Schema changes go through an
// ordered log in etcd that every node applies (clusteradmin.go); planned
// moves ship a tablet's span to another node (clustermove.go); the
// operations live in their own service (clustersvc.go).

// ClusterOptions turns cluster mode on (Options.Cluster).
type ClusterOptions struct {
	// Etcd lists the etcd endpoints.
	Etcd []string
	// NodeID names this node in the cluster; stable for its data directory.
	NodeID string
	// Prefix of ebbtable's keys in etcd; default "/ebbtable/".
	Prefix string
	// LeaseTTL of the node's etcd lease; default 10s.
	LeaseTTL time.Duration
	// SharedStorage is the URL of the shared SSTable store: file:///dir or
	// s3://bucket/prefix; empty keeps every SSTable local (tablets still
	// move, by copying their keys).
	SharedStorage string
	// S3Endpoint overrides the S3 endpoint (AWS_ENDPOINT_URL_S3 otherwise).
	S3Endpoint string
	// SplitBytes: a tablet this node owns that grows past it is split in
	// two at its middle key; 0 turns size-based splitting off.
	SplitBytes int64
	// SplitInterval is how often tablet sizes are checked; default 30s.
	SplitInterval time.Duration
	// SchemaTrimEvery: a node that applied this many schema log entries
	// past the last snapshot writes the next and trims the log
	// (clustertrim.go); 0: DefaultSchemaTrimEvery, negative: never.
	SchemaTrimEvery int
	// Failover turns automatic failover on (clusterfail.go; needs
	// SharedStorage): writes go to a commit log in the shared store before
	// they are acknowledged, and a dead node's tablets are recovered by
	// the others once its lease expires.
	Failover bool
	// CheckpointInterval is how often, with Failover, a node checkpoints
	// its tablets while writes arrive; default 30s.
	CheckpointInterval time.Duration
	// ReleaseDeadAfter is how long, with Failover, a dead node whose
	// tablets were all taken over may still come back with its data
	// directory: then its shared SSTables are released and that directory
	// is refused (clusterfailrelease.go); also how long a node that left
	// cleanly (drained, stopped) may come back before the same
	// (clustercreatorleave.go); 0: DefaultReleaseDeadAfter, negative:
	// never.
	ReleaseDeadAfter time.Duration
	// BackupPartWait bounds how long a backup waits for a tablet whose
	// owner is down (back, or its tablets taken over) or busy moving it
	// before it fails UNAVAILABLE; 0: DefaultPartWait.
	BackupPartWait time.Duration
	// RestorePartWait bounds how long a restore waits for the owner of a
	// tablet that is down or busy moving before it fails; 0:
	// DefaultPartWait.
	RestorePartWait time.Duration

	// iamFresh and iamProgressEvery (tests): clusteretcd.Options' (0: its
	// defaults); iamCheckTimeout (tests) bounds the etcd read of an IAM
	// check made while the cache is not current (0: iamCheckWait).
	iamFresh, iamProgressEvery, iamCheckTimeout time.Duration
}

// DefaultPartWait is the default of ClusterOptions.BackupPartWait and
// RestorePartWait.
const DefaultPartWait = 2 * time.Minute

// Files in the data directory that cluster mode keeps.
const (
	clusterLeaseFile   = ".cluster-lease"   // the node's last etcd lease id
	clusterAppliedFile = ".cluster-applied" // the schema log sequence applied
	clusterNodeFile    = ".cluster-node"    // the node id this directory belongs to
)

// Metadata of forwarded tablet requests: the directory revision the
// forwarding node routed by; the owner catches up to it before judging.
const metaTabletForwarded = "x-ebbtable-tablet-forwarded"

// clusterMember is this server's membership in a cluster.
type clusterMember struct {
	s       *Server // set once the server is built
	dataDir string
	opts    ClusterOptions
	m       *clusteretcd.Member
	store   storage.ObjectStore
	stop    chan struct{}
	wg      sync.WaitGroup
	left    leftNodes // nodes that left cleanly (clustercreatorleave.go)
	// sink applies pulled replication records (clusterpull.go).
	sink *clusterSink

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // by address
	gates map[gateKey]*sync.RWMutex   // fences each owned tablet for moves
	wants map[gateKey]*gateWant       // moves waiting for a gate (clusterread.go)

	changes changeMarks // moves' marks for change-stream readers (clusterchanges.go)
	meta    metaMirror  // instance metadata mirrored from etcd (clustermeta.go)

	// The schema log applier (clusteradmin.go).
	applyMu  sync.Mutex
	applied  uint64
	results  map[uint64]applyResult
	progress chan struct{} // closed when applied advances
	// applyRun is held while entries are applied and while a snapshot is
	// built, so a snapshot is the schema at the applied mark exactly.
	applyRun sync.Mutex
	snapSeq  uint64 // the last snapshot this node wrote (under applyRun)

	// ingestFault, when set (tests), runs before each ingest here and
	// fails it with its error.
	ingestFault atomic.Pointer[func() error]
	// appliedHook, when set (tests), runs after each schema entry is
	// applied to the engine and before it is marked applied.
	appliedHook atomic.Pointer[func(clusteretcd.SchemaEntry)]

	joined atomic.Bool // set once started (clusterstart.go)

	bkTotals backupTotals // clusterbackupmetrics.go

	// This node's parts of cluster restores under way (clusterrestore.go).
	restoreMu sync.Mutex
	restores  map[uint64]*localRestore

	creator uint64 // the engine's shared-storage creator id (clustercreator.go)
	fresh   bool   // an empty data directory under a node id with old failover state (clusterfresh.go)

	fail        *failover // automatic failover (clusterfail.go); nil: off
	failMetrics failoverMetrics

	moveBytes prometheus.Histogram
	moves     *prometheus.CounterVec
	forwarded *prometheus.CounterVec
	iamCache  iamCacheMetrics // clusteriam.go
}

type gateKey struct {
	table  string
	tablet uint64
}

// creatorID derives the shared-storage creator id from the node id: the
// id of data directories from before creator ids were allocated
// (clustercreator.go).
func creatorID(node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(node))
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}

// newClusterMember checks the options and opens the shared store; the engine
// is opened with what sharedOptions returns. Without Options.Cluster it
// returns nil, and the methods called on a nil node do nothing.
func newClusterMember(so *Options) (*clusterMember, error) {
	if so.Cluster == nil {
		return nil, nil
	}
	opts := *so.Cluster
	if len(opts.Etcd) == 0 {
		return nil, fmt.Errorf("%w: cluster mode needs etcd endpoints", errInvalid)
	}
	if opts.NodeID == "" || strings.ContainsAny(opts.NodeID, "/ \t\n") {
		return nil, fmt.Errorf("%w: node id %q: give a non-empty id without slashes or spaces", errInvalid, opts.NodeID)
	}
	if opts.SplitInterval <= 0 {
		opts.SplitInterval = 30 * time.Second
	}
	if opts.BackupPartWait <= 0 {
		opts.BackupPartWait = DefaultPartWait
	}
	if opts.RestorePartWait <= 0 {
		opts.RestorePartWait = DefaultPartWait
	}
	c := &clusterMember{dataDir: so.DataDir, opts: opts, stop: make(chan struct{}), conns: map[string]*grpc.ClientConn{}, gates: map[gateKey]*sync.RWMutex{},
		results: map[uint64]applyResult{}, progress: make(chan struct{})}
	c.newMetrics()
	if err := c.checkDataDir(); err != nil {
		return nil, err
	}
	if opts.SharedStorage != "" {
		st, _, err := objstore.Open(opts.SharedStorage, objstore.Config{Endpoint: opts.S3Endpoint})
		if err != nil {
			return nil, err
		}
		c.store = st
		if err := c.checkReleased(); err != nil { // clusterfailrelease.go
			st.Close()
			return nil, err
		}
		if err := c.checkFresh(); err != nil { // clusterfresh.go: before loadCreator, which writes a file
			st.Close()
			return nil, err
		}
		if err := c.loadCreator(); err != nil { // clustercreator.go
			st.Close()
			return nil, err
		}
	}
	return c, nil
}

// checkDataDir refuses a data directory another node id used.
func (c *clusterMember) checkDataDir() error {
	dir := c.dataDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	p := filepath.Join(dir, clusterNodeFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		if got := strings.TrimSpace(string(b)); got != c.opts.NodeID {
			return fmt.Errorf("%w: data directory %s belongs to node %q, not %q", errInvalid, dir, got, c.opts.NodeID)
		}
		return nil
	case errors.Is(err, os.ErrNotExist):
		return durable.ReplaceFile(p, []byte(c.opts.NodeID+"\n"))
	default:
		return err
	}
}

// sharedOptions is the engine's shared storage, or nil.
func (c *clusterMember) sharedOptions() *storage.SharedOptions {
	if c == nil || c.store == nil {
		return nil
	}
	loc, _ := objstore.ParseURL(c.opts.SharedStorage)
	return &storage.SharedOptions{Store: c.store, Locator: loc.String(), CreatorID: c.creator}
}

func (c *clusterMember) newMetrics() {
	c.moveBytes = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ebbtable_tablet_move_bytes_shipped",
		Help:    "Bytes shipped from source to target per planned tablet move (shared SST references plus local upper levels, and the tablet's change-stream records).",
		Buckets: prometheus.ExponentialBuckets(1024, 4, 12)})
	c.moves = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbtable_tablet_moves_total",
		Help: "Planned tablet moves this node ran as the source, by outcome."}, []string{"outcome"})
	c.forwarded = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbtable_cluster_forwarded_total",
		Help: "Data requests (or parts of them) forwarded to the tablet's owner, by method."}, []string{"method"})
	c.failMetrics = newFailoverMetrics()   // clusterfail.go
	c.changes.carried = newCarriedMetric() // clusterfailchanges.go
	c.newIAMCacheMetrics()                 // clusteriam.go
}

func (c *clusterMember) register(reg prometheus.Registerer) {
	reg.MustRegister(c.moveBytes, c.moves, c.forwarded, c.changes.carried)
	reg.MustRegister(c.failMetrics.collectors()...)
	reg.MustRegister(c.iamCache.fallbacks, c.iamCache.stale)
}

// start joins the cluster (after the server listens: other nodes reach it
// at addr), applies the schema log up to its end, and starts the loops.
func (c *clusterMember) start(addr string) error {
	prev, _ := readUint(filepath.Join(c.s.opts.DataDir, clusterLeaseFile))
	applied, _ := readUint(filepath.Join(c.s.opts.DataDir, clusterAppliedFile))
	c.applied = applied
	if err := c.openFailover(); err != nil { // clusterfail.go: before any write is served
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := clusteretcd.Join(ctx, clusteretcd.Options{Endpoints: c.opts.Etcd, Prefix: c.opts.Prefix, NodeID: c.opts.NodeID, Addr: addr,
		TTL: c.opts.LeaseTTL, PreviousLease: int64(prev), Clock: c.s.opts.Clock, Logger: c.s.log,
		IAMFresh: c.opts.iamFresh, IAMProgressEvery: c.opts.iamProgressEvery,
		Settings: c.clusterSettings()}) // clusterfail.go: every node runs with the same --failover
	if err != nil {
		return err
	}
	c.m = m
	c.iamCache.member.Store(m)
	if err := c.releasePrevious(ctx); err != nil { // clusterfresh.go: before the record changes
		m.Close()
		return err
	}
	if err := c.recordCreator(ctx); err != nil { // clustercreator.go
		m.Close()
		return err
	}
	if err := c.joinedFailover(m); err != nil { // clusterfail.go: the log's fence follows the lease from now on
		m.Close()
		return err
	}
	if err := durable.ReplaceFile(filepath.Join(c.s.opts.DataDir, clusterLeaseFile), []byte(strconv.FormatInt(m.LeaseID(), 10))); err != nil {
		m.Close()
		return err
	}
	if err := c.loadSnapshot(ctx); err != nil {
		m.Close()
		return err
	}
	if err := c.moveLocalIAM(ctx); err != nil { // clusteriammove.go: before the log applies, while its tables are the ones it held
		m.Close()
		return err
	}
	if err := c.moveLocalMeta(ctx); err != nil { // clustermeta.go: clusters and app profiles kept before, into etcd
		m.Close()
		return err
	}
	if err := c.mirrorMeta(ctx); err != nil { // clustermeta.go
		m.Close()
		return err
	}
	if err := c.catchUp(ctx); err != nil {
		m.Close()
		return err
	}
	if err := m.SetApplied(ctx, c.appliedSeq()); err != nil {
		m.Close()
		return err
	}
	if err := c.startFailover(); err != nil { // clusterfail.go
		m.Close()
		return err
	}
	if err := c.startedFresh(); err != nil { // clusterfresh.go
		m.Close()
		return err
	}
	c.wg.Add(3)
	go c.applyLoop()
	go c.leaseFileLoop()
	go c.metaLoop() // clustermeta.go

	c.s.backups.OnExpiry(c.sweepBackups)                          // clusterbackup.go
	c.s.backups.OnExpiry(c.releaseLeft)                           // clustercreatorleave.go
	c.s.ops.setRemote(c.remoteOperation, c.deleteRemoteOperation) // clusterrestoreop.go
	c.s.ops.setRemoteList(c.listRemoteOperations)                 // clusterrestoreop.go
	c.s.backups.ReportTotals(c.backupTotals)                      // clusterbackupmetrics.go
	if c.opts.SplitBytes > 0 {
		c.wg.Add(1)
		go c.splitLoop()
	}
	return nil
}

// leaseFileLoop keeps the lease file current when the lease changes
// (after a lease loss the node registers again).
func (c *clusterMember) leaseFileLoop() {
	defer c.wg.Done()
	last := c.m.LeaseID()
	for {
		select {
		case <-c.stop:
			return
		case <-c.m.Changed():
		}
		if id := c.m.LeaseID(); id != last {
			last = id
			if err := durable.ReplaceFile(filepath.Join(c.s.opts.DataDir, clusterLeaseFile), []byte(strconv.FormatInt(id, 10))); err != nil {
				c.s.log.Warn("record lease id", "err", err)
			}
		}
	}
}

// close leaves the cluster and closes the peer connections; the shared
// store closes after the engine (closeStore).
func (c *clusterMember) close() {
	select {
	case <-c.stop:
		return
	default:
		close(c.stop)
	}
	if c.m != nil {
		c.m.Close()
	}
	c.wg.Wait()
	c.mu.Lock()
	for _, cc := range c.conns {
		cc.Close()
	}
	c.conns = map[string]*grpc.ClientConn{}
	c.mu.Unlock()
}

func (c *clusterMember) closeStore() {
	if c != nil && c.store != nil {
		c.store.Close()
	}
}

// conn returns a connection to a node's gRPC address.
func (c *clusterMember) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	select {
	case <-c.stop:
		// close has closed the connections, or is about to under mu: a
		// new one would outlive the node.
		return nil, status.Error(codes.Unavailable, "ebbtable: this node is leaving the cluster")
	default:
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, c.s.sec.nodeDialOptions(addr, c.s.opts.MaxMessageBytes)...)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

func (c *clusterMember) gate(table string, tablet uint64) *sync.RWMutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := gateKey{table, tablet}
	g := c.gates[k]
	if g == nil {
		g = &sync.RWMutex{}
		c.gates[k] = g
	}
	return g
}

// target is where one tablet's part of a request goes: served here (with
// the tablet's gate held until release) or sent to the owner.
type target struct {
	tablet  tablets.Tablet
	local   bool
	node    string
	client  btpb.BigtableClient
	release func()
}

// forwardedRev is the directory revision a forwarding node routed by, or
// -1 when the request was not forwarded.
func forwardedRev(ctx context.Context) int64 {
	v := metadata.ValueFromIncomingContext(ctx, metaTabletForwarded)
	if len(v) == 0 {
		return -1
	}
	r, err := strconv.ParseInt(v[len(v)-1], 10, 64)
	if err != nil {
		return 0
	}
	return r
}

// catchUpTo waits (briefly) until this node's view of etcd reaches rev, so
// a node forwarded a request after a move judges it by the new directory.
func (c *clusterMember) catchUpTo(ctx context.Context, rev int64) {
	if rev <= 0 || c.m.Revision() >= rev {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c.m.WaitFor(wctx, func() bool { return c.m.Revision() >= rev })
}

// route finds where the tablet holding key is served. A local tablet's
// gate is held (read) until release, so a move waits for the request.
func (c *clusterMember) route(ctx context.Context, d tablets.Directory, key []byte) (target, error) {
	fwd := forwardedRev(ctx)
	for attempt := 0; ; attempt++ {
		t := d.Tablets[d.Locate(key)]
		if t.Owner == c.opts.NodeID {
			if !c.m.Live() {
				return target{}, status.Errorf(codes.Unavailable, "ebbtable: node %s does not hold its lease now; retry", c.opts.NodeID)
			}
			g := c.gate(d.Table, t.ID)
			g.RLock()
			if cur, ok := c.m.Directory(d.Table); ok {
				if ct := cur.Tablets[cur.Locate(key)]; ct.Owner == c.opts.NodeID {
					return target{tablet: ct, local: true, release: g.RUnlock}, nil
				}
				d = cur
			}
			g.RUnlock()
			if attempt < 3 {
				continue
			}
			return target{}, status.Errorf(codes.Unavailable, "ebbtable: tablet of %q is moving; retry", key)
		}
		if fwd >= 0 {
			return target{}, status.Errorf(codes.Unavailable, "ebbtable: %s is not owned by node %s (forwarded); retry", t, c.opts.NodeID)
		}
		n, ok := c.m.Node(t.Owner)
		if !ok {
			return target{}, status.Errorf(codes.Unavailable, "ebbtable: %s: its node is down (its lease expired); retry when it is back", t)
		}
		cc, err := c.conn(n.Addr)
		if err != nil {
			return target{}, status.Errorf(codes.Unavailable, "ebbtable: node %s at %s: %v", n.ID, n.Addr, err)
		}
		return target{tablet: t, node: n.ID, client: btpb.NewBigtableClient(cc), release: func() {}}, nil
	}
}

// directory returns the directory of a data request's table, after
// catching up with a forwarding node; ok false: not a cluster table (the
// local server answers, NotFound for an unknown table).
func (c *clusterMember) directory(ctx context.Context, ref tableRef) (tablets.Directory, bool) {
	c.catchUpTo(ctx, forwardedRev(ctx))
	return c.m.Directory(ref.name())
}

// outgoing is the context of a request forwarded to a tablet's owner.
func (c *clusterMember) outgoing(d *dataServer, ctx context.Context, rev int64) context.Context {
	ctx = d.outgoing(ctx)
	return metadata.AppendToOutgoingContext(ctx, metaTabletForwarded, strconv.FormatInt(rev, 10))
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return uint64(v), err
}

// dataService is the Data API: the local one, or in cluster mode the one
// that forwards by tablet.
func (s *Server) dataService() btpb.BigtableServer {
	d := &dataServer{s: s}
	if s.cluster == nil {
		return d
	}
	return &clusterData{dataServer: d, c: s.cluster}
}

// tableAdminService is the Table Admin API: in cluster mode schema
// changes go through the cluster's schema log.
func (s *Server) tableAdminService() adminpb.BigtableTableAdminServer {
	a := &adminServer{s: s}
	if s.cluster == nil {
		return a
	}
	return &clusterAdmin{adminServer: a, c: s.cluster}
}

// registerCluster adds the Cluster service and the cluster metrics (which
// a node alone exports too, at zero, so one dashboard fits both).
func (s *Server) registerCluster() {
	if s.cluster == nil {
		alone := &clusterMember{}
		alone.newMetrics()
		alone.register(s.opts.Registry)
		return
	}
	s.cluster.s = s
	s.engine.SetChangeTiebreaker(nodeTiebreaker(s.cluster.opts.NodeID)) // clusterchanges.go
	clusterpb.RegisterClusterServer(s.grpc, &clusterService{c: s.cluster})
	s.cluster.register(s.opts.Registry)
}

// startCluster joins the cluster once the server listens.
func (s *Server) startCluster() error {
	if s.cluster == nil {
		return nil
	}
	addr := s.opts.AdvertiseAddr
	if addr == "" {
		addr = s.Addr()
	}
	if err := s.cluster.start(addr); err != nil {
		return err
	}
	s.cluster.joined.Store(true) // clusterstart.go
	return nil
}

// ClusterMember is this node's view of its cluster (nil when alone): for
// tests and tools.
func (s *Server) ClusterMember() *clusteretcd.Member {
	if s.cluster == nil {
		return nil
	}
	return s.cluster.m
}
