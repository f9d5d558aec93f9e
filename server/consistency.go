package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Consistency tokens. A token lists, for this cluster and every peer that
// answered, the cluster's closed commit timestamp when the token was made:
// every write acknowledged there before the token is at or below it.
// CheckConsistency is true once every cluster of the instance has applied
// every other listed cluster's records of the table through its timestamp.

const tokenPrefix = "ebb1."

// peerCallTimeout bounds one status call to a peer.
const peerCallTimeout = 2 * time.Second

func encodeToken(marks map[string]int64) (string, error) {
	b, err := json.Marshal(marks)
	if err != nil {
		return "", err
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

func decodeToken(tok string) (map[string]int64, error) {
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: %q is not a consistency token from this instance", tok)
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	var marks map[string]int64
	if err == nil {
		err = json.Unmarshal(b, &marks)
	}
	if err != nil || len(marks) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: consistency token %q does not decode", tok)
	}
	return marks, nil
}

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

// GenerateConsistencyToken marks what every reachable cluster has
// committed so far.
func (a *adminServer) GenerateConsistencyToken(ctx context.Context, req *adminpb.GenerateConsistencyTokenRequest) (*adminpb.GenerateConsistencyTokenResponse, error) {
	ref, _, err := a.s.tableByName(req.GetName())
	if err != nil {
		return nil, err
	}
	marks := map[string]int64{a.s.opts.ClusterID: a.s.engine.ClosedTimestamp()}
	for _, p := range a.s.peers.list() {
		if closed, _, err := a.s.peerStatus(ctx, p.ID, ref); err == nil {
			marks[p.ID] = closed
		}
	}
	tok, err := encodeToken(marks)
	if err != nil {
		return nil, toStatus(err)
	}
	return &adminpb.GenerateConsistencyTokenResponse{ConsistencyToken: tok}, nil
}

// CheckConsistency reports whether every cluster has applied the writes
// the token covers. A cluster that cannot be asked is not consistent.
func (a *adminServer) CheckConsistency(ctx context.Context, req *adminpb.CheckConsistencyRequest) (*adminpb.CheckConsistencyResponse, error) {
	ref, m, err := a.s.tableByName(req.GetName())
	if err != nil {
		return nil, err
	}
	marks, err := decodeToken(req.GetConsistencyToken())
	if err != nil {
		return nil, err
	}
	// Replication usually catches up within moments, and clients poll
	// slowly (the official client every 10 s), so wait a little before
	// answering no.
	deadline := time.Now().Add(checkConsistencyWait)
	for {
		ok, err := a.s.consistent(ctx, ref, m, marks)
		if err != nil {
			return nil, toStatus(err)
		}
		if ok || time.Now().After(deadline) {
			return &adminpb.CheckConsistencyResponse{Consistent: ok}, nil
		}
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-a.s.stopping:
			return &adminpb.CheckConsistencyResponse{Consistent: false}, nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// checkConsistencyWait is how long CheckConsistency waits for replication
// to catch up before it answers false.
const checkConsistencyWait = 3 * time.Second

func (s *Server) consistent(ctx context.Context, ref tableRef, m *table.Meta, marks map[string]int64) (bool, error) {
	// Here: each other cluster's records applied through its mark.
	for origin, mark := range marks {
		if origin == s.opts.ClusterID {
			continue
		}
		p, ok, err := s.engine.Checkpoint(m, origin)
		if err != nil {
			return false, err
		}
		if !ok || p.Commit < mark {
			return false, nil
		}
	}
	// At each peer: the same.
	for _, p := range s.peers.list() {
		_, applied, err := s.peerStatus(ctx, p.ID, ref)
		if err != nil {
			return false, nil
		}
		for origin, mark := range marks {
			if origin != p.ID && applied[origin] < mark {
				return false, nil
			}
		}
	}
	return true, nil
}

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
