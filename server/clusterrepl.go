package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/storage"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Replication from a cluster of several nodes (docs/replication.md,
// "Clusters of several nodes").
//
// Each node of such a cluster records the changes of the tablets it owns in
// its own engine's change stream, stamped by its own commit sequence. A
// peer cluster pulls from one node (the one whose address it knows, or the
// next of the nodes each answer lists when that one fails); that
// node asks every node of its cluster for its records (EbbAdmin/Pull and
// Snapshot carrying metaReplLocal, answered from the node's engine alone)
// and merges them: it keeps, per table, the records committed at or before
// C, the smallest closed timestamp among the nodes' answers (a node whose
// answer stopped at its budget counts with the commit before its last
// record), in commit order, and answers "through C". No node commits at or
// below its closed timestamp later, and a tablet's new owner commits after
// everything its old owner committed (a move carries the source's closed
// timestamp, metaCommitFloor, and the target raises its sequence to it), so
// one position per table, a commit time, is exact for the whole cluster:
// the peer's checkpoints stay what they are between clusters of one node.
//
// The peers of a cluster of several nodes are kept in etcd
// (clusteretcd.PutReplPeer), so every node records changes for them from
// the moment they join, and each node mirrors them in its own peer set.
//
// A cluster of several nodes pulls from its peers through one node
// (clusterpull.go), and joins an instance with --join (clusterjoin.go).

// metaReplLocal marks a pull or snapshot one node of a cluster asks of
// another: answered from the receiving node's engine alone.
const metaReplLocal = "x-ebbtable-repl-local"

// metaCommitFloor, on a move's IngestSpan, is the source's closed commit
// timestamp: the target raises its commit sequence to it.
const metaCommitFloor = "x-ebbtable-commit-floor"

// replLocal says whether a replication call is a node's part of its
// cluster's answer.
func replLocal(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, metaReplLocal)) > 0
}

// commitFloor is a move's metaCommitFloor, 0 without one.
func commitFloor(ctx context.Context) int64 {
	v := metadata.ValueFromIncomingContext(ctx, metaCommitFloor)
	if len(v) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(v[len(v)-1], 10, 64)
	return n
}

// withCommitFloor adds this node's closed timestamp to a move's IngestSpan.
func (c *clusterMember) withCommitFloor(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, metaCommitFloor, strconv.FormatInt(c.s.engine.ClosedTimestamp(), 10))
}

// add stores a peer on this node and, in a cluster of several nodes, in
// etcd for every node.
func (ps *peerSet) add(pi peerInfo) error {
	if err := ps.addLocal(pi); err != nil {
		return err
	}
	return ps.s.publishPeer(pi)
}

// publishPeer records a peer in etcd for the whole cluster.
func (s *Server) publishPeer(pi peerInfo) error {
	if s.cluster == nil || s.cluster.m == nil {
		return nil
	}
	v, err := json.Marshal(pi)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.cluster.m.PutReplPeer(ctx, pi.ID, v)
}

// unpublishPeer removes a peer from etcd.
func (s *Server) unpublishPeer(id string) error {
	if s.cluster == nil || s.cluster.m == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.cluster.m.DeleteReplPeer(ctx, id)
}

// syncClusterPeers mirrors the cluster's peers from etcd into this node's
// peer set, and turns recording on when there are any.
func (s *Server) syncClusterPeers(ctx context.Context) error {
	if s.cluster == nil || s.cluster.m == nil {
		return nil
	}
	all, err := s.cluster.m.ReplPeers(ctx)
	if err != nil {
		return err
	}
	for id, v := range all {
		var pi peerInfo
		if err := json.Unmarshal(v, &pi); err != nil {
			return fmt.Errorf("ebbtable: replication peer %s in etcd: %w", id, err)
		}
		if old, ok := s.peers.get(pi.ID); ok && old.Same(pi) {
			continue
		}
		if err := s.peers.addLocal(pi); err != nil {
			return err
		}
	}
	if len(all) > 0 {
		if _, on := s.engine.Replicating(); !on {
			return s.engine.SetReplicating(s.opts.ClusterID)
		}
	}
	return nil
}

// clusterPeerLoop keeps the peer set in step with etcd.
func (s *Server) clusterPeerLoop() {
	for {
		ctx, cancel := s.stopCtx(5 * time.Second) // cut short by Close
		if err := s.syncClusterPeers(ctx); err != nil {
			s.log.Debug("replication: reading the cluster's peers", "err", err)
		}
		if err := s.sweepIAMStamps(ctx); err != nil { // clusteriamsweep.go
			s.log.Debug("IAM stamps: sweeping", "err", err)
		}
		if k := s.cluster.sink; k != nil {
			if err := k.trimFromEtcd(ctx); err != nil { // clusterpull.go
				s.log.Debug("replication: trimming tombstones", "err", err)
			}
			if err := k.readShared(ctx); err != nil { // clusterreplshare.go
				s.log.Debug("replication: reading what the puller shared", "err", err)
			}
		}
		cancel()
		select {
		case <-s.stopping:
			return
		case <-s.opts.Clock.After(time.Second):
		}
	}
}

// clusterNodes are the nodes whose records a cluster answer needs: the
// live nodes and every owner of a tablet. A node that is down makes the
// answer fail (its records cannot be read, and skipping them would lose
// them): replication from the cluster waits for it.
func (c *clusterMember) clusterNodes() []string {
	set := map[string]bool{}
	for _, n := range c.m.Nodes() {
		set[n.ID] = true
	}
	for _, d := range c.m.Directories() {
		for _, t := range d.Tablets {
			set[t.Owner] = true
		}
	}
	out := make([]string, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// nodeAdmin is an EbbAdmin client of another node of this cluster.
func (c *clusterMember) nodeAdmin(id string) (ebbadminpb.EbbAdminClient, error) {
	n, ok := c.m.Node(id)
	if !ok {
		return nil, status.Errorf(codes.Unavailable, "ebbtable: node %s is down: replication from this cluster waits for it", id)
	}
	cc, err := c.conn(n.Addr)
	if err != nil {
		return nil, err
	}
	return ebbadminpb.NewEbbAdminClient(cc), nil
}

// localCtx marks an outgoing call as a node's part of a cluster answer.
func localCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, metaReplLocal, "1")
}

// nodePull is one node's answer to its part of a pull.
func (s *Server) nodePull(ctx context.Context, id string, req replication.PullRequest) (*replication.PullResponse, error) {
	if id == s.cluster.opts.NodeID {
		return s.repl.Answer(ctx, req)
	}
	cl, err := s.cluster.nodeAdmin(id)
	if err != nil {
		return nil, err
	}
	out, err := cl.Pull(localCtx(ctx), encodePullRequest(req))
	if err != nil {
		return nil, err
	}
	return decodePullResponse(out)
}

// pullNodes asks every node at once. With a wait, the first answer that
// ships records cancels the others' waits, and every node is asked again
// without waiting, so the merge bounds records by everyone's closed
// timestamp as of now.
func (s *Server) pullNodes(ctx context.Context, nodes []string, req replication.PullRequest) ([]*replication.PullResponse, error) {
	outs := make([]*replication.PullResponse, len(nodes))
	errs := make([]error, len(nodes))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var news sync.Once
	gotNews := false
	for i, id := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = s.nodePull(wctx, id, req)
			if errs[i] == nil && outs[i].Shipped > 0 && req.Wait > 0 {
				news.Do(func() { gotNews = true; cancel() })
			}
		}()
	}
	wg.Wait()
	if gotNews {
		req.Wait = 0
		return s.pullNodes(ctx, nodes, req)
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("ebbtable: node %s: %w", nodes[i], err)
		}
	}
	return outs, nil
}

// clusterAnswer answers a peer's pull for the whole cluster: every node's
// records, merged (the file comment says how).
func (s *Server) clusterAnswer(ctx context.Context, req replication.PullRequest) (*replication.PullResponse, error) {
	nodes := s.cluster.clusterNodes()
	outs, err := s.pullNodes(ctx, nodes, req)
	if err != nil {
		return nil, err
	}
	self := slices.Index(nodes, s.cluster.opts.NodeID)
	if self < 0 {
		return nil, status.Error(codes.Unavailable, "ebbtable: this node is not live in its cluster; retry")
	}
	out := mergeAnswers(outs[self], outs)
	for i, pt := range out.Tables {
		// A node whose answer stopped at its budget within one commit time
		// must not take the peer's position back.
		if p, ok := req.Positions[replication.TableKey(pt.Instance, pt.Table)]; ok && pt.Through.Commit < p.Commit {
			out.Tables[i].Through = p
		}
	}
	return out, nil
}

// mergeAnswers merges the nodes' answers to one pull: base (this node's)
// gives the catalog, peers and metadata; the records of each table are
// those of every answer committed at or before the table's bound, in
// commit order.
func mergeAnswers(base *replication.PullResponse, outs []*replication.PullResponse) *replication.PullResponse {
	closed := base.Closed
	for _, o := range outs {
		closed = min(closed, o.Closed)
	}
	type acc struct {
		recs  []changestream.Record
		bound int64
		full  bool
		seen  bool
	}
	tables := map[string]*acc{}
	for _, o := range outs {
		for _, pt := range o.Tables {
			k := replication.TableKey(pt.Instance, pt.Table)
			a := tables[k]
			if a == nil {
				a = &acc{bound: closed}
				tables[k] = a
			}
			a.seen = true
			if pt.Full {
				a.full = true
				a.bound = min(a.bound, pt.Through.Commit-1)
			}
			a.recs = append(a.recs, pt.Records...)
		}
	}
	out := *base
	out.Closed = closed
	out.Tables = nil
	out.Shipped = 0
	for _, pt := range base.Tables {
		a := tables[replication.TableKey(pt.Instance, pt.Table)]
		if a == nil {
			continue
		}
		var keep []changestream.Record
		for _, r := range a.recs {
			if r.Commit <= a.bound {
				keep = append(keep, r)
			}
		}
		// A moved tablet's records sit on its old owner too (until
		// retention), under the same positions (clusterchanges.go): one
		// copy of each travels.
		sort.SliceStable(keep, func(i, j int) bool { return keep[i].Position.Less(keep[j].Position) })
		keep = slices.CompactFunc(keep, func(a, b changestream.Record) bool { return a.Position == b.Position })
		out.Tables = append(out.Tables, replication.PulledTable{Instance: pt.Instance, Table: pt.Table, Records: keep,
			Through: replication.ThroughClosed(a.bound), Full: a.full})
		out.Shipped += len(keep)
	}
	return &out
}

// clusterSnapshot streams a copy of the whole cluster's tables to a
// joining cluster: the schemas once, each node's cells of the tablets it
// owns, every node's tombstones, and an end whose closed timestamp is the
// smallest of the nodes'. A tablet that moves during the copy could be
// missed or copied twice: the copy fails (UNAVAILABLE) and the joining
// process starts it again.
func (s *Server) clusterSnapshot(ctx context.Context, send func(*ebbadminpb.SnapshotMessage) error) error {
	before := s.cluster.m.Directories()
	nodes := s.cluster.clusterNodes()
	closed := int64(-1)
	for i, id := range nodes {
		first := i == 0
		err := s.nodeSnapshot(ctx, id, func(msg *ebbadminpb.SnapshotMessage) error {
			switch item := msg.GetItem().(type) {
			case *ebbadminpb.SnapshotMessage_Table, *ebbadminpb.SnapshotMessage_Checkpoint:
				if !first {
					return nil
				}
			case *ebbadminpb.SnapshotMessage_End:
				if c := item.End.GetClosed(); closed < 0 || c < closed {
					closed = c
				}
				return nil
			}
			return send(msg)
		})
		if err != nil {
			return fmt.Errorf("ebbtable: copying node %s: %w", id, err)
		}
	}
	after := s.cluster.m.Directories()
	if len(before) != len(after) {
		return status.Error(codes.Unavailable, "ebbtable: tables changed during the copy; join again")
	}
	for i := range before {
		if !slices.EqualFunc(before[i].Tablets, after[i].Tablets, func(a, b tablets.Tablet) bool {
			return a.ID == b.ID && a.Owner == b.Owner && bytes.Equal(a.Start, b.Start) && bytes.Equal(a.End, b.End)
		}) {
			return status.Errorf(codes.Unavailable, "ebbtable: tablets of %s moved during the copy; join again", before[i].Table)
		}
	}
	return send(&ebbadminpb.SnapshotMessage{Item: &ebbadminpb.SnapshotMessage_End{End: &ebbadminpb.SnapshotEnd{Closed: max(closed, 0)}}})
}

// nodeSnapshot streams one node's part of a cluster snapshot.
func (s *Server) nodeSnapshot(ctx context.Context, id string, send func(*ebbadminpb.SnapshotMessage) error) error {
	if id == s.cluster.opts.NodeID {
		return s.localSnapshot(ctx, send)
	}
	cl, err := s.cluster.nodeAdmin(id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := cl.Snapshot(localCtx(ctx), &ebbadminpb.SnapshotRequest{})
	if err != nil {
		return err
	}
	for {
		msg, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := send(msg); err != nil {
			return err
		}
	}
}

// localSnapshot is this node's part of a cluster snapshot: recording
// turned on for the cluster's peers first (the joining one among them), so
// a write is in the copy or in the change stream, and only the cells of
// tablets this node owns.
func (s *Server) localSnapshot(ctx context.Context, send func(*ebbadminpb.SnapshotMessage) error) error {
	if err := s.syncClusterPeers(ctx); err != nil {
		return err
	}
	if _, on := s.engine.Replicating(); !on {
		return status.Error(codes.FailedPrecondition, "ebbtable: no peer cluster has joined this cluster")
	}
	self := s.cluster.opts.NodeID
	err := s.repl.Snapshot(func(it replication.SnapshotItem) error {
		if it.Kind == replication.SnapshotCells {
			d, ok := s.cluster.m.Directory(it.Meta.Instance + "/tables/" + it.Meta.Name)
			if ok {
				kept := it.Pairs[:0:0]
				for _, p := range it.Pairs {
					k, err := storage.DecodeCellKey(p[0])
					if err != nil {
						return err
					}
					if d.Tablets[d.Locate(k.Row)].Owner == self {
						kept = append(kept, p)
					}
				}
				if len(kept) == 0 {
					return nil
				}
				it.Pairs = kept
			}
		}
		if msg := snapshotMessage(it); msg != nil {
			return send(msg)
		}
		return nil
	})
	return toStatus(err)
}
