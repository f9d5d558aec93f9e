package clusteretcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/cluster"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Errors of membership.
var (
	// ErrNodeLive: another process holds this node id under a live lease.
	ErrNodeLive = errors.New("ebbtable: node id is live in another process")
	// ErrTableExists: the table already has a tablet directory.
	ErrTableExists = errors.New("ebbtable: table already exists in the cluster")
	// ErrClosed: the member has left (Close) or was abandoned; its etcd
	// calls fail with it at once (bound.go).
	ErrClosed = errors.New("ebbtable: cluster member closed")
)

// Options configures a Member.
type Options struct {
	// Endpoints of the etcd cluster ("127.0.0.1:2379" or URLs).
	Endpoints []string
	// Prefix of every key ebbtable keeps in etcd. Default "/ebbtable/".
	Prefix string
	// NodeID names this node; Addr is where other nodes reach its gRPC
	// port. A node with no NodeID watches only (a command-line tool).
	NodeID, Addr string
	// TTL of the node's lease. Default 10s; etcd rounds to seconds.
	TTL time.Duration
	// PreviousLease is the lease this node's data directory held last: if
	// the node's key is still held under it (the process was killed), the
	// new process revokes it instead of waiting for it to expire.
	PreviousLease int64
	// Settings are cluster-wide settings (name → value) every node must
	// share: the first node to start records them in etcd, a node started
	// with another value is refused (ErrSettingMismatch) before it
	// registers.
	Settings map[string]string
	// DialTimeout for etcd. Default 5s.
	DialTimeout time.Duration
	// IAMFresh and IAMProgressEvery (iam.go): how long after its last
	// word from etcd the IAM cache is trusted, and how often the member
	// asks for one; defaults the constants IAMFresh and IAMProgressEvery.
	IAMFresh, IAMProgressEvery time.Duration
	Clock                      clock.Clock
	Logger                     *slog.Logger
}

func (o *Options) ensureDefaults() {
	if o.Prefix == "" {
		o.Prefix = "/ebbtable/"
	}
	if !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	if o.TTL <= 0 {
		o.TTL = 10 * time.Second
	}
	if o.TTL < time.Second {
		o.TTL = time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.IAMFresh <= 0 {
		o.IAMFresh = IAMFresh
	}
	if o.IAMProgressEvery <= 0 {
		o.IAMProgressEvery = IAMProgressEvery
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Member is this process's view of the cluster: its own lease and a cache
// of the nodes, the tablet directories and the schema log's progress, kept
// current by one etcd watch.
type Member struct {
	opts  Options
	cli   *clientv3.Client
	fence *cluster.Fence
	log   *slog.Logger

	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
	// done ends every etcd call (bound.go): cancelled by Abandon and
	// Close before they close the client.
	done     context.CancelFunc
	rawLease clientv3.Lease // not bound: Close's revoke
	closed   atomic.Bool    // by Close or Abandon

	mu       sync.RWMutex
	lease    clientv3.LeaseID
	rev      int64 // the revision the cache reflects
	nodes    map[string]cluster.Node
	draining map[string]bool
	dirs     map[string]cluster.Directory
	applied  map[string]uint64
	schema   uint64 // the last schema log sequence seen
	metaSeen uint64 // instance-metadata events and loads seen (MetaChanges)
	changed  chan struct{}
	iamCache // iam.go: the IAM policies, and how current the watch is

	hold atomic.Pointer[chan struct{}] // HoldWatch
}

// HoldWatch (tests) keeps the watch's next events from the cache until
// release is called: a node whose view of the cluster lags.
func (m *Member) HoldWatch() (release func()) {
	ch := make(chan struct{})
	m.hold.Store(&ch)
	var once sync.Once
	return func() { once.Do(func() { m.hold.Store(nil); close(ch) }) }
}

// Join connects to etcd, registers the node under a new lease (unless
// NodeID is empty), loads the cluster's state and keeps it current.
func Join(ctx context.Context, opts Options) (*Member, error) {
	opts.ensureDefaults()
	cli, err := clientv3.New(clientConfig(opts.Endpoints, opts.DialTimeout))
	if err != nil {
		return nil, fmt.Errorf("ebbtable: etcd at %v: %w", opts.Endpoints, err)
	}
	done, cancel := context.WithCancel(context.Background())
	b := bound{done: done}
	cli.KV = boundKV{KV: cli.KV, bound: b}
	rawLease := cli.Lease
	cli.Lease = boundLease{Lease: cli.Lease, bound: b}
	cli.Watcher = boundWatcher{Watcher: cli.Watcher, bound: b}
	m := &Member{opts: opts, cli: cli, log: opts.Logger, fence: cluster.NewFence(opts.Clock, opts.TTL/10),
		stop: make(chan struct{}), changed: make(chan struct{}), done: cancel, rawLease: rawLease}
	if err := m.checkSettings(ctx); err != nil {
		cancel()
		cli.Close()
		return nil, err
	}
	if opts.NodeID != "" {
		if err := m.register(ctx); err != nil {
			cancel()
			cli.Close()
			return nil, err
		}
	}
	// Loaded after registering, so the cache holds this node too.
	if err := m.load(ctx); err != nil {
		m.Close()
		return nil, err
	}
	if opts.NodeID != "" {
		m.wg.Add(1)
		go m.renew()
	}
	m.wg.Add(1)
	go m.watch()
	return m, nil
}

func (m *Member) key(parts ...string) string { return m.opts.Prefix + strings.Join(parts, "/") }

func (m *Member) nodeKey(id string) string    { return m.key("nodes", id) }
func (m *Member) drainKey(id string) string   { return m.key("drain", id) }
func (m *Member) appliedKey(id string) string { return m.key("applied", id) }
func (m *Member) dirKey(table string) string  { return m.key("tablets", table) }
func (m *Member) seqKey() string              { return m.key("schema", "seq") }
func (m *Member) logKey(seq uint64) string    { return m.key("schema", "log", fmt.Sprintf("%016x", seq)) }

// register grants a lease and puts the node's key under it. A key still
// held under PreviousLease (this data directory's last process) is taken
// over; one held under another live lease is ErrNodeLive.
func (m *Member) register(ctx context.Context) error {
	enc, _ := json.Marshal(cluster.Node{ID: m.opts.NodeID, Addr: m.opts.Addr})
	for {
		sent := m.opts.Clock.Now()
		g, err := m.cli.Grant(ctx, int64(m.opts.TTL/time.Second))
		if err != nil {
			return fmt.Errorf("ebbtable: etcd lease: %w", err)
		}
		k := m.nodeKey(m.opts.NodeID)
		resp, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
			Then(clientv3.OpPut(k, string(enc), clientv3.WithLease(g.ID))).
			Else(clientv3.OpGet(k)).Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			continue // the lease lapsed before its first use (a starved process): a new one
		}
		if err != nil {
			return fmt.Errorf("ebbtable: register node %s: %w", m.opts.NodeID, err)
		}
		if resp.Succeeded {
			m.mu.Lock()
			m.lease = g.ID
			m.mu.Unlock()
			m.fence.Renewed(sent, time.Duration(g.TTL)*time.Second)
			m.log.Info("joined the cluster", "node", m.opts.NodeID, "lease", int64(g.ID), "ttl", g.TTL)
			return nil
		}
		m.cli.Revoke(context.Background(), g.ID)
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 1 && m.opts.PreviousLease != 0 && kvs[0].Lease == m.opts.PreviousLease {
			m.log.Info("revoking the lease of this node's previous process", "node", m.opts.NodeID, "lease", m.opts.PreviousLease)
			if _, err := m.cli.Revoke(ctx, clientv3.LeaseID(m.opts.PreviousLease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return fmt.Errorf("ebbtable: revoke previous lease: %w", err)
			}
			continue
		}
		return fmt.Errorf("%w: %s (wait for its lease, %s, to expire)", ErrNodeLive, m.opts.NodeID, m.opts.TTL)
	}
}

// renew keeps the lease alive a third of the TTL at a time. When etcd
// says the lease is gone (the node was cut off longer than the TTL) the
// fence drops at once and the node registers again under a new lease: the
// tablets the directory still gives it are its own again.
func (m *Member) renew() {
	defer m.wg.Done()
	ttl := m.opts.TTL
	for {
		select {
		case <-m.stop:
			return
		case <-m.opts.Clock.After(ttl / 3):
		}
		m.mu.RLock()
		id := m.lease
		m.mu.RUnlock()
		sent := m.opts.Clock.Now()
		ctx, cancel := context.WithTimeout(context.Background(), ttl/3)
		resp, err := m.cli.KeepAliveOnce(ctx, id)
		cancel()
		switch {
		case err == nil:
			m.fence.Renewed(sent, time.Duration(resp.TTL)*time.Second)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			m.fence.Lost()
			m.log.Warn("lease lost; registering again", "node", m.opts.NodeID)
			ctx, cancel := context.WithTimeout(context.Background(), ttl)
			if err := m.register(ctx); err != nil {
				m.log.Warn("register again", "err", err)
			} else {
				m.republishApplied(ctx)
			}
			cancel()
		default:
			select {
			case <-m.stop:
				return
			default:
			}
			m.log.Warn("lease renewal failed", "err", err)
		}
	}
}

// Live reports whether this node surely holds its lease now; it serves
// its tablets only then.
func (m *Member) Live() bool { return m.fence.Live() }

// ID is this node's id.
func (m *Member) ID() string { return m.opts.NodeID }

// LeaseID is the node's current lease (to remember in its data directory).
func (m *Member) LeaseID() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return int64(m.lease)
}

// Close leaves the cluster: etcd calls of the node still running, or
// made later, fail at once (ErrClosed); the lease is revoked (the node's
// key goes at once; its tablets stay its own in the directory) and the
// client closed. Once closed or abandoned, Close does nothing.
func (m *Member) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	m.done()
	m.halt()
	m.mu.RLock()
	id := m.lease
	m.mu.RUnlock()
	if id != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		m.rawLease.Revoke(ctx, id)
		cancel()
	}
	m.fence.Lost()
	return m.cli.Close()
}

// Abandon stops renewing and closes the client without revoking the lease,
// as a killed process would: the lease expires after its TTL, and every
// etcd call of the node fails at once from now on (ErrClosed). For tests.
func (m *Member) Abandon() error {
	if m.closed.Swap(true) {
		return nil
	}
	m.done()
	m.halt()
	return m.cli.Close()
}

func (m *Member) halt() {
	m.stopped.Do(func() { close(m.stop) })
	m.wg.Wait()
}

// load reads the whole prefix into the cache.
func (m *Member) load(ctx context.Context) error {
	resp, err := m.cli.Get(ctx, m.opts.Prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("ebbtable: read cluster state from etcd: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nodes, m.draining, m.dirs, m.applied = map[string]cluster.Node{}, map[string]bool{}, map[string]cluster.Directory{}, map[string]uint64{}
	old := m.iam
	m.iam = map[string]iamEntry{}
	for _, kv := range resp.Kvs {
		m.applyLocked(mvccpb.PUT, kv)
	}
	m.rev = resp.Header.Revision
	m.metaSeen++ // a deletion missed while the watch was broken shows only here
	m.loadedIAMLocked(old)
	m.notifyLocked()
	return nil
}

// watch keeps the cache current; on a broken or compacted watch it reads
// everything again.
func (m *Member) watch() {
	defer m.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-m.stop; cancel() }()
	// Every watch and progress request on one stream (the client keys
	// streams by the context's metadata).
	wctx := clientv3.WithRequireLeader(ctx)
	m.wg.Add(1)
	go m.requestProgress(wctx)
	for {
		m.mu.RLock()
		from := m.rev + 1
		m.mu.RUnlock()
		for resp := range m.cli.Watch(wctx, m.opts.Prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
			if resp.Err() != nil {
				m.log.Warn("etcd watch", "err", resp.Err())
				break
			}
			if h := m.hold.Load(); h != nil {
				select {
				case <-*h:
				case <-m.stop:
					return
				}
			}
			if resp.IsProgressNotify() { // iam.go: the cache is current as of now
				m.mu.Lock()
				m.heardLocked()
				m.mu.Unlock()
				continue
			}
			m.mu.Lock()
			m.heardLocked()
			for _, ev := range resp.Events {
				m.applyLocked(ev.Type, ev.Kv)
			}
			if resp.Header.Revision > m.rev {
				m.rev = resp.Header.Revision
			}
			m.notifyLocked()
			m.mu.Unlock()
		}
		m.mu.Lock()
		m.lostWatchLocked() // iam.go: read etcd until loaded again
		m.mu.Unlock()
		select {
		case <-m.stop:
			return
		case <-m.opts.Clock.After(200 * time.Millisecond):
		}
		lctx, lcancel := context.WithTimeout(ctx, m.opts.DialTimeout)
		if err := m.load(lctx); err != nil {
			m.log.Warn("etcd reload", "err", err)
		}
		lcancel()
	}
}

func (m *Member) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *Member) applyLocked(t mvccpb.Event_EventType, kv *mvccpb.KeyValue) {
	rest, ok := strings.CutPrefix(string(kv.Key), m.opts.Prefix)
	if !ok {
		return
	}
	kind, name, _ := strings.Cut(rest, "/")
	del := t == mvccpb.DELETE
	switch kind {
	case "nodes":
		var n cluster.Node
		if del || json.Unmarshal(kv.Value, &n) != nil {
			delete(m.nodes, name)
			return
		}
		m.nodes[name] = n
	case "drain":
		if del {
			delete(m.draining, name)
		} else {
			m.draining[name] = true
		}
	case "applied":
		if del {
			delete(m.applied, name)
			return
		}
		if v, err := strconv.ParseUint(string(kv.Value), 10, 64); err == nil {
			m.applied[name] = v
		}
	case "tablets":
		if del {
			delete(m.dirs, name)
			return
		}
		var d cluster.Directory
		if json.Unmarshal(kv.Value, &d) != nil {
			m.log.Warn("undecodable tablet directory in etcd", "key", string(kv.Key))
			return
		}
		if old, ok := m.dirs[name]; ok && old.Revision > kv.ModRevision {
			return
		}
		d.Revision = kv.ModRevision
		m.dirs[name] = d
	case "iam":
		m.applyIAMLocked(name, kv, del)
	case "meta":
		m.metaSeen++
	case "schema":
		if name == "seq" && !del {
			if v, err := strconv.ParseUint(string(kv.Value), 10, 64); err == nil && v > m.schema {
				m.schema = v
			}
		}
	}
}

// Changed returns a channel closed at the cache's next change.
func (m *Member) Changed() <-chan struct{} {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.changed
}

// MetaChanges counts the instance-metadata writes and deletions the
// cache has seen, and its reloads: while it stands still, etcd's instance
// metadata is what it was when it was last read (read it after taking the
// count). Every other change of the cluster (progress marks, schema log
// entries, checkpoints) leaves it alone.
func (m *Member) MetaChanges() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.metaSeen
}

// Revision is the etcd revision the cache reflects.
func (m *Member) Revision() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.rev
}

// Nodes lists the live nodes (those whose lease holds their key), sorted,
// with their draining marks.
func (m *Member) Nodes() []cluster.Node {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]cluster.Node, 0, len(m.nodes))
	for id, n := range m.nodes {
		n.Draining = m.draining[id]
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Node returns a live node.
func (m *Member) Node(id string) (cluster.Node, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, ok := m.nodes[id]
	n.Draining = m.draining[id]
	return n, ok
}

// Directory returns a table's tablet directory ("instance/table").
func (m *Member) Directory(table string) (cluster.Directory, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	d, ok := m.dirs[table]
	return d.Clone(), ok
}

// Directories lists every table's directory, by table name.
func (m *Member) Directories() []cluster.Directory {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]cluster.Directory, 0, len(m.dirs))
	for _, d := range m.dirs {
		out = append(out, d.Clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Table < out[j].Table })
	return out
}

// UpdateDirectory replaces old with next in one etcd transaction that
// holds only if the directory is unchanged since old was read (its mod
// revision) and every new owner is live (its key exists). Otherwise
// cluster.ErrConflict. The cache has next at once.
func (m *Member) UpdateDirectory(ctx context.Context, old, next cluster.Directory) (cluster.Directory, error) {
	if err := next.Validate(); err != nil {
		return old, err
	}
	enc, err := json.Marshal(next)
	if err != nil {
		return old, err
	}
	k := m.dirKey(next.Table)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", old.Revision)}
	had := map[string]bool{}
	for _, t := range old.Tablets {
		had[t.Owner] = true
	}
	for _, t := range next.Tablets {
		if !had[t.Owner] {
			had[t.Owner] = true
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(m.nodeKey(t.Owner)), ">", 0))
		}
	}
	resp, err := m.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(k, string(enc))).Commit()
	if err != nil {
		return old, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if !resp.Succeeded {
		return old, fmt.Errorf("%w: %s (or a new owner is not live)", cluster.ErrConflict, next.Table)
	}
	next = next.Clone()
	next.Revision = resp.Header.Revision
	m.mu.Lock()
	if cur, ok := m.dirs[next.Table]; !ok || cur.Revision < next.Revision {
		m.dirs[next.Table] = next
		m.notifyLocked()
	}
	m.mu.Unlock()
	return next, nil
}

// SetDraining marks a node draining (it takes no new tablets) or not. The
// mark outlives the node's lease.
func (m *Member) SetDraining(ctx context.Context, id string, draining bool) error {
	var err error
	if draining {
		_, err = m.cli.Put(ctx, m.drainKey(id), "1")
	} else {
		_, err = m.cli.Delete(ctx, m.drainKey(id))
	}
	if err != nil {
		return fmt.Errorf("ebbtable: etcd: %w", err)
	}
	return nil
}

// WaitFor waits until cond holds on the cache, or ctx ends.
func (m *Member) WaitFor(ctx context.Context, cond func() bool) error {
	for {
		ch := m.Changed()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-m.stop:
			return ErrClosed
		}
	}
}

// ReadDirectory reads a table's directory from etcd itself (not the
// cache), and brings the cache up to it: after an update whose outcome is
// unknown (a timeout), this tells whether it took.
func (m *Member) ReadDirectory(ctx context.Context, table string) (cluster.Directory, bool, error) {
	resp, err := m.cli.Get(ctx, m.dirKey(table))
	if err != nil {
		return cluster.Directory{}, false, fmt.Errorf("ebbtable: etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return cluster.Directory{}, false, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applyLocked(mvccpb.PUT, resp.Kvs[0])
	m.notifyLocked()
	d := m.dirs[table]
	return d.Clone(), true, nil
}

// StaleDirectory puts d in the cache as this node's view of its table
// until the next change of the table's directory in etcd: tests use it to
// make a node's view lag behind etcd's.
func (m *Member) StaleDirectory(d cluster.Directory) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dirs[d.Table] = d.Clone()
}
