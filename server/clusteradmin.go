package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"github.com/ebbtable/ebbtable/internal/durable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Schema changes in cluster mode: every node has every table, under the
// same table id (shared SSTables and moved spans key cells by it). A
// CreateTable, DeleteTable, ModifyColumnFamilies or DropRowRange sent to any
// node is appended to the schema log in etcd (a create in one transaction
// with the table's new tablet directory, its id the entry's sequence
// number); every node applies the log in order through its own Table Admin
// code; the call returns the originating node's result once every live
// node has applied it, so a write that follows finds the table on every
// tablet's owner.

// applyResult is the outcome of one schema log entry on this node.
type applyResult struct {
	resp proto.Message
	err  error
}

// clusterAdmin is the Table Admin API in cluster mode.
type clusterAdmin struct {
	*adminServer
	c *clusterMember
}

// allAppliedWait bounds how long a schema change waits for the other live
// nodes to apply it before answering anyway.
const allAppliedWait = 30 * time.Second

func (a *clusterAdmin) CreateTable(ctx context.Context, req *adminpb.CreateTableRequest) (*adminpb.Table, error) {
	inst, err := parseInstance(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetTableId() == "" {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: table_id is required")
	}
	ref := tableRef{instance: inst, table: req.GetTableId()}
	if _, err := a.s.engine.Table(ref.instance, ref.table); err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: table %s already exists", ref.table)
	}
	var splits [][]byte
	for _, s := range req.GetInitialSplits() {
		splits = append(splits, s.GetKey())
	}
	if err := a.c.waitTakers(ctx); err != nil {
		return nil, err
	}
	resp, err := a.c.propose(ctx, "CreateTable", ref, req, clusteretcd.DirOp{Create: func(seq uint64) (tablets.Directory, error) {
		owners, err := tablets.Place(len(splits)+1, a.c.m.Nodes(), a.c.m.Directories())
		if err != nil {
			return tablets.Directory{}, err
		}
		return tablets.NewDirectory(ref.name(), seq, splits, owners)
	}})
	if err != nil {
		return nil, err
	}
	return resp.(*adminpb.Table), nil
}

func (a *clusterAdmin) DeleteTable(ctx context.Context, req *adminpb.DeleteTableRequest) (*emptypb.Empty, error) {
	ref, err := parseTable(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if _, err := a.s.engine.Table(ref.instance, ref.table); err != nil {
		return nil, toStatus(err)
	}
	// The directory is kept for UndeleteTable (clusterschema.go).
	// Kept for the undelete retention only (clusterschema.go).
	if _, err := a.c.propose(ctx, "DeleteTable", ref, req, clusteretcd.DirOp{Drop: true, Keep: true, KeepFor: a.c.keepDeletedFor()}); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func (a *clusterAdmin) ModifyColumnFamilies(ctx context.Context, req *adminpb.ModifyColumnFamiliesRequest) (*adminpb.Table, error) {
	ref, err := parseTable(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	resp, err := a.c.propose(ctx, "ModifyColumnFamilies", ref, req, clusteretcd.DirOp{})
	if err != nil {
		return nil, err
	}
	return resp.(*adminpb.Table), nil
}

func (a *clusterAdmin) DropRowRange(ctx context.Context, req *adminpb.DropRowRangeRequest) (*emptypb.Empty, error) {
	ref, err := parseTable(req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if _, err := a.c.propose(ctx, "DropRowRange", ref, req, clusteretcd.DirOp{}); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

// waitTakers waits, for up to one lease TTL, for a live node that may
// take tablets when there is none: every node's lease lapsed at once (a
// machine starved for longer than the TTL), and each node registers again
// within a third of the TTL of hearing so. A table's creation then waits
// for them rather than answering UNAVAILABLE, which the official clients
// do not retry for CreateTable. Still none after that: UNAVAILABLE (from
// the placement). The request's own deadline or cancellation ends the wait
// with its status.
func (c *clusterMember) waitTakers(ctx context.Context) error {
	some := func() bool { return len(tablets.Takers(c.m.Nodes())) > 0 }
	if some() {
		return nil
	}
	if h := c.s.knobs().takersWait.get(); h != nil { // tests
		h(c.opts.NodeID)
	}
	wctx, cancel := context.WithTimeout(ctx, c.leaseTTL())
	defer cancel()
	c.m.WaitFor(wctx, some)
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return nil
}

// leaseTTL is the node's lease TTL, its default (10 s) when unset.
func (c *clusterMember) leaseTTL() time.Duration {
	if c.opts.LeaseTTL <= 0 {
		return 10 * time.Second
	}
	return c.opts.LeaseTTL
}

// propose appends a schema change, waits for this node to apply it and
// returns its result here, after every live node applied it (or
// allAppliedWait passed).
func (c *clusterMember) propose(ctx context.Context, method string, ref tableRef, req proto.Message, op clusteretcd.DirOp) (proto.Message, error) {
	return c.proposeArgs(ctx, method, ref, req, op, nil)
}

// proposeArgs is propose with arguments besides the request (SchemaEntry.Args).
func (c *clusterMember) proposeArgs(ctx context.Context, method string, ref tableRef, req proto.Message, op clusteretcd.DirOp, args map[string]string) (proto.Message, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, toStatus(err)
	}
	e, err := c.m.AppendEntry(ctx, clusteretcd.SchemaEntry{Method: method, Table: ref.name(), Request: b, Origin: c.opts.NodeID, Args: args}, op)
	switch {
	case errors.Is(err, clusteretcd.ErrTableExists):
		return nil, status.Errorf(codes.AlreadyExists, "ebbtable: table %s already exists", ref.table)
	case errors.Is(err, clusteretcd.ErrNotDeleted):
		return nil, status.Errorf(codes.NotFound, "ebbtable: no deleted table %s to undelete in this cluster", ref.table)
	case errors.Is(err, tablets.ErrNoNodes):
		return nil, status.Error(codes.Unavailable, err.Error())
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	res, err := c.waitApplied(ctx, e.Seq)
	if err != nil {
		return nil, toStatus(err)
	}
	if res.err != nil {
		c.undoDirOp(ctx, ref, e, op)
	} else if lro, ok := res.resp.(*longrunningpb.Operation); ok {
		res.resp = c.keepOp(lro) // clustermetaops.go: every node answers for it
	}
	wctx, cancel := context.WithTimeout(ctx, allAppliedWait)
	defer cancel()
	if err := c.m.WaitFor(wctx, func() bool { return c.m.AllApplied(e.Seq) }); err != nil && ctx.Err() == nil {
		c.s.log.Warn("schema change not yet applied on every live node", "seq", e.Seq, "method", method)
	}
	return res.resp, res.err
}

// waitApplied waits until this node applied seq and returns its result.
func (c *clusterMember) waitApplied(ctx context.Context, seq uint64) (applyResult, error) {
	for {
		c.applyMu.Lock()
		if c.applied >= seq {
			r, ok := c.results[seq]
			delete(c.results, seq)
			c.applyMu.Unlock()
			if !ok {
				return applyResult{}, fmt.Errorf("%w: schema change %d was applied before its result was kept", errInvalid, seq)
			}
			return r, nil
		}
		ch := c.progress
		c.applyMu.Unlock()
		select {
		case <-ch:
		case <-c.m.Changed():
		case <-ctx.Done():
			return applyResult{}, ctx.Err()
		case <-c.stop:
			return applyResult{}, clusteretcd.ErrClosed
		}
	}
}

func (c *clusterMember) appliedSeq() uint64 {
	c.applyMu.Lock()
	defer c.applyMu.Unlock()
	return c.applied
}

// applyLoop applies new schema log entries as the watch reports them.
func (c *clusterMember) applyLoop() {
	defer c.wg.Done()
	for {
		ch := c.m.Changed()
		if c.m.SchemaSeq() > c.appliedSeq() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := c.catchUp(ctx); err != nil {
				c.s.log.Warn("apply the schema log", "err", err)
			} else if err := c.m.SetApplied(ctx, c.appliedSeq()); err != nil {
				c.s.log.Warn("publish schema progress", "err", err)
			} else {
				c.maybeTrim(ctx)
			}
			cancel()
		}
		select {
		case <-ch:
		case <-c.stop:
			return
		}
	}
}

// catchUp applies every schema log entry after the last applied, in
// order, recording each in the data directory once applied (an entry
// applied again after a crash fails harmlessly: the table exists, the
// family is there).
func (c *clusterMember) catchUp(ctx context.Context) error {
	c.applyRun.Lock()
	defer c.applyRun.Unlock()
	c.applyMu.Lock()
	after := c.applied
	c.applyMu.Unlock()
	es, err := c.m.Entries(ctx, after)
	if err != nil {
		return err
	}
	if len(es) > 0 && es[0].Seq != after+1 {
		return fmt.Errorf("%w (node %s applied %d, the log starts at %d)", clusteretcd.ErrTrimmed, c.opts.NodeID, after, es[0].Seq)
	}
	for _, e := range es {
		res := c.applyEntry(withSchemaSeq(context.WithoutCancel(ctx), e.Seq), e)
		c.forgetApplied(e, res) // clustermetaops.go
		if res.err != nil {
			c.s.log.Info("schema change failed here", "seq", e.Seq, "method", e.Method, "table", e.Table, "err", res.err)
		}
		if h := c.appliedHook.Load(); h != nil {
			(*h)(e) // tests: an entry applied to the engine, not yet marked applied
		}
		if err := durable.ReplaceFile(filepath.Join(c.s.opts.DataDir, clusterAppliedFile), []byte(strconv.FormatUint(e.Seq, 10))); err != nil {
			return err
		}
		c.applyMu.Lock()
		c.applied = e.Seq
		c.results[e.Seq] = res
		for s := range c.results {
			if s+1024 < e.Seq {
				delete(c.results, s)
			}
		}
		close(c.progress)
		c.progress = make(chan struct{})
		c.applyMu.Unlock()
	}
	return nil
}

// applyEntry runs one schema change through this node's Table Admin code.
func (c *clusterMember) applyEntry(ctx context.Context, e clusteretcd.SchemaEntry) applyResult {
	a := &adminServer{s: c.s}
	decode := func(m proto.Message) error { return proto.Unmarshal(e.Request, m) }
	switch e.Method {
	case "CreateTable":
		var req adminpb.CreateTableRequest
		if err := decode(&req); err != nil {
			return applyResult{err: err}
		}
		t, err := c.createTable(a, &req, e.TableID)
		return applyResult{resp: t, err: err}
	case "DeleteTable":
		var req adminpb.DeleteTableRequest
		if err := decode(&req); err != nil {
			return applyResult{err: err}
		}
		r, err := a.DeleteTable(ctx, &req)
		return applyResult{resp: r, err: err}
	case "ModifyColumnFamilies":
		var req adminpb.ModifyColumnFamiliesRequest
		if err := decode(&req); err != nil {
			return applyResult{err: err}
		}
		r, err := a.ModifyColumnFamilies(ctx, &req)
		return applyResult{resp: r, err: err}
	case "DropRowRange":
		var req adminpb.DropRowRangeRequest
		if err := decode(&req); err != nil {
			return applyResult{err: err}
		}
		r, err := a.DropRowRange(ctx, &req)
		return applyResult{resp: r, err: err}
	case "ForgetTable":
		return applyResult{resp: &emptypb.Empty{}}
	case "RestoreTable", restoreBegin, restoreCommit, restoreAbort:
		return c.applyRestoreEntry(ctx, e) // clusterrestore.go
	}
	return c.applyMore(ctx, e)
}

// createTable is the Table Admin CreateTable with the table id the cluster
// gave (TableSpec.ID). A table already here under that id is the same
// entry applied again.
func (c *clusterMember) createTable(a *adminServer, req *adminpb.CreateTableRequest, id uint64) (*adminpb.Table, error) {
	inst, err := parseInstance(req.GetParent())
	if err != nil {
		return nil, toStatus(err)
	}
	if m, err := a.s.engine.Table(inst, req.GetTableId()); err == nil && m.ID == id {
		return a.tableToProto(m, adminpb.Table_SCHEMA_VIEW), nil
	}
	return a.createTable(req, id)
}
