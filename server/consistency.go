package server

import (
	"context"
	"errors"
	"strings"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Consistency tokens: the GenerateConsistencyToken and CheckConsistency
// handlers. What a token holds and when a table is consistent is
// replication.TableState; here are the peers' status calls and the codes.

// peerCallTimeout bounds one status call to a peer.
const peerCallTimeout = 2 * time.Second

// peerStatus asks a peer how far it applied each origin's records of a table.
func (s *Server) peerStatus(ctx context.Context, id string, ref tableRef) (closed int64, applied map[string]int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
	defer cancel()
	c, err := s.peerClient(id)
	if err != nil {
		s.peers.contact(id, err)
		return 0, nil, err
	}
	proj, inst, _ := splitInstance(ref.instance)
	out, err := c.ReplicationStatus(ctx, &ebbadminpb.ReplicationStatusRequest{Project: proj, Instance: inst, Table: ref.table})
	s.peers.contact(id, err)
	if err != nil {
		return 0, nil, err
	}
	applied = out.GetApplied()
	if applied == nil {
		applied = map[string]int64{}
	}
	return out.GetClosed(), applied, nil
}

func splitInstance(inst string) (project, instance string, ok bool) {
	p := strings.Split(inst, "/")
	if len(p) != 4 {
		return "", "", false
	}
	return p[1], p[3], true
}

func encodeToken(marks replication.Marks) (string, error) { return marks.Token() }

// decodeToken parses a client's token, InvalidArgument when it is bad.
func decodeToken(tok string) (replication.Marks, error) {
	marks, err := replication.ParseToken(tok)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: %v", err)
	}
	return marks, nil
}

// peerApplied is replication.Applied over EbbAdmin/ReplicationStatus.
type peerApplied struct{ s *Server }

func (p peerApplied) Applied(ctx context.Context, peer, instance, tbl string) (int64, map[string]int64, error) {
	return p.s.peerStatus(ctx, peer, tableRef{instance: instance, table: tbl})
}

// tableState is what a consistency check needs of a table.
func (s *Server) tableState(ref tableRef, m *table.Meta) replication.TableState {
	ts := replication.TableState{
		Self: s.opts.ClusterID, Instance: ref.instance, Table: ref.table, Status: peerApplied{s},
		Checkpoint: func(origin string) (int64, bool, error) {
			p, ok, err := s.replCheckpoint(m, origin) // clusterpull.go
			return p.Commit, ok, err
		},
	}
	for _, p := range s.peers.list() {
		ts.Peers = append(ts.Peers, p.ID)
	}
	return ts
}

// GenerateConsistencyToken marks what every reachable cluster has
// committed so far.
func (a *adminServer) GenerateConsistencyToken(ctx context.Context, req *adminpb.GenerateConsistencyTokenRequest) (*adminpb.GenerateConsistencyTokenResponse, error) {
	ref, m, err := a.s.tableByName(req.GetName())
	if err != nil {
		return nil, err
	}
	tok, err := encodeToken(a.s.tableState(ref, m).MakeMarks(ctx, a.s.engine.ClosedTimestamp()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &adminpb.GenerateConsistencyTokenResponse{ConsistencyToken: tok}, nil
}

// CheckConsistency reports whether every cluster has applied the writes
// the token covers, waiting a little for replication to catch up. A
// cluster that cannot be asked is not consistent.
func (a *adminServer) CheckConsistency(ctx context.Context, req *adminpb.CheckConsistencyRequest) (*adminpb.CheckConsistencyResponse, error) {
	ref, m, err := a.s.tableByName(req.GetName())
	if err != nil {
		return nil, err
	}
	marks, err := decodeToken(req.GetConsistencyToken())
	if err != nil {
		return nil, err
	}
	// Peers answer in real time.
	ok, err := a.s.tableState(ref, m).WaitConsistent(ctx, marks, clock.Real{}, checkConsistencyWait, 20*time.Millisecond, a.s.stopping)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, status.FromContextError(err).Err()
		}
		return nil, toStatus(err)
	}
	return &adminpb.CheckConsistencyResponse{Consistent: ok}, nil
}

// checkConsistencyWait is how long CheckConsistency waits for replication
// to catch up before it answers false.
const checkConsistencyWait = 3 * time.Second

// tableByName resolves a table resource name to the table, as a status
// error when it is malformed or missing.
func (s *Server) tableByName(name string) (tableRef, *table.Meta, error) {
	ref, err := parseTable(name)
	if err != nil {
		return tableRef{}, nil, toStatus(err)
	}
	m, err := s.engine.Table(ref.instance, ref.table)
	if err != nil {
		return tableRef{}, nil, toStatus(err)
	}
	return ref, m, nil
}
