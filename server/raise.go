package server

import (
	"context"
	"time"

	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Raising a max age on a replicated table. Plain raises replicate like any
// schema change and may leave clusters out of sync for the span between
// their age cutoffs (docs/replication.md, "GC across clusters"). A coordinated raise
// avoids that: it holds the family's age sweeps on every cluster, has each
// collect the family under the old rule as of one common instant, changes
// the rule, waits until every cluster has it, then releases the holds — so
// every cluster's age cutoff for the family is the same.

// Method names (EbbAdminService).
const (
	MethodGCRaise = ebbadminpb.EbbAdmin_GcRaise_FullMethodName
	MethodGCHold  = ebbadminpb.EbbAdmin_GcHold_FullMethodName
)

// raiseWait bounds how long a coordinated raise waits for every cluster to
// have the new rule.
const raiseWait = 30 * time.Second

// GcRaise sets a family's rule, on every cluster in step when coordinated.
func (a *ebbAdmin) GcRaise(ctx context.Context, in *ebbadminpb.GcRaiseRequest) (*ebbadminpb.GcRaiseResponse, error) {
	s := a.s
	m, err := a.tableOfRequest(in)
	if err != nil {
		return nil, err
	}
	fam := in.GetFamily()
	if _, ok := m.Family(fam); !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: column family %q not found in table %s", fam, m.Name)
	}
	rule, err := gcrule.Parse(in.GetRule())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: %v", err)
	}
	mods := []table.FamilyMod{{Name: fam, Update: true, GC: rule}}
	collectedMods := []table.FamilyMod{{Name: fam, Update: true, GC: rule, Collected: true}}
	if !in.GetCoordinated() {
		if _, err := s.engine.ModifyFamilies(m.Instance, m.Name, mods); err != nil {
			return nil, toStatus(err)
		}
		return &ebbadminpb.GcRaiseResponse{Table: m.Name, Family: fam, Rule: rule.String(), Coordinated: false, Clusters: 1}, nil
	}
	peers := s.peers.list()
	proj, inst, _ := splitInstance(m.Instance)
	req := func(hold bool, collectAt *int64) *ebbadminpb.GcHoldRequest {
		return &ebbadminpb.GcHoldRequest{Project: proj, Instance: inst, Table: m.Name, Family: fam, Hold: hold, CollectAtNanos: collectAt}
	}
	call := func(ctx context.Context, id string, req *ebbadminpb.GcHoldRequest) (*ebbadminpb.GcHoldResponse, error) {
		if id == s.opts.ClusterID {
			return a.GcHold(ctx, req)
		}
		c, err := s.peerClient(id)
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return c.GcHold(cctx, req)
	}
	clusters := []string{s.opts.ClusterID}
	for _, p := range peers {
		clusters = append(clusters, p.ID)
	}
	var held []string
	defer func() {
		for _, id := range held {
			if _, err := call(context.Background(), id, req(false, nil)); err != nil {
				s.log.Warn("coordinated raise: cannot release the hold", "cluster", id, "err", err)
			}
		}
	}()
	// 1. Hold the family's age sweeps everywhere.
	for _, id := range clusters {
		if _, err := call(ctx, id, req(true, nil)); err != nil {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: coordinated raise: cluster %s cannot hold its age sweeps: %v", id, err)
		}
		held = append(held, id)
	}
	// 2. Collect under the old rule as of one instant, everywhere.
	at := s.opts.Clock.Now().UnixNano()
	for _, id := range clusters {
		if _, err := call(ctx, id, req(true, &at)); err != nil {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: coordinated raise: cluster %s cannot collect: %v", id, err)
		}
	}
	// 3. Change the rule (the collection already happened: no sweep first).
	if _, err := s.engine.ModifyFamilies(m.Instance, m.Name, collectedMods); err != nil {
		return nil, toStatus(err)
	}
	// 4. Wait until every cluster has the new rule.
	deadline := time.Now().Add(raiseWait)
	for _, id := range clusters[1:] {
		for {
			out, err := call(ctx, id, req(true, nil))
			if err == nil && out.GetRule() == rule.String() {
				break
			}
			if time.Now().After(deadline) {
				return nil, status.Errorf(codes.DeadlineExceeded, "ebbtable: coordinated raise: cluster %s did not receive the new rule within %v (holds released; the rule is changed)", id, raiseWait)
			}
			select {
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	// 5. The deferred release lets the sweeps go on under the new rule.
	return &ebbadminpb.GcRaiseResponse{Table: m.Name, Family: fam, Rule: rule.String(), Coordinated: true, Clusters: int64(len(clusters))}, nil
}

// GcHold holds or releases the family's age sweeps here, and with
// collect_at_nanos first collects the family as a pass at that instant
// would (under the rule it has now).
func (a *ebbAdmin) GcHold(ctx context.Context, in *ebbadminpb.GcHoldRequest) (*ebbadminpb.GcHoldResponse, error) {
	s := a.s
	m, err := a.tableOfRequest(in)
	if err != nil {
		return nil, err
	}
	fam := in.GetFamily()
	f, ok := m.Family(fam)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: column family %q not found in table %s", fam, m.Name)
	}
	if in.CollectAtNanos != nil && in.GetCollectAtNanos() <= 0 {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: collect_at_nanos %d is not a time after 1970", in.GetCollectAtNanos())
	}
	hold := in.GetHold()
	s.collector.HoldAge(m.Instance, m.Name, fam, hold)
	if in.CollectAtNanos != nil {
		if err := s.collector.CollectFamilyAt(ctx, m, fam, time.Unix(0, in.GetCollectAtNanos()).UTC()); err != nil {
			return nil, toStatus(err)
		}
	}
	out := &ebbadminpb.GcHoldResponse{Rule: f.GC.String(), Held: hold}
	if c, ok := s.ageCutoffs(m)[fam]; ok {
		out.Cutoff = proto.Int64(c)
	}
	return out, nil
}
