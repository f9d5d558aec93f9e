package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Tablet operations: splits (directory only: both halves stay with the
// owner), planned moves (run by the source: fence the tablet, export its
// span, the target ingests, one fenced etcd transaction flips the owner,
// the source excises the span), drains (a move per tablet) and giving a
// dead node's tablets away.

// clusterStatus maps the cluster package's errors to gRPC codes.
func clusterStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tablets.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, tablets.ErrConflict):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, tablets.ErrNoNodes):
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return toStatus(err)
}

func (c *clusterMember) dirOf(tableName string) (tablets.Directory, tableRef, error) {
	ref, err := parseTable(tableName)
	if err != nil {
		return tablets.Directory{}, ref, toStatus(err)
	}
	d, ok := c.m.Directory(ref.name())
	if !ok {
		return d, ref, status.Errorf(codes.NotFound, "ebbtable: table %s has no tablets in this cluster", ref.table)
	}
	return d, ref, nil
}

// splitTablet cuts the tablet holding key at key (a directory change: the
// owner keeps both halves, so no data moves).
func (c *clusterMember) splitTablet(ctx context.Context, tableName string, key []byte) (tablets.Directory, error) {
	return c.changeDirectory(ctx, tableName, func(d tablets.Directory) (tablets.Directory, error) { return d.Split(key) })
}

// mergeTablet joins a tablet with its right neighbour; both must have the
// same owner (move one first), so no data moves.
func (c *clusterMember) mergeTablet(ctx context.Context, tableName string, id uint64) (tablets.Directory, error) {
	return c.changeDirectory(ctx, tableName, func(d tablets.Directory) (tablets.Directory, error) { return d.Merge(id) })
}

// changeDirectory applies change to the table's directory in etcd, reading
// it again and retrying when another node changed it first, and judging a
// refused change again on the directory read from etcd itself.
func (c *clusterMember) changeDirectory(ctx context.Context, tableName string, change func(tablets.Directory) (tablets.Directory, error)) (tablets.Directory, error) {
	fresh := false
	for {
		d, _, err := c.dirOf(tableName)
		if err != nil {
			return d, err
		}
		next, err := change(d)
		if err != nil {
			// Judged on this node's cached directory, which may lag a
			// change made through another node: judge again on etcd's.
			if !fresh {
				fresh = true
				if _, _, rerr := c.m.ReadDirectory(ctx, d.Table); rerr == nil {
					continue
				}
			}
			return d, clusterStatus(err)
		}
		next, err = c.m.UpdateDirectory(ctx, d, next)
		if errors.Is(err, tablets.ErrConflict) && ctx.Err() == nil {
			continue
		}
		return next, clusterStatus(err)
	}
}

// moveResult reports a planned move.
type moveResult struct {
	From, To                     string
	Bytes, LocalBytes, LocalKeys int64
	SharedSSTs                   int64
	Took                         time.Duration
}

// moveTablet moves a tablet this node owns to another live node.
func (c *clusterMember) moveTablet(ctx context.Context, tableName string, id uint64, to string) (moveResult, error) {
	start := time.Now()
	d, ref, err := c.dirOf(tableName)
	if err != nil {
		return moveResult{}, err
	}
	t, _, ok := d.Find(id)
	if !ok {
		return moveResult{}, status.Errorf(codes.NotFound, "ebbtable: table %s has no tablet %d", ref.table, id)
	}
	res := moveResult{From: t.Owner, To: to}
	if t.Owner != c.opts.NodeID {
		return res, status.Errorf(codes.FailedPrecondition, "ebbtable: %s is not owned by node %s", t, c.opts.NodeID)
	}
	if to == t.Owner {
		return res, nil
	}
	n, ok := c.m.Node(to)
	if !ok {
		return res, status.Errorf(codes.FailedPrecondition, "ebbtable: node %s is not live", to)
	}
	if !c.m.Live() {
		return res, status.Errorf(codes.Unavailable, "ebbtable: node %s does not hold its lease now", c.opts.NodeID)
	}
	cc, err := c.conn(n.Addr)
	if err != nil {
		return res, status.Errorf(codes.Unavailable, "ebbtable: node %s: %v", to, err)
	}
	// The tablet's change-stream records go first, all but the tail
	// (clusterchanges.go).
	ship, err := c.newShipment(ref, t, clusterpb.NewClusterClient(cc))
	if err == nil {
		err = ship.ahead(ctx)
	}
	if err != nil {
		c.moves.WithLabelValues("failed").Inc()
		return res, fmt.Errorf("ebbtable: node %s could not take the change-stream records of %s: %w", to, t, err)
	}
	// Fence the tablet: wait for the requests serving it, hold new ones.
	g := c.gate(d.Table, id)
	done := c.wantGate(d.Table, id) // long reads let go of it (clusterread.go)
	g.Lock()
	defer g.Unlock()
	defer done()
	// From etcd itself, not this node's cache: a change made through
	// another node just before (a merge) would make the flip's compare
	// fail after the span was shipped.
	d, ok, err = c.m.ReadDirectory(ctx, ref.name())
	if err != nil {
		return res, status.Errorf(codes.Unavailable, "ebbtable: move of tablet %d: %v", id, err)
	}
	if !ok {
		return res, status.Errorf(codes.NotFound, "ebbtable: table %s was dropped", ref.table)
	}
	if t, _, ok = d.Find(id); !ok || t.Owner != c.opts.NodeID {
		return res, status.Errorf(codes.Aborted, "ebbtable: tablet %d changed before the move began", id)
	}
	// Change-stream readers of the tablet here stop at this mark; its
	// records up to the export travel with it (clusterchanges.go).
	mark, moved := c.beginMove(d.Table, t), false
	defer func() { c.endMove(d.Table, mark, moved) }()
	x, err := c.s.engine.ExportSpan(ctx, ref.instance, ref.table, t.Start, t.End)
	if err != nil {
		c.moves.WithLabelValues("failed").Inc()
		return res, toStatus(err)
	}
	defer x.Release()
	b, err := x.Marshal()
	if err != nil {
		c.moves.WithLabelValues("failed").Inc()
		return res, toStatus(err)
	}
	// The span's replication tombstones go along (clusterpull.go).
	tombs, err := c.s.engine.SpanTombstones(ref.instance, ref.table, t.Start, t.End)
	if err != nil {
		c.moves.WithLabelValues("failed").Inc()
		return res, toStatus(err)
	}
	// The target commits after everything this node committed (clusterrepl.go).
	if _, err := clusterpb.NewClusterClient(cc).IngestSpan(c.withCommitFloor(ctx), &clusterpb.IngestSpanRequest{Table: tableName, Tablet: id, Export: b,
		Tombstones: tombs, Start: t.Start, End: t.End}); err != nil {
		c.moves.WithLabelValues("failed").Inc()
		return res, fmt.Errorf("ebbtable: node %s could not ingest %s: %w", to, t, err)
	}
	if err := ship.finish(ctx, t, x.CommitHighWater()); err != nil {
		c.moves.WithLabelValues("failed").Inc()
		return res, fmt.Errorf("ebbtable: node %s could not take the change-stream records of %s: %w", to, t, err)
	}
	next, err := d.WithOwner(id, to)
	if err != nil {
		return res, clusterStatus(err)
	}
	if _, err := c.m.UpdateDirectory(ctx, d, next); err != nil {
		// A lost answer leaves the outcome unknown: ask etcd (still
		// fenced) before serving the tablet again.
		flipped := false
		if !errors.Is(err, tablets.ErrConflict) {
			cur, ok, rerr := c.readDirectoryFenced(d.Table)
			if rerr != nil {
				return res, status.Errorf(codes.Unavailable, "ebbtable: move of %s: outcome unknown: %v", t, rerr)
			}
			if ct, _, found := cur.Find(id); ok && found && ct.Owner == to {
				flipped = true
			}
		}
		if !flipped {
			// Not flipped: the source still owns and serves the tablet;
			// what the target ingested is never served and is replaced by
			// the next ingest there.
			c.moves.WithLabelValues("aborted").Inc()
			return res, clusterStatus(err)
		}
	}
	moved = true
	// Flipped: the target serves the tablet from now on. The excise only
	// frees space here; a failure leaves unreachable data behind.
	if err := c.s.engine.ExciseSpan(context.WithoutCancel(ctx), ref.instance, ref.table, t.Start, t.End); err != nil {
		c.s.log.Warn("excise a moved tablet", "tablet", t.String(), "err", err)
	}
	st := x.Stats()
	c.moveBytes.Observe(float64(len(b) + ship.bytes)) // the records too
	c.moves.WithLabelValues("moved").Inc()
	res.Bytes, res.LocalBytes, res.LocalKeys, res.SharedSSTs = int64(len(b)), int64(st.LocalBytes), int64(st.LocalKeys), int64(st.SharedSSTs)
	res.Took = time.Since(start)
	c.s.log.Info("tablet moved", "table", d.Table, "tablet", id, "to", to, "bytes", len(b), "shared_ssts", st.SharedSSTs, "change_records", ship.n, "change_bytes", ship.bytes, "took", res.Took)
	return res, nil
}

// readDirectoryFenced reads a directory from etcd until it can, the
// tablet's gate still held: the tablet is served by nobody here until the
// outcome of its move is known (or the node stops).
func (c *clusterMember) readDirectoryFenced(table string) (tablets.Directory, bool, error) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, ok, err := c.m.ReadDirectory(ctx, table)
		cancel()
		if err == nil {
			return d, ok, nil
		}
		c.s.log.Error("tablet move: cannot tell yet whether the owner flipped", "table", table, "err", err)
		select {
		case <-c.stop:
			return d, false, err
		case <-c.s.opts.Clock.After(time.Second):
		}
	}
}

// ingestSpan is the target's half of a move: the tablet becomes this
// node's only when the source flips the directory.
func (c *clusterMember) ingestSpan(ctx context.Context, b []byte) error {
	if f := c.ingestFault.Load(); f != nil {
		if err := (*f)(); err != nil {
			return err
		}
	}
	x, err := table.UnmarshalSpanExport(b)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "ebbtable: span export: %v", err)
	}
	return toStatus(c.ingestMoved(ctx, x)) // clusterfail.go
}

// forceReassign gives the tablets of a node that is not live to live
// nodes without its data: what only the dead node's disk held of them is
// lost (docs/scale-out.md, "Failure cases").
func (c *clusterMember) forceReassign(ctx context.Context, node string) ([]tablets.Move, error) {
	if _, ok := c.m.Node(node); ok {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: node %s is live; drain it instead", node)
	}
	var done []tablets.Move
	for _, d := range c.m.Directories() {
		for {
			plan, err := tablets.PlanDrain(node, c.m.Nodes(), []tablets.Directory{d})
			if err != nil {
				return done, clusterStatus(err)
			}
			if len(plan) == 0 {
				break
			}
			next := d
			for _, mv := range plan {
				if next, err = next.WithOwner(mv.Tablet, mv.To); err != nil {
					return done, clusterStatus(err)
				}
			}
			// The dead node's change-stream records go to the new owners
			// first (clusterfailchanges.go).
			if err := c.forcedChanges(ctx, node, d, plan); err != nil {
				return done, status.Errorf(codes.Unavailable, "ebbtable: %s's change-stream records: %v", node, err)
			}
			if _, err := c.m.UpdateDirectory(ctx, d, next); err != nil {
				if errors.Is(err, tablets.ErrConflict) && ctx.Err() == nil {
					var ok bool
					if d, ok = c.m.Directory(d.Table); !ok {
						break
					}
					continue
				}
				return done, clusterStatus(err)
			}
			done = append(done, plan...)
			break
		}
	}
	return done, nil
}

// splitLoop splits the tablets this node owns that grew past SplitBytes.
func (c *clusterMember) splitLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case <-c.s.opts.Clock.After(c.opts.SplitInterval):
		}
		if !c.m.Live() {
			continue
		}
		for _, d := range c.m.Directories() {
			ref, err := parseTable(d.Table)
			if err != nil {
				continue
			}
			for _, t := range d.Tablets {
				if t.Owner != c.opts.NodeID {
					continue
				}
				size, err := c.s.engine.ApproxSpanSize(ref.instance, ref.table, t.Start, t.End)
				if err != nil {
					continue
				}
				if int64(size) < c.opts.SplitBytes/8 {
					c.mergeSmall(d, ref, t, size)
					continue
				}
				if int64(size) < c.opts.SplitBytes {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				key, err := c.s.engine.SpanSplitKey(ctx, ref.instance, ref.table, t.Start, t.End)
				if err == nil && len(key) > 0 {
					if _, err = c.splitTablet(ctx, d.Table, key); err == nil {
						c.s.log.Info("tablet split by size", "table", d.Table, "tablet", t.ID, "bytes", size, "at", fmt.Sprintf("%q", key))
					}
				}
				cancel()
				if err != nil {
					c.s.log.Warn("split a large tablet", "tablet", t.String(), "err", err)
				}
			}
		}
	}
}

// mergeSmall merges a small tablet with its right neighbour when this node
// owns both and together they stay under a quarter of the split size.
func (c *clusterMember) mergeSmall(d tablets.Directory, ref tableRef, t tablets.Tablet, size uint64) {
	_, i, ok := d.Find(t.ID)
	if !ok || i+1 >= len(d.Tablets) || d.Tablets[i+1].Owner != c.opts.NodeID {
		return
	}
	r := d.Tablets[i+1]
	rsize, err := c.s.engine.ApproxSpanSize(ref.instance, ref.table, r.Start, r.End)
	if err != nil || int64(size+rsize) >= c.opts.SplitBytes/4 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, ok := c.m.Directory(d.Table)
	if !ok || cur.Revision != d.Revision {
		return // changed since sized: judge it on the next round
	}
	if _, err := c.mergeTablet(ctx, d.Table, t.ID); err == nil {
		c.s.log.Info("small tablets merged", "table", d.Table, "tablet", t.ID, "with", r.ID, "bytes", size+rsize)
	}
}
