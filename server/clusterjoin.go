package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/changestream"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A cluster of several nodes joining an instance (`serve --etcd …
// --join HOST:PORT`; docs/replication.md, "Joining with a cluster of
// several nodes").
//
// Every node may be started with --join; the cluster joins once. The join
// is kept in etcd (repl/join, changed by compare-and-swap): the first node
// to claim it copies, the others wait until it is done (and take the copy
// over if the copying node dies). The copying node:
//   - registers with the seed (EbbAdmin/Join, its own address);
//   - reads the seed's snapshot (EbbAdmin/Snapshot): each table is created
//     through the schema log (ReplImportTable: the seed's schema, its
//     family ids and stamps, the cluster's table id, tablets placed as
//     CreateTable places them), each run of cells is cut by tablet and
//     written by the tablets' owners (Cluster/ImportSnapshot, synced), and
//     the tombstones by every node;
//   - writes the checkpoints in etcd (repl/ckpt): the seed's records from
//     its closed timestamp at the snapshot, the other clusters' from where
//     the seed had got to;
//   - only then records the seed as a peer (etcd: every node mirrors it and
//     records its changes), marks the join done and tells the seed Ready.
//
// Until the join is done a node started with --join answers no client
// call (UNAVAILABLE) and its Start does not return, as a process alone
// copies before it serves. A copy that stopped (the copying node died or
// failed) is thrown away by the node that takes it over: the tables it
// made are deleted through the schema log before copying again.

// replImportTable is the schema log method of a table copied from a seed.
const replImportTable = "ReplImportTable"

// joinWaitEvery is how often a node waiting for another's copy looks.
const joinWaitEvery = 250 * time.Millisecond

// replJoinState is repl/join.
type replJoinState struct {
	Seed   string `json:"seed"`
	SeedID string `json:"seed_id,omitempty"`
	Node   string `json:"node"`
	Done   bool   `json:"done,omitempty"`
}

// clientsWaitForJoin: a node started with --join refuses client calls
// until its cluster has joined (clusterstart.go).
func (s *Server) clientsWaitForJoin(method string) bool {
	return s.replJoinPending.Load() && strings.HasPrefix(method, "/google.bigtable.")
}

// clusterJoinInstance makes this node's cluster a cluster of the instance
// the seed serves, unless it joined before (the file comment says how).
func (s *Server) clusterJoinInstance(seed string) error {
	c := s.cluster
	ctx, cancel := s.stopCtx(10 * time.Minute)
	defer cancel()
	self := c.opts.NodeID
	for {
		b, rev, err := c.m.ReplJoin(ctx)
		if err != nil {
			return err
		}
		var st replJoinState
		if b != nil {
			if err := json.Unmarshal(b, &st); err != nil {
				return fmt.Errorf("ebbtable: the cluster's join record in etcd: %w", err)
			}
		}
		switch {
		case b != nil && st.Done:
			return nil // joined before (this node or another)
		case b != nil && st.Node != self:
			if _, live := c.m.Node(st.Node); live {
				select { // another node copies: wait for it
				case <-ctx.Done():
					return fmt.Errorf("ebbtable: join: waiting for node %s to copy %s: %w", st.Node, st.Seed, ctx.Err())
				case <-s.opts.Clock.After(joinWaitEvery):
				}
				continue
			}
		}
		restart := b != nil // a copy that stopped
		if !restart {
			if tables := s.engine.Tables(""); len(tables) > 0 {
				return fmt.Errorf("%w: --join needs a cluster without tables (or one that joined before), and this cluster holds %d tables; start without --join to serve them", table.ErrPrecondition, len(tables))
			}
		}
		st = replJoinState{Seed: seed, Node: self}
		v, _ := json.Marshal(st)
		rev, err = c.m.PutReplJoin(ctx, v, rev)
		if errors.Is(err, clusteretcd.ErrReplJoinChanged) {
			continue // another node claimed it first
		}
		if err != nil {
			return err
		}
		if restart {
			if err := c.dropPartialCopy(ctx); err != nil {
				return fmt.Errorf("ebbtable: join: throwing away a copy that stopped: %w", err)
			}
		}
		return s.copyIntoCluster(ctx, seed, st, rev)
	}
}

// dropPartialCopy deletes every table of the cluster (a copy that stopped
// made them; the cluster had none before).
func (c *clusterMember) dropPartialCopy(ctx context.Context) error {
	for _, m := range c.s.engine.Tables("") {
		ref := tableRef{instance: m.Instance, table: m.Name}
		if _, err := c.propose(ctx, "DeleteTable", ref, &adminpb.DeleteTableRequest{Name: ref.name()}, clusteretcd.DirOp{Drop: true, Keep: true, KeepFor: c.keepDeletedFor()}); err != nil && status.Code(err) != codes.NotFound {
			return err
		}
	}
	return nil
}

// copyIntoCluster registers with the seed, copies its snapshot into the
// cluster, writes the checkpoints, adds the seed as a peer and marks the
// join done.
func (s *Server) copyIntoCluster(ctx context.Context, seed string, st replJoinState, rev int64) error {
	c := s.cluster
	conn, err := grpc.NewClient("passthrough:///"+seed, s.sec.peerDialOptions(seed, s.opts.MaxMessageBytes)...)
	if err != nil {
		return err
	}
	defer conn.Close()
	peer := grpcPeer{s: s, conn: conn}
	out, err := peer.Join(ctx, replication.JoinRequest{Cluster: s.opts.ClusterID, Addr: s.advertised()})
	if err != nil {
		return fmt.Errorf("ebbtable: join %s: %w", seed, err)
	}
	seedID := out.Cluster
	if err := s.engine.SetReplicating(s.opts.ClusterID); err != nil {
		return err
	}
	cp := &clusterCopy{c: c, local: map[string]*table.Meta{}}
	if err := peer.Snapshot(ctx, cp.item); err != nil {
		return fmt.Errorf("ebbtable: join: copying %s's data: %w", seedID, err)
	}
	if !cp.ended {
		return fmt.Errorf("ebbtable: join: copying %s's data: the snapshot stream ended early", seedID)
	}
	// The checkpoints, before any node pulls: the seed's from its closed
	// timestamp at the snapshot, the other clusters' where the seed was.
	for _, m := range cp.local {
		cp.ckpts = append(cp.ckpts, joinCkpt{origin: seedID, m: m, pos: replication.ThroughClosed(cp.closed)})
	}
	for _, k := range cp.ckpts {
		if k.origin == s.opts.ClusterID {
			continue
		}
		b, err := json.Marshal(ckptValue{TableID: k.m.ID, Position: k.pos})
		if err != nil {
			return err
		}
		if err := c.m.PutReplCheckpoint(ctx, k.origin, tableRef{instance: k.m.Instance, table: k.m.Name}.name(), b); err != nil {
			return err
		}
	}
	if err := s.peers.add(peerInfo{ID: seedID, Addr: seed, Ready: true}); err != nil {
		return err
	}
	s.repl.LearnPeers(out.Peers)
	if err := s.syncClusterPeers(ctx); err != nil {
		return err
	}
	st.SeedID, st.Done = seedID, true
	v, _ := json.Marshal(st)
	if _, err := c.m.PutReplJoin(ctx, v, rev); err != nil {
		return fmt.Errorf("ebbtable: join: marking the copy done: %w", err)
	}
	if err := peer.Ready(ctx, s.opts.ClusterID); err != nil {
		return fmt.Errorf("ebbtable: join: telling %s the copy is done: %w", seedID, err)
	}
	s.peers.contact(seedID, nil)
	s.log.Info("the cluster joined the instance", "seed", seedID, "tables", len(cp.local), "peers", len(s.peers.list()))
	return nil
}

// clusterCopy imports a seed's snapshot into the cluster.
type clusterCopy struct {
	c      *clusterMember
	local  map[string]*table.Meta // by replication.TableKey
	ckpts  []joinCkpt
	ended  bool
	closed int64
}

type joinCkpt struct {
	origin string
	m      *table.Meta
	pos    changestream.Position
}

func (cp *clusterCopy) item(it replication.SnapshotItem) error {
	if cp.ended {
		return fmt.Errorf("snapshot goes on after its end")
	}
	var key string
	if it.Meta != nil {
		key = replication.TableKey(it.Meta.Instance, it.Meta.Name)
	}
	switch it.Kind {
	case replication.SnapshotTable:
		m, err := cp.c.importTable(it.Meta)
		if err != nil {
			return err
		}
		cp.local[key] = m
	case replication.SnapshotCells:
		m := cp.local[key]
		if m == nil {
			return fmt.Errorf("cells of unknown table %q", key)
		}
		return cp.c.importCells(m, it.Pairs)
	case replication.SnapshotTombstones:
		m := cp.local[key]
		if m == nil {
			return fmt.Errorf("tombstones of unknown table %q", key)
		}
		return cp.c.importTombstones(m, it.Pairs)
	case replication.SnapshotCheckpoint:
		if m := cp.local[key]; m != nil {
			cp.ckpts = append(cp.ckpts, joinCkpt{origin: it.Origin, m: m, pos: it.Position})
		}
	case replication.SnapshotEnd:
		cp.ended, cp.closed = true, it.Closed
	}
	return nil
}

// importTable creates a seed's table in the cluster through the schema
// log, with the seed's schema (family ids, stamps) and a cluster table id.
func (c *clusterMember) importTable(seedMeta *table.Meta) (*table.Meta, error) {
	ref := tableRef{instance: seedMeta.Instance, table: seedMeta.Name}
	b, err := proto.Marshal(metaPB(seedMeta))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), allAppliedWait+10*time.Second)
	defer cancel()
	splits := seedMeta.Splits
	_, err = c.propose(ctx, replImportTable, ref, wrapperspb.Bytes(b), clusteretcd.DirOp{Create: func(seq uint64) (tablets.Directory, error) {
		owners, err := tablets.Place(len(splits)+1, c.m.Nodes(), c.m.Directories())
		if err != nil {
			return tablets.Directory{}, err
		}
		return tablets.NewDirectory(ref.name(), seq, splits, owners)
	}})
	if err != nil {
		return nil, err
	}
	return c.s.engine.Table(ref.instance, ref.table)
}

// applyReplImport applies a ReplImportTable entry on this node.
func (c *clusterMember) applyReplImport(e clusteretcd.SchemaEntry) applyResult {
	var w wrapperspb.BytesValue
	if err := proto.Unmarshal(e.Request, &w); err != nil {
		return applyResult{err: err}
	}
	var pm ebbadminpb.TableMeta
	if err := proto.Unmarshal(w.GetValue(), &pm); err != nil {
		return applyResult{err: err}
	}
	m, err := metaOf(&pm)
	if err != nil {
		return applyResult{err: toStatus(err)}
	}
	ref, err := parseTable(e.Table)
	if err != nil {
		return applyResult{err: err}
	}
	if old, err := c.s.engine.Table(ref.instance, ref.table); err == nil && old.ID == e.TableID {
		return applyResult{resp: &emptypb.Empty{}} // the same entry applied again
	}
	m.Instance, m.Name, m.ID = ref.instance, ref.table, e.TableID
	if _, err := c.s.engine.ImportTable(m); err != nil {
		return applyResult{err: toStatus(err)}
	}
	if err := c.s.forgetTableMeta(ref); err != nil {
		return applyResult{err: toStatus(err)}
	}
	return applyResult{resp: &emptypb.Empty{}}
}

// importCells has the owners of a run of a seed's cells write them, by
// tablet, all tablets at once; cells of a tablet that moved or split
// meanwhile are routed again.
func (c *clusterMember) importCells(m *table.Meta, pairs [][2][]byte) error {
	name := tableRef{instance: m.Instance, table: m.Name}.name()
	return routeToOwners(c, name, pairs,
		status.Errorf(codes.Unavailable, "ebbtable: table %s has no tablets in the cluster", name),
		func(p [2][]byte) ([]byte, error) {
			k, err := storage.DecodeCellKey(p[0])
			return k.Row, err
		},
		func(d tablets.Directory, i int, group [][2][]byte) error {
			return c.sendImport(d.Tablets[i].Owner, &clusterpb.ImportSnapshotRequest{Table: name, Tablet: d.Tablets[i].ID, Revision: d.Revision}, group)
		})
}

// importTombstones has every node keep a run of a seed's tombstones (the
// owner of their rows, today or after a move, needs them; the others'
// copies are trimmed with the rest).
func (c *clusterMember) importTombstones(m *table.Meta, pairs [][2][]byte) error {
	name := tableRef{instance: m.Instance, table: m.Name}.name()
	for _, n := range c.m.Nodes() {
		for attempt := 0; ; attempt++ {
			err := c.sendImport(n.ID, &clusterpb.ImportSnapshotRequest{Table: name, Tombstones: true}, pairs)
			if err == nil {
				break
			}
			if attempt >= applyRetries || status.Code(err) != codes.Unavailable {
				return fmt.Errorf("ebbtable: node %s: %w", n.ID, err)
			}
			select { // a node that has not applied the table's creation yet
			case <-c.s.opts.Clock.After(50 * time.Millisecond):
			case <-c.stop:
				return clusteretcd.ErrClosed
			}
		}
	}
	return nil
}

// sendImport has one node write a run of pairs.
func (c *clusterMember) sendImport(node string, req *clusterpb.ImportSnapshotRequest, pairs [][2][]byte) error {
	req.Keys = make([][]byte, len(pairs))
	req.Values = make([][]byte, len(pairs))
	for i, p := range pairs {
		req.Keys[i], req.Values[i] = p[0], p[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if node == c.opts.NodeID {
		_, err := c.importSnapshot(ctx, req)
		return err
	}
	n, ok := c.m.Node(node)
	if !ok {
		return status.Errorf(codes.Unavailable, "ebbtable: node %s is down; the join waits for it", node)
	}
	cc, err := c.conn(n.Addr)
	if err != nil {
		return status.Errorf(codes.Unavailable, "ebbtable: node %s at %s: %v", n.ID, n.Addr, err)
	}
	_, err = clusterpb.NewClusterClient(cc).ImportSnapshot(ctx, req)
	return err
}

// ImportSnapshot is a node's half of the copy.
func (s *clusterService) ImportSnapshot(ctx context.Context, req *clusterpb.ImportSnapshotRequest) (*clusterpb.ImportSnapshotResponse, error) {
	if s.c.m == nil {
		return nil, status.Error(codes.Unavailable, "ebbtable: this node has not joined its cluster yet; retry")
	}
	return s.c.importSnapshot(ctx, req)
}

func (c *clusterMember) importSnapshot(ctx context.Context, req *clusterpb.ImportSnapshotRequest) (*clusterpb.ImportSnapshotResponse, error) {
	if len(req.GetKeys()) != len(req.GetValues()) {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: ImportSnapshot needs as many values as keys")
	}
	ref, err := parseTable(req.GetTable())
	if err != nil {
		return nil, toStatus(err)
	}
	c.catchUpTo(ctx, req.GetRevision())
	m, err := c.s.engine.Table(ref.instance, ref.table)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "ebbtable: %v (this node has not applied the schema change yet); retry", err)
	}
	pairs := make([][2][]byte, len(req.GetKeys()))
	for i := range pairs {
		pairs[i] = [2][]byte{req.GetKeys()[i], req.GetValues()[i]}
	}
	if _, on := c.s.engine.Replicating(); !on {
		if err := c.s.engine.SetReplicating(c.s.opts.ClusterID); err != nil {
			return nil, toStatus(err)
		}
	}
	kind := table.ExportTombstones
	if !req.GetTombstones() {
		kind = table.ExportCells
		owned := func() (tablets.Tablet, bool) {
			d, ok := c.m.Directory(req.GetTable())
			if ok {
				for _, t := range d.Tablets {
					if t.ID == req.GetTablet() && t.Owner == c.opts.NodeID {
						return t, true
					}
				}
			}
			return tablets.Tablet{}, false
		}
		t, ok := owned()
		if !ok {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: tablet %d of %s is not owned by node %s (it moved or split); route again", req.GetTablet(), req.GetTable(), c.opts.NodeID)
		}
		for _, p := range pairs {
			k, err := storage.DecodeCellKey(p[0])
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "ebbtable: cell key: %v", err)
			}
			if !t.Contains(k.Row) {
				return nil, status.Errorf(codes.Unavailable, "ebbtable: row %q is not in %s; route again", k.Row, t)
			}
		}
		g := c.gate(req.GetTable(), t.ID)
		g.RLock()
		defer g.RUnlock()
		if _, ok := owned(); !ok {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: tablet %d of %s moved; route again", req.GetTablet(), req.GetTable())
		}
	}
	if err := c.s.engine.ImportPairs(m, kind, pairs); err != nil {
		return nil, toStatus(err)
	}
	if err := c.s.engine.SyncWAL(); err != nil {
		return nil, toStatus(err)
	}
	return &clusterpb.ImportSnapshotResponse{Pairs: int64(len(pairs))}, nil
}
