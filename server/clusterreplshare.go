package server

import (
	"context"
	"encoding/json"
	"time"

	"github.com/ebbtable/ebbtable/replication"
)

// What the node that pulls for a cluster of several nodes shares with the
// others through etcd (docs/replication.md, "Pulling into a cluster of
// several nodes"), so every node answers alike:
//   - each peer's closed timestamp through which the cluster has applied
//     every table (repl/through/PEER), written at most every
//     throughShareEvery: every node's replication status (which reads it
//     afresh on a node that does not pull) and
//     ebbtable_replication_max_delay_seconds tell the delay;
//   - the instance metadata of the peer's last answer (repl/meta/PEER),
//     written when it changes: every node adopts the peer's clusters, app
//     profiles, schema bundles, authorized views and declared instances.
// The other nodes read both every second (clusterPeerLoop).

// throughShareEvery bounds how often the puller writes a peer's through
// (about once per idle pull: PullWait).
const throughShareEvery = 250 * time.Millisecond

// clusterNodeAddrs are the addresses of the cluster's live nodes, which a
// peer may pull from; nil outside a cluster.
func (s *Server) clusterNodeAddrs() []string {
	c := s.cluster
	if c == nil || c.m == nil {
		return nil
	}
	var out []string
	for _, n := range c.m.Nodes() {
		if n.Addr != "" {
			out = append(out, n.Addr)
		}
	}
	return out
}

// shareThrough publishes a peer's through (Options.OnThrough).
func (k *clusterSink) shareThrough(id string, through int64) {
	now := k.s.opts.Clock.Now()
	k.mu.Lock()
	if now.Sub(k.thruShared[id]) < throughShareEvery {
		k.mu.Unlock()
		return
	}
	k.thruShared[id] = now
	k.mu.Unlock()
	ctx, cancel := etcdCtx()
	defer cancel()
	if err := k.c.m.PutReplThrough(ctx, id, through); err != nil {
		k.s.log.Debug("replication: sharing the delay", "peer", id, "err", err)
	}
}

// adoptAndShare adopts a peer's instance metadata here and, when it
// changed, publishes it for the cluster's other nodes.
func (s *Server) adoptAndShare(id string, list []replication.MetaEntry) error {
	if err := s.inst.adoptPeerMeta(list); err != nil {
		return err
	}
	if err := s.adoptClusterIAM(list); err != nil { // clusteriamrepl.go
		return err
	}
	k := s.cluster.sink
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	k.mu.Lock()
	same := string(b) == k.metaShared[id]
	k.mu.Unlock()
	if same {
		return nil
	}
	ctx, cancel := etcdCtx()
	defer cancel()
	if err := k.c.m.PutReplMeta(ctx, id, b); err != nil {
		return err
	}
	k.mu.Lock()
	k.metaShared[id] = string(b)
	k.mu.Unlock()
	return nil
}

// readThroughs takes the peers' throughs the puller shared (replication
// status on a node that does not pull reads them afresh).
func (k *clusterSink) readThroughs(ctx context.Context) error {
	thr, err := k.c.m.ReplThroughs(ctx)
	if err != nil {
		return err
	}
	for id, v := range thr {
		k.s.repl.NoteThrough(id, v)
	}
	return nil
}

// readShared takes what the puller shared: the delays, and the peers'
// metadata that changed since this node last adopted it.
func (k *clusterSink) readShared(ctx context.Context) error {
	if err := k.readThroughs(ctx); err != nil {
		return err
	}
	vals, revs, err := k.c.m.ReplMetas(ctx)
	if err != nil {
		return err
	}
	for id, b := range vals {
		k.mu.Lock()
		seen := k.metaRevs[id] == revs[id]
		k.mu.Unlock()
		if seen {
			continue
		}
		if _, ok := k.s.peers.get(id); !ok {
			continue // not (or no longer) a peer here
		}
		var list []replication.MetaEntry
		if err := json.Unmarshal(b, &list); err != nil {
			return err
		}
		if err := k.s.inst.adoptPeerMeta(list); err != nil {
			return err
		}
		k.mu.Lock()
		k.metaRevs[id] = revs[id]
		k.mu.Unlock()
	}
	return nil
}
