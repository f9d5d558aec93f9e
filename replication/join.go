package replication

import (
	"context"
	"fmt"

	"github.com/ebbtable/ebbtable/table"
)

// Joining (docs/replication.md). A cluster joins through a seed: unless it
// joined before, it drops whatever partial copy it has, registers with the
// seed (Peer.Join), copies the seed's data (Peer.Snapshot) before it
// serves, then says Ready. Its progress is durable in the engine's
// instance metadata, so a copy a crash interrupted starts again.

// Instance metadata of the join (process-wide: instance MetaInstance).
const (
	// MetaInstance is the instance field of process-wide entries.
	MetaInstance = "-"
	// KindJoined marks that this process finished joining (its value
	// names the seed); KindJoining that it is copying.
	KindJoined  = "joined"
	KindJoining = "joining"
)

// Joined says whether this cluster finished joining an instance before.
func (r *Replicator) Joined() (bool, error) {
	found := false
	err := r.o.Engine.InstanceMeta(KindJoined, MetaInstance, func(_, _ string, _ []byte) error {
		found = true
		return nil
	})
	return found, err
}

// JoinThrough makes this cluster a member of the instance the seed (at
// seedAddr) serves, unless it joined before: it returns the seed's id, or
// "" when there was nothing to do. Tables that are not a partial copy are
// a user's data, which joining would replace: it refuses them.
func (r *Replicator) JoinThrough(ctx context.Context, seed Peer, seedAddr string) (string, error) {
	e := r.o.Engine
	if joined, err := r.Joined(); err != nil || joined {
		return "", err
	}
	joining := false
	if err := e.InstanceMeta(KindJoining, MetaInstance, func(_, _ string, _ []byte) error {
		joining = true
		return nil
	}); err != nil {
		return "", err
	}
	if tables := e.Tables(""); len(tables) > 0 && !joining {
		return "", fmt.Errorf("%w: --join needs an empty data directory (or one that joined before), and %s holds %d tables; start without --join to serve them, or give another --data", table.ErrPrecondition, r.o.DataDir, len(tables))
	}
	for _, m := range e.Tables("") {
		if err := e.DeleteTable(m.Instance, m.Name); err != nil {
			return "", fmt.Errorf("ebbtable: join: clearing a partial copy: %w", err)
		}
	}
	if err := e.PutInstanceMeta(KindJoining, MetaInstance, "seed", []byte(seedAddr)); err != nil {
		return "", err
	}
	out, err := seed.Join(ctx, JoinRequest{Cluster: r.o.ClusterID, Addr: r.o.Advertised()})
	if err != nil {
		return "", fmt.Errorf("ebbtable: join %s: %w", seedAddr, err)
	}
	seedID := out.Cluster
	if err := e.SetReplicating(r.o.ClusterID); err != nil {
		return "", err
	}
	if err := r.o.Peers.Add(PeerInfo{ID: seedID, Addr: seedAddr, Ready: true}); err != nil {
		return "", err
	}
	r.LearnPeers(out.Peers)
	if err := r.copyFrom(ctx, seed, seedID); err != nil {
		return "", fmt.Errorf("ebbtable: join: copying %s's data: %w", seedID, err)
	}
	if err := e.PutInstanceMeta(KindJoined, MetaInstance, "seed", []byte(seedID)); err != nil {
		return "", err
	}
	if err := e.DeleteInstanceMeta(KindJoining, MetaInstance, "seed"); err != nil {
		return "", err
	}
	if err := seed.Ready(ctx, r.o.ClusterID); err != nil {
		return "", fmt.Errorf("ebbtable: join: telling %s the copy is done: %w", seedID, err)
	}
	r.o.Peers.Contact(seedID, nil)
	return seedID, nil
}

// copyFrom imports the seed's snapshot.
func (r *Replicator) copyFrom(ctx context.Context, seed Peer, seedID string) error {
	e := r.o.Engine
	local := map[string]*table.Meta{}
	ended := false
	err := seed.Snapshot(ctx, func(it SnapshotItem) error {
		if ended {
			return fmt.Errorf("snapshot goes on after its end")
		}
		var key string
		if it.Meta != nil {
			key = TableKey(it.Meta.Instance, it.Meta.Name)
		}
		switch it.Kind {
		case SnapshotTable:
			m, err := e.ImportTable(it.Meta)
			if err != nil {
				return err
			}
			local[TableKey(m.Instance, m.Name)] = m
		case SnapshotCells, SnapshotTombstones:
			m := local[key]
			if m == nil {
				return fmt.Errorf("pairs for unknown table %q", key)
			}
			kind := table.ExportCells
			if it.Kind == SnapshotTombstones {
				kind = table.ExportTombstones
			}
			return e.ImportPairs(m, kind, it.Pairs)
		case SnapshotCheckpoint:
			m := local[key]
			if m == nil || it.Origin == r.o.ClusterID {
				return nil
			}
			return e.SetCheckpoint(m, it.Origin, it.Position)
		case SnapshotEnd:
			ended = true
			for _, m := range local {
				if err := e.SetCheckpoint(m, seedID, ThroughClosed(it.Closed)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err == nil && !ended {
		err = fmt.Errorf("snapshot stream ended early")
	}
	return err
}

// Snapshot hands fn a consistent copy of every table, for a cluster
// joining through this one, ending with a SnapshotEnd item.
func (r *Replicator) Snapshot(fn func(SnapshotItem) error) error {
	closed, err := r.o.Engine.Export(func(it table.ExportItem) error {
		si := SnapshotItem{Meta: it.Meta, Pairs: it.Pairs, Origin: it.Origin, Position: it.Position}
		switch it.Kind {
		case table.ExportTable:
			si.Kind = SnapshotTable
		case table.ExportCells:
			si.Kind = SnapshotCells
		case table.ExportTombstones:
			si.Kind = SnapshotTombstones
		case table.ExportCheckpoint:
			si.Kind = SnapshotCheckpoint
		default:
			return nil
		}
		return fn(si)
	})
	if err != nil {
		return err
	}
	return fn(SnapshotItem{Kind: SnapshotEnd, Closed: closed})
}

// Admit registers a cluster joining through this one (the caller checked
// the request: an id that is not this cluster's, an address) and starts
// pulling from it. A cluster that joins again at the same address keeps
// its readiness.
func (r *Replicator) Admit(req JoinRequest) (*JoinResponse, error) {
	if err := r.o.Engine.SetReplicating(r.o.ClusterID); err != nil {
		return nil, err
	}
	ready := false
	if old, ok := r.o.Peers.Get(req.Cluster); ok && old.Addr == req.Addr {
		ready = old.Ready
	}
	if err := r.o.Peers.Rejoined(req.Cluster); err != nil {
		return nil, err
	}
	if err := r.o.Peers.Add(PeerInfo{ID: req.Cluster, Addr: req.Addr, Ready: ready}); err != nil {
		return nil, err
	}
	r.Run(req.Cluster)
	out := &JoinResponse{Cluster: r.o.ClusterID, Addr: r.o.Advertised()}
	for _, p := range r.o.Peers.List() {
		if p.ID != req.Cluster {
			out.Peers = append(out.Peers, p)
		}
	}
	return out, nil
}

// ErrNotJoined is returned by MarkReady for a cluster that has not joined.
var ErrNotJoined = fmt.Errorf("ebbtable: cluster has not joined")

// MarkReady records that a joined cluster finished copying the data.
func (r *Replicator) MarkReady(id string) error {
	p, ok := r.o.Peers.Get(id)
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotJoined, id)
	}
	p.Ready = true
	if err := r.o.Peers.Add(p); err != nil {
		return err
	}
	if r.o.OnReady != nil {
		r.o.OnReady(id)
	}
	return nil
}
