package replication

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus"
)

// Tuning.
const (
	PullWait       = 250 * time.Millisecond // how long a pull waits for news (also how stale an idle peer's checkpoint gets)
	PullLimit      = 2000                   // records per table per pull
	pullReadStep   = 200                    // records read at a time while filling a pull
	PullMaxBytes   = 32 << 20               // about the most record bytes one pull carries
	pullTimeout    = 15 * time.Second       // one pull call, waiting included
	backoffMin     = 100 * time.Millisecond
	pullBackoffMax = 2 * time.Second
	// TombstoneTrimEvery is how often tombstones no peer needs are dropped.
	TombstoneTrimEvery = 30 * time.Second
)

// Options configure a Replicator.
type Options struct {
	// ClusterID is this cluster's id.
	ClusterID string
	// Advertised returns the address peers reach this cluster at.
	Advertised func() string
	Engine     Engine
	Peers      Directory
	// Clock tells the time for delays, latencies and trimming (the
	// server's clock, which tests may fake).
	Clock clock.Clock
	// Pace makes the puller's timers: backoff, the answer's long poll.
	// The server passes the real clock, as peers run in real time; tests
	// pass a fake one. nil: Clock.
	Pace clock.Clock
	Log  *slog.Logger
	// Registry receives the replication metrics; nil: none registered.
	Registry prometheus.Registerer
	// AgeCutoffs returns this cluster's age cutoffs (micros) per family of
	// a table; nil: none.
	AgeCutoffs func(*table.Meta) map[string]int64
	// LocalMeta lists the instance metadata that travels with pulls, and
	// AdoptMeta merges a peer's (the peer's id, its list); nil: none
	// travels.
	LocalMeta func() ([]MetaEntry, error)
	AdoptMeta func(id string, list []MetaEntry) error
	// OnReady is told when a cluster that joined through this one
	// finished its copy; nil: nothing.
	OnReady func(id string)
	// PullMaxBytes bounds the record bytes of one answer; 0: PullMaxBytes.
	PullMaxBytes int
	// DataDir names this cluster's data in messages.
	DataDir string
	// SourceOnly: this cluster answers its peers' pulls but runs no
	// puller.
	SourceOnly bool
	// Sink is where pulled records and schema changes go and where the
	// checkpoints are kept; nil: Engine. A cluster of several nodes passes
	// one that sends records to their rows' owners and keeps checkpoints
	// in etcd (docs/replication.md, "Pulling into a cluster of several
	// nodes").
	Sink Sink
	// Pulls says whether this process pulls now (a cluster of several
	// nodes pulls through one node at a time); nil: always. The pullers of
	// a process that does not pull wait, checking again every PullWait.
	Pulls func() bool
	// PullWait is how long a pull asks the peer to wait for news; 0:
	// PullWait, negative: not at all.
	PullWait time.Duration
	// Nodes lists the addresses of this cluster's live nodes, sent to
	// peers with every answer so they pull from any of them; nil: this
	// process alone.
	Nodes func() []string
	// OnThrough is told when the source's closed timestamp through which
	// every table is applied here advances (a cluster of several nodes
	// publishes it, so every node knows the delay); nil: nothing.
	OnThrough func(id string, through int64)
}

// Replicator runs one puller per peer and answers peers' pulls. Run starts
// a peer's puller, Pause and Resume hold and release it, Stop ends them all
// (as etcd's compactor is driven).
type Replicator struct {
	o    Options
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu sync.Mutex
	// through is, per source cluster, the source's closed timestamp up to
	// which every table's records are applied here.
	through map[string]int64
	links   map[string]*link
	// lastTrim is when tombstones were last trimmed.
	lastTrim time.Time
	// peerCutoffs are the age cutoffs each peer reported with its last
	// answer, per table family.
	peerCutoffs map[string]map[FamilyKey]int64

	m *metrics
	// budgetSpent counts the answers this cluster gave whose records
	// reached PullMaxBytes (BudgetSpent).
	budgetSpent atomic.Int64
}

// BudgetSpent is how many of this cluster's pull answers stopped at the
// answer's byte budget, PullMaxBytes (for tests: that a test's writes
// crossed it).
func (r *Replicator) BudgetSpent() int64 { return r.budgetSpent.Load() }

// link is the state of the puller of one peer.
type link struct {
	running bool
	paused  bool
	// resume is closed when a paused link resumes.
	resume chan struct{}
}

// New returns a Replicator; nothing runs until Run.
func New(o Options) *Replicator {
	if o.Pace == nil {
		o.Pace = o.Clock
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.PullMaxBytes <= 0 {
		o.PullMaxBytes = PullMaxBytes
	}
	if o.PullWait == 0 {
		o.PullWait = PullWait
	}
	if o.Sink == nil {
		o.Sink = o.Engine
	}
	if o.Advertised == nil {
		o.Advertised = func() string { return "" }
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Replicator{o: o, ctx: ctx, stop: cancel, through: map[string]int64{}, links: map[string]*link{}, peerCutoffs: map[string]map[FamilyKey]int64{}}
	r.m = newMetrics(r)
	if o.Registry != nil {
		r.m.register(o.Registry)
	}
	return r
}

func (r *Replicator) linkLocked(id string) *link {
	l := r.links[id]
	if l == nil {
		l = &link{}
		r.links[id] = l
	}
	return l
}

// Run starts pulling from a peer unless a puller for it runs or the
// Replicator stopped.
func (r *Replicator) Run(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil || r.o.SourceOnly {
		return
	}
	l := r.linkLocked(id)
	if l.running {
		return
	}
	l.running = true
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.run(id)
	}()
}

// Stop ends every puller and waits for them; pending answers return.
func (r *Replicator) Stop() {
	r.stop()
	r.wg.Wait()
}

// Done is closed once Stop was called.
func (r *Replicator) Done() <-chan struct{} { return r.ctx.Done() }

// Pause holds pulling from a peer: the puller finishes or drops the pull
// in flight and waits for Resume.
func (r *Replicator) Pause(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.linkLocked(id)
	if !l.paused {
		l.paused = true
		l.resume = make(chan struct{})
	}
}

// Resume releases a paused peer's puller.
func (r *Replicator) Resume(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.links[id]; l != nil && l.paused {
		l.paused = false
		close(l.resume)
	}
}

// Paused says whether pulling from a peer is paused.
func (r *Replicator) Paused(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.links[id]
	return l != nil && l.paused
}

// pausedCh returns the channel a paused link waits on, nil if not paused.
func (r *Replicator) pausedCh(id string) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.links[id]; l != nil && l.paused {
		return l.resume
	}
	return nil
}

// run pulls from one peer until Stop or the peer is removed.
func (r *Replicator) run(id string) {
	backoff := backoffMin
	for {
		if r.ctx.Err() != nil {
			return
		}
		if ch := r.pausedCh(id); ch != nil {
			select {
			case <-ch:
			case <-r.ctx.Done():
				return
			}
			continue
		}
		if r.o.Pulls != nil && !r.o.Pulls() {
			select {
			case <-r.o.Pace.After(max(r.o.PullWait, PullWait)):
			case <-r.ctx.Done():
				return
			}
			continue
		}
		if _, ok := r.o.Peers.Get(id); !ok {
			r.mu.Lock()
			r.links[id].running = false
			r.mu.Unlock()
			return
		}
		if err := r.PullOnce(r.ctx, id); err != nil {
			if r.ctx.Err() != nil {
				return
			}
			r.o.Log.Debug("replication: pull failed", "peer", id, "err", err)
			select {
			case <-r.o.Pace.After(backoff):
			case <-r.ctx.Done():
				return
			}
			backoff = min(2*backoff, pullBackoffMax)
			continue
		}
		backoff = backoffMin
	}
}

// MaxDelay is how far this cluster lags a source: now minus the source's
// closed timestamp through which every record is applied here.
func (r *Replicator) MaxDelay(id string) (time.Duration, bool) {
	r.mu.Lock()
	t, ok := r.through[id]
	r.mu.Unlock()
	if !ok {
		return 0, false
	}
	return time.Duration(max(clock.Micros(r.o.Clock.Now())-t, 0)) * time.Microsecond, true
}

// Through is the source's closed timestamp through which every table's
// records are applied here (0 before the first complete pull).
func (r *Replicator) Through(id string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.through[id]
}

// PullOnce asks a peer for news and applies it, and records the outcome
// with Directory.Contact. The puller calls it in a loop; tests may call it
// directly.
func (r *Replicator) PullOnce(ctx context.Context, id string) error {
	err := r.pullOnce(ctx, id)
	r.o.Peers.Contact(id, err)
	return err
}

func (r *Replicator) pullOnce(ctx context.Context, id string) error {
	e := r.o.Sink
	req := PullRequest{Cluster: r.o.ClusterID, Addr: r.o.Advertised(), Wait: max(r.o.PullWait, 0), Limit: PullLimit, Positions: map[string]changestream.Position{}}
	for _, m := range e.Tables("") {
		p, ok, err := e.Checkpoint(m, id)
		if err != nil {
			return err
		}
		if ok {
			req.Positions[TableKey(m.Instance, m.Name)] = p
		}
	}
	peer, err := r.o.Peers.Dial(id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	out, err := peer.Pull(ctx, req)
	if err != nil {
		return err
	}
	if r.Paused(id) {
		return nil // paused while the pull waited: drop what it brought
	}
	return r.apply(id, out)
}

// apply applies a peer's answer.
func (r *Replicator) apply(id string, out *PullResponse) error {
	e := r.o.Sink
	if out.Cluster != id {
		p, _ := r.o.Peers.Get(id)
		return fmt.Errorf("ebbtable: peer at %s is cluster %q, not %q", p.Addr, out.Cluster, id)
	}
	r.LearnPeers(out.Peers)
	if err := r.syncSchemas(id, out.Catalog, out.Dropped); err != nil {
		return err
	}
	if r.o.AdoptMeta != nil {
		if err := r.o.AdoptMeta(id, out.InstanceMeta); err != nil {
			return err
		}
	}
	cuts := out.AgeCutoffs
	if cuts == nil {
		cuts = map[FamilyKey]int64{}
	}
	r.mu.Lock()
	r.peerCutoffs[id] = cuts
	r.mu.Unlock()
	complete := true
	for _, pt := range out.Tables {
		m, err := e.Table(pt.Instance, pt.Table)
		if err != nil {
			complete = false
			continue // dropped here meanwhile; the schema sync settles it
		}
		if pt.Full {
			complete = false
		}
		if _, err := e.ApplyReplicated(m, id, pt.Records, pt.Through); err != nil {
			return err
		}
		now := clock.Micros(r.o.Clock.Now())
		for _, rec := range pt.Records {
			r.m.latency.WithLabelValues(id).Observe(float64(max(now-rec.Commit, 0)) / 1e6)
		}
		r.m.applied.WithLabelValues(id).Add(float64(len(pt.Records)))
		if n := gcDeletes(pt.Records); n > 0 {
			r.m.gcApplied.WithLabelValues(id, m.Name).Add(float64(n))
		}
	}
	if complete && out.Closed > 0 {
		r.mu.Lock()
		r.through[id] = max(r.through[id], out.Closed)
		through := r.through[id]
		now := r.o.Clock.Now()
		trim := now.Sub(r.lastTrim) > TombstoneTrimEvery
		if trim {
			r.lastTrim = now
		}
		r.mu.Unlock()
		if r.o.OnThrough != nil {
			r.o.OnThrough(id, through)
		}
		if trim {
			r.trimTombstones()
		}
	}
	return nil
}

// NoteThrough records a source's closed timestamp through which another
// node of this cluster (the one that pulls) has every table applied, so
// MaxDelay and the delay metric answer on every node.
func (r *Replicator) NoteThrough(id string, through int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.through[id] = max(r.through[id], through)
}

// LearnPeers adds clusters a peer knows and this one does not (a third
// cluster that joined through the peer) and updates readiness.
func (r *Replicator) LearnPeers(list []PeerInfo) {
	ps := r.o.Peers
	for _, pi := range list {
		if pi.ID == "" || pi.ID == r.o.ClusterID || pi.Addr == "" {
			continue
		}
		old, known := ps.Get(pi.ID)
		if !known && ps.Gone(pi.ID) {
			continue // removed here with DeleteCluster
		}
		if known {
			pi.Ready = pi.Ready || old.Ready
			if pi.Nodes == nil {
				// A third cluster's list (it keeps no nodes of this
				// peer, or an older one): keep those known here, and the
				// address in use when it names one of them.
				pi.Nodes = old.Nodes
				if slices.Contains(old.Nodes, pi.Addr) {
					pi.Addr = old.Addr
				}
			}
			if old.Same(pi) {
				continue
			}
		}
		if err := ps.Add(pi); err != nil {
			r.o.Log.Warn("replication: cannot record peer", "peer", pi.ID, "err", err)
		}
	}
}

// trimTombstones drops delete tombstones no peer can still need: stamped
// before every peer's records are applied here.
func (r *Replicator) trimTombstones() {
	low := int64(math.MaxInt64)
	peers := r.o.Peers.List()
	r.mu.Lock()
	for _, p := range peers {
		low = min(low, r.through[p.ID])
	}
	r.mu.Unlock()
	if len(peers) == 0 || low <= 0 {
		return
	}
	if n, err := r.o.Sink.TrimTombstones(low); err != nil {
		r.o.Log.Warn("replication: trimming tombstones", "err", err)
	} else if n > 0 {
		r.o.Log.Debug("replication: trimmed tombstones", "count", n)
	}
}

// lowerAfter is where reading a table's records resumes after p. A position
// with the largest index stands for "everything committed at p.Commit".
func lowerAfter(tableID uint64, p changestream.Position) []byte {
	if p.Index == math.MaxUint32 {
		return changestream.TimeKey(tableID, p.Commit+1)
	}
	return changestream.After(tableID, p)
}

// ThroughClosed is the position standing for every record committed at or
// before closed.
func ThroughClosed(closed int64) changestream.Position {
	return changestream.Position{Commit: closed, Index: math.MaxUint32}
}
