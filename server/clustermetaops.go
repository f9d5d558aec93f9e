package server

import (
	"encoding/json"
	"strings"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/ebbtable/ebbtable/clusteretcd"
	"google.golang.org/protobuf/proto"
)

// Instant operations in cluster mode (docs/scale-out.md, "Backups"): the
// long-running operation of an admin call that is done when it returns
// (UpdateTable, UndeleteTable, CreateAuthorizedView, CreateInstance,
// UpdateCluster, UpdateAppProfile, …) is kept in etcd as an operation
// record (ops/NAME, like a backup's or a restore's), so GetOperation,
// ListOperations and DeleteOperation answer for it through every node,
// and the backup sweep deletes it restoreOpRetention after it ended. Its
// name is the resource's, then /operations/done-NODE-TOKEN: a node's own
// sequence numbers are not unique in the cluster. If etcd cannot be
// written, the operation stays in the memory of the node that ran it, as
// outside a cluster (logged).

// instantOpMark marks the names of the instant operations kept in etcd.
const instantOpMark = "/operations/done-"

// opKindInstant is the kind of an instant operation's record
// (restoreOp.Kind).
const opKindInstant = "instant"

// keepOp keeps op, just finished on this node, in etcd under a name of
// its own in the cluster and returns it so named (op itself, outside a
// cluster or if etcd cannot be written).
func (c *clusterMember) keepOp(op *longrunningpb.Operation) *longrunningpb.Operation {
	if c == nil || c.m == nil || !op.GetDone() {
		return op
	}
	i := strings.LastIndex(op.GetName(), "/operations/")
	if i < 0 {
		return op
	}
	kept := proto.Clone(op).(*longrunningpb.Operation)
	kept.Name = op.GetName()[:i] + instantOpMark + c.opts.NodeID + "-" + randomID()
	b, err := proto.Marshal(kept)
	if err == nil {
		var v []byte
		if v, err = json.Marshal(restoreOp{State: opDone, Kind: opKindInstant, Maker: c.opts.NodeID, Op: b, Ended: c.s.opts.Clock.Now()}); err == nil {
			ctx, cancel := etcdCtx()
			err = c.m.CreateOpRecord(ctx, kept.Name, v)
			cancel()
		}
	}
	if err != nil {
		c.s.log.Warn("an instant operation kept in this node's memory only", "operation", op.GetName(), "err", err)
		return op
	}
	// Kept under its new name only: ListOperations on this node lists it
	// once.
	c.s.ops.forget(op.GetName())
	return kept
}

// forgetApplied drops the operation a schema log entry's apply made here
// for a change another node took (the node that took it keeps it): no
// client was given it, and ListOperations would list it.
func (c *clusterMember) forgetApplied(e clusteretcd.SchemaEntry, res applyResult) {
	if lro, ok := res.resp.(*longrunningpb.Operation); ok && e.Origin != c.opts.NodeID {
		c.s.ops.forget(lro.GetName())
	}
}

// forget drops an operation from this node's memory.
func (o *operations) forget(name string) {
	o.mu.Lock()
	delete(o.ops, name)
	o.mu.Unlock()
}

// doneOp is ops.done for the instance admin calls that finish at once,
// kept in etcd in cluster mode (keepOp).
func (a *instanceServer) doneOp(resource string, resp, meta proto.Message) (*longrunningpb.Operation, error) {
	op, err := a.s.ops.done(resource, resp, meta)
	if err != nil {
		return nil, err
	}
	return a.clusterMember().keepOp(op), nil
}
