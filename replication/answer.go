package replication

import (
	"context"
	"fmt"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
)

// ErrBadPosition is returned (wrapped) by Answer for a position it cannot
// resume at.
var ErrBadPosition = fmt.Errorf("ebbtable: bad pull position")

// Answer answers a peer's pull: for every table, this cluster's records
// after the peer's position that ship to peers (see ShipsToPeers), up to
// req.Limit records per table and about PullMaxBytes in all, with the
// catalog, dropped tables, peers, instance metadata and age cutoffs. With
// nothing to ship it waits up to req.Wait (on the Pace clock) for a commit.
// The caller checks who asks.
func (r *Replicator) Answer(ctx context.Context, req PullRequest) (*PullResponse, error) {
	limit := req.Limit
	if limit <= 0 {
		limit = PullLimit
	}
	wait := req.Wait
	var deadline <-chan time.Time
	if wait > 0 {
		var stop func()
		deadline, stop = clock.Timer(r.o.Pace, wait)
		defer stop() // a commit may end the wait first
	}
	for {
		notify := r.o.Engine.ChangesNotify()
		resp, err := r.collect(req.Positions, limit)
		if err != nil || resp.Shipped > 0 || wait <= 0 {
			return resp, err
		}
		select {
		case <-notify:
			wait = 0 // answer after one more look
		case <-deadline:
			wait = 0
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.ctx.Done():
			return resp, nil
		}
	}
}

func (r *Replicator) collect(positions map[string]changestream.Position, limit int) (*PullResponse, error) {
	e := r.o.Engine
	closed := e.ClosedTimestamp()
	out := &PullResponse{Cluster: r.o.ClusterID, Closed: closed}
	budget := r.o.PullMaxBytes
	for _, m := range e.Tables("") {
		out.Catalog = append(out.Catalog, SchemaOf(m))
		lower := changestream.TableStart(m.ID)
		pos, has := positions[TableKey(m.Instance, m.Name)]
		if has {
			lower = lowerAfter(m.ID, pos)
		}
		// Read in small steps, so a pull never holds more than about
		// PullMaxBytes of records (values may be up to 100 MiB each).
		pt := PulledTable{Instance: m.Instance, Table: m.Name}
		gcCells, n := 0, 0
		// With the pull's byte budget spent, a table is answered with no
		// records and its position unchanged (full: ask again at once).
		full := budget <= 0
		var last changestream.Position
		if has && full {
			last = pos
		}
		for !full {
			step := min(pullReadStep, limit-n)
			batch, err := e.ReadChangesUntil(m, lower, closed, step)
			if err != nil {
				return nil, err
			}
			for _, rec := range batch.Records {
				n++
				last = rec.Position
				if ShipsToPeers(rec) {
					if rec.Type == changestream.GarbageCollection {
						gcCells += len(rec.Mods)
					}
					// The wire carries base64 of the encoding: count that.
					budget -= (len(rec.Encode()) + 2) / 3 * 4
					pt.Records = append(pt.Records, rec)
				}
				if budget <= 0 || n >= limit {
					full = true
					break
				}
			}
			if !batch.Full {
				break
			}
			lower = changestream.After(m.ID, last)
		}
		if gcCells > 0 {
			r.m.gcShipped.WithLabelValues(m.Name).Add(float64(gcCells))
		}
		pt.Through = ThroughClosed(closed)
		if full {
			pt.Through = last
		}
		pt.Full = full
		out.Shipped += len(pt.Records)
		out.Tables = append(out.Tables, pt)
	}
	if budget <= 0 {
		r.budgetSpent.Add(1)
	}
	drops, err := e.DroppedTables()
	if err != nil {
		return nil, err
	}
	out.Dropped = drops
	self := PeerInfo{ID: r.o.ClusterID, Addr: r.o.Advertised(), Ready: true}
	if r.o.Nodes != nil {
		self.Nodes = r.o.Nodes()
	}
	out.Peers = append(out.Peers, self)
	out.Peers = append(out.Peers, r.o.Peers.List()...)
	if r.o.AgeCutoffs != nil {
		out.AgeCutoffs = map[FamilyKey]int64{}
		for _, m := range e.Tables("") {
			for fam, c := range r.o.AgeCutoffs(m) {
				out.AgeCutoffs[FamilyKey{m.Instance, m.Name, fam}] = c
			}
		}
	}
	if r.o.LocalMeta != nil {
		if out.InstanceMeta, err = r.o.LocalMeta(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
