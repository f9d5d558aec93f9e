package replication_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/internal/testkit/poll"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/table"
)

const inst = "inst"

// network joins in-process clusters: each cluster's Directory dials the
// others' Replicators directly (a pull is a call of the peer's Answer).
type network struct {
	t     *testing.T
	clock *clock.Fake
	mu    sync.Mutex
	nodes map[string]*node
	// down lists clusters whose answers fail.
	down map[string]bool
}

// node is one cluster: an engine on disk, its peer registry and its
// Replicator.
type node struct {
	id   string
	net  *network
	eng  *table.Engine
	repl *replication.Replicator

	mu       sync.Mutex
	peers    map[string]replication.PeerInfo
	gone     map[string]bool
	contacts map[string]time.Time
	pulls    int // pulls this node's pullers finished
	pullsOf  map[string]int
	// shipped counts, per peer, answers with records that peer gave this
	// node; settled is shipped as of the last contact recorded with it.
	shipped, settledN map[string]int
}

func newNetwork(t *testing.T) *network {
	return &network{t: t, clock: clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), nodes: map[string]*node{}, down: map[string]bool{}}
}

// add opens a cluster; wait is its pulls' long-poll wait (negative: none).
func (n *network) add(id string, wait time.Duration) *node {
	return n.addWith(id, replication.Options{PullWait: wait})
}

// addWith opens a cluster with o's tuning.
func (n *network) addWith(id string, o replication.Options) *node {
	t := n.t
	eng, err := table.Open(table.Options{Dir: t.TempDir(), Clock: n.clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.SetReplicating(id); err != nil {
		t.Fatal(err)
	}
	if s, ok := o.Sink.(interface{ setEngine(*table.Engine) }); ok {
		s.setEngine(eng) // a test's Sink around the engine
	}
	nd := &node{id: id, net: n, eng: eng, peers: map[string]replication.PeerInfo{}, gone: map[string]bool{}, contacts: map[string]time.Time{}, shipped: map[string]int{}, settledN: map[string]int{}, pullsOf: map[string]int{}}
	o.ClusterID, o.Advertised = id, func() string { return "mem:" + id }
	o.Engine, o.Peers, o.Clock = eng, nd, n.clock
	nd.repl = replication.New(o)
	t.Cleanup(func() {
		nd.repl.Stop()
		eng.Close()
	})
	n.mu.Lock()
	n.nodes[id] = nd
	n.mu.Unlock()
	return nd
}

// link makes every pair of the given clusters peers (ready).
func link(nodes ...*node) {
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				if err := a.Add(replication.PeerInfo{ID: b.id, Addr: "mem:" + b.id, Ready: true}); err != nil {
					panic(err)
				}
			}
		}
	}
}

// The Directory.

func (nd *node) Get(id string) (replication.PeerInfo, bool) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	p, ok := nd.peers[id]
	return p, ok
}

func (nd *node) List() []replication.PeerInfo {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	var out []replication.PeerInfo
	for _, p := range nd.peers {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (nd *node) Gone(id string) bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.gone[id]
}

func (nd *node) Add(p replication.PeerInfo) error {
	if p.ID == nd.id {
		return fmt.Errorf("own id %q", p.ID)
	}
	nd.mu.Lock()
	nd.peers[p.ID] = p
	nd.mu.Unlock()
	return nil
}

func (nd *node) Rejoined(id string) error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	delete(nd.gone, id)
	return nil
}

func (nd *node) Contact(id string, err error) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	nd.pulls++
	nd.pullsOf[id]++
	nd.settledN[id] = nd.shipped[id]
	if err == nil {
		nd.contacts[id] = nd.net.clock.Now()
	}
}

func (nd *node) Healthy(id string) bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	t, ok := nd.contacts[id]
	return ok && nd.peers[id].Ready && nd.net.clock.Now().Sub(t) <= 3*time.Second
}

func (nd *node) Dial(id string) (replication.Peer, error) {
	nd.net.mu.Lock()
	target := nd.net.nodes[id]
	nd.net.mu.Unlock()
	if target == nil {
		return nil, fmt.Errorf("no cluster %q", id)
	}
	return memPeer{from: nd, to: target}, nil
}

func (nd *node) shippedTo(id string) int {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.shipped[id]
}

func (nd *node) settled(id string) int {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.settledN[id]
}

func (nd *node) pullsFrom(id string) int {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.pullsOf[id]
}

func (nd *node) pullCount() int {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.pulls
}

// memPeer is a replication.Peer calling another node's Replicator in
// memory.
type memPeer struct{ from, to *node }

var errDown = errors.New("peer down")

func (p memPeer) Pull(ctx context.Context, req replication.PullRequest) (*replication.PullResponse, error) {
	p.to.net.mu.Lock()
	down := p.to.net.down[p.to.id]
	p.to.net.mu.Unlock()
	if down {
		return nil, errDown
	}
	if _, ok := p.to.Get(req.Cluster); !ok {
		return nil, fmt.Errorf("cluster %q has not joined %q", req.Cluster, p.to.id)
	}
	resp, err := p.to.repl.Answer(ctx, req)
	if err == nil && resp.Shipped > 0 {
		p.from.mu.Lock()
		p.from.shipped[p.to.id]++
		p.from.mu.Unlock()
	}
	return resp, err
}

func (p memPeer) Snapshot(ctx context.Context, fn func(replication.SnapshotItem) error) error {
	return p.to.repl.Snapshot(fn)
}

func (p memPeer) Join(ctx context.Context, req replication.JoinRequest) (*replication.JoinResponse, error) {
	return p.to.repl.Admit(req)
}

func (p memPeer) Ready(ctx context.Context, cluster string) error {
	return p.to.repl.MarkReady(cluster)
}

// Helpers on engines.

func createTable(t *testing.T, nd *node, name string, rule gcrule.Rule) {
	t.Helper()
	if _, err := nd.eng.CreateTable(inst, name, table.TableSpec{Families: []table.FamilySpec{{Name: "f", GC: rule}}}); err != nil {
		t.Fatal(err)
	}
}

func put(t *testing.T, nd *node, tbl, row, val string) {
	t.Helper()
	if err := nd.eng.MutateRow(inst, tbl, []byte(row), []table.Mutation{{Kind: table.SetCell, Family: "f", Qualifier: []byte("q"), Timestamp: clock.MillisTruncated(nd.net.clock.Now()), Value: []byte(val)}}); err != nil {
		t.Fatal(err)
	}
}

func deleteRow(t *testing.T, nd *node, tbl, row string) {
	t.Helper()
	if err := nd.eng.MutateRow(inst, tbl, []byte(row), []table.Mutation{{Kind: table.DeleteFromRow}}); err != nil {
		t.Fatal(err)
	}
}

// rows renders a table as "row=value,…" (latest value of f:q), or
// "no table".
func rows(nd *node, tbl string) string {
	var b bytes.Buffer
	err := nd.eng.ReadRows(context.Background(), inst, tbl, table.ReadRequest{}, func(r cell.Row) error {
		v := ""
		var ts int64 = -1
		for _, c := range r.Cells {
			if c.Timestamp > ts {
				ts, v = c.Timestamp, string(c.Value)
			}
		}
		fmt.Fprintf(&b, "%s=%s,", r.Key, v)
		return nil
	})
	if errors.Is(err, table.ErrTableNotFound) {
		return "no table"
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return b.String()
}

func pull(t *testing.T, nd *node, from string) {
	t.Helper()
	if err := nd.repl.PullOnce(context.Background(), from); err != nil {
		t.Fatalf("%s pulls from %s: %v", nd.id, from, err)
	}
}

// converge polls until every node's table reads want, moving the clock by
// a long poll's wait each time (idle pulls end then).
func converge(t *testing.T, tbl, want string, nodes ...*node) {
	t.Helper()
	poll.Eventually(t, tbl+" converges", 10*time.Second, func() (bool, string) {
		nodes[0].net.clock.Advance(replication.PullWait)
		for _, nd := range nodes {
			if got := rows(nd, tbl); got != want {
				return false, fmt.Sprintf("%s reads %q, want %q", nd.id, got, want)
			}
		}
		return true, ""
	})
}
