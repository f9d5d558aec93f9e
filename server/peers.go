package server

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ebbtable/ebbtable/replication"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Peers are the other clusters of this process's instance: other ebbtable
// processes, each serving one cluster, that replicate with this one. The
// registry is durable (engine metadata, kind "peer") and process-wide: a
// peer is a cluster of every instance this process serves.
const kindPeer = "peer"

// kindPeerGone marks a cluster removed with DeleteCluster.
const kindPeerGone = "peergone"

// gone says whether a cluster was removed and has not joined again.
func (ps *peerSet) gone(id string) bool {
	found := false
	_ = ps.s.engine.InstanceMeta(kindPeerGone, peerInstance, func(_, name string, _ []byte) error {
		found = found || name == id
		return nil
	})
	return found
}

// peerInstance is the instance field of peer entries in the engine's
// instance metadata (peers belong to the process, not to one instance).
const peerInstance = "-"

// peerHealthyWithin is how recent the last successful exchange with a peer
// must be for routing to count it as available.
const peerHealthyWithin = 3 * time.Second

// peerInfo is what is stored about a peer.
type peerInfo = replication.PeerInfo

// peer is a known peer with its connection and link state.
type peer struct {
	info peerInfo
	conn *grpc.ClientConn
	// lastContact is when a call to the peer last succeeded.
	lastContact time.Time
	lastErr     error
	// lastFail is when a call to the peer last failed.
	lastFail time.Time
	// cur is the address in use, one of addrs(info); "": info.Addr.
	cur string
}

// addrs are the addresses a peer is reached at: the one it gave, then
// the other live nodes of a peer of several nodes.
func addrs(pi peerInfo) []string {
	out := []string{pi.Addr}
	for _, a := range pi.Nodes {
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// addr is the address in use.
func (p *peer) addr() string {
	if p.cur != "" {
		return p.cur
	}
	return p.info.Addr
}

// failOver turns to the next address of a peer of several nodes after a
// call failed UNAVAILABLE (its node is down or cut off, or cannot answer
// for its cluster): the next call dials another node. The caller holds
// the set's lock.
func (p *peer) failOver() {
	all := addrs(p.info)
	if len(all) < 2 {
		return
	}
	next := all[(slices.Index(all, p.addr())+1)%len(all)]
	if p.conn != nil {
		p.conn.Close()
		p.conn = nil
	}
	p.cur = next
}

// peerSet is the registry of peers.
type peerSet struct {
	s  *Server
	mu sync.Mutex
	m  map[string]*peer
	// onAdd is called (without mu) for a peer added after load.
	onAdd func(peerInfo)
	// closed is set by close: no connection is opened after it, since
	// none would be closed again.
	closed bool
}

func newPeerSet(s *Server) *peerSet { return &peerSet{s: s, m: map[string]*peer{}} }

// load reads the stored peers.
func (ps *peerSet) load() error {
	return ps.s.engine.InstanceMeta(kindPeer, peerInstance, func(_, id string, v []byte) error {
		var pi peerInfo
		if err := json.Unmarshal(v, &pi); err != nil {
			return fmt.Errorf("ebbtable: peer %s: %w", id, err)
		}
		ps.mu.Lock()
		ps.m[pi.ID] = &peer{info: pi}
		ps.mu.Unlock()
		return nil
	})
}

// addLocal stores a peer (or updates its address and readiness) durably
// on this node (add, in clusterrepl.go, also tells the node's cluster).
func (ps *peerSet) addLocal(pi peerInfo) error {
	if pi.ID == "" || pi.ID == ps.s.opts.ClusterID {
		return fmt.Errorf("%w: peer cluster id %q", errInvalid, pi.ID)
	}
	v, err := json.Marshal(pi)
	if err != nil {
		return err
	}
	if err := ps.s.engine.PutInstanceMeta(kindPeer, peerInstance, pi.ID, v); err != nil {
		return err
	}
	ps.mu.Lock()
	p, existed := ps.m[pi.ID]
	if !existed {
		p = &peer{}
		ps.m[pi.ID] = p
	}
	if !slices.Contains(addrs(pi), p.addr()) || p.cur == "" && p.info.Addr != pi.Addr {
		if p.conn != nil {
			p.conn.Close()
			p.conn = nil
		}
		p.cur = ""
	}
	p.info = pi
	onAdd := ps.onAdd
	ps.mu.Unlock()
	if !existed && onAdd != nil {
		onAdd(pi)
	}
	return nil
}

// remove forgets a peer.
func (ps *peerSet) remove(id string) error {
	if err := ps.s.unpublishPeer(id); err != nil {
		return err
	}
	if err := ps.s.engine.DeleteInstanceMeta(kindPeer, peerInstance, id); err != nil {
		return err
	}
	// Remember the removal, so other peers' lists do not bring the cluster
	// back; it ends when the cluster joins again.
	if err := ps.s.engine.PutInstanceMeta(kindPeerGone, peerInstance, id, []byte("1")); err != nil {
		return err
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p, ok := ps.m[id]; ok {
		if p.conn != nil {
			p.conn.Close()
		}
		delete(ps.m, id)
	}
	return nil
}

// list returns the known peers, sorted by id.
func (ps *peerSet) list() []peerInfo {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]peerInfo, 0, len(ps.m))
	for _, p := range ps.m {
		out = append(out, p.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// get returns one peer's info.
func (ps *peerSet) get(id string) (peerInfo, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.m[id]
	if !ok {
		return peerInfo{}, false
	}
	return p.info, true
}

// conn returns a (shared, lazily dialled) connection to a peer.
func (ps *peerSet) conn(id string) (*grpc.ClientConn, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.m[id]
	if !ok {
		return nil, fmt.Errorf("%w: cluster %q is not a known peer", errNotFound, id)
	}
	if p.conn == nil {
		if ps.closed {
			return nil, status.Error(codes.Unavailable, "ebbtable: this server is shutting down")
		}
		addr := p.addr()
		if err := ps.s.sec.allowPeer(addr); err != nil {
			p.failOver() // another node of the peer may be allowed
			return nil, err
		}
		c, err := grpc.NewClient("passthrough:///"+addr, ps.s.sec.peerDialOptions(addr, ps.s.opts.MaxMessageBytes)...)
		if err != nil {
			return nil, err
		}
		p.conn = c
	}
	return p.conn, nil
}

// contact records the outcome of a call to a peer.
func (ps *peerSet) contact(id string, err error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p, ok := ps.m[id]; ok {
		p.lastErr = err
		if err == nil {
			p.lastContact = ps.s.opts.Clock.Now()
		} else {
			p.lastFail = ps.s.opts.Clock.Now()
			if c := status.Code(err); c == codes.Unavailable || c == codes.DeadlineExceeded {
				p.failOver()
			}
		}
	}
}

// healthy says whether a peer answered within peerHealthyWithin and has
// finished its initial copy.
func (ps *peerSet) healthy(id string) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.m[id]
	if !ok || !p.info.Ready || p.lastContact.IsZero() {
		return false
	}
	return ps.s.opts.Clock.Now().Sub(p.lastContact) <= peerHealthyWithin
}

// close closes every peer connection.
func (ps *peerSet) close() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.closed = true
	for _, p := range ps.m {
		if p.conn != nil {
			p.conn.Close()
			p.conn = nil
		}
	}
}
