package server

import (
	"context"
	"fmt"
	"time"

	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
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
	MethodGCRaise = "/" + EbbAdminService + "/GcRaise"
	MethodGCHold  = "/" + EbbAdminService + "/GcHold"
)

// raiseWait bounds how long a coordinated raise waits for every cluster to
// have the new rule.
const raiseWait = 30 * time.Second

// gcRaise: {project, instance, table, family, rule, coordinated (bool)} →
// {table, family, rule, coordinated, clusters}.
func (a *ebbAdmin) gcRaise(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	s := a.s
	m, err := a.tableOfRequest(in)
	if err != nil {
		return nil, err
	}
	fam := str(in, "family")
	if _, ok := m.Family(fam); !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: column family %q not found in table %s", fam, m.Name)
	}
	rule, err := gcrule.Parse(str(in, "rule"))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "ebbtable: %v", err)
	}
	mods := []table.FamilyMod{{Name: fam, Update: true, GC: rule}}
	collectedMods := []table.FamilyMod{{Name: fam, Update: true, GC: rule, Collected: true}}
	if !in.GetFields()["coordinated"].GetBoolValue() {
		if _, err := s.engine.ModifyFamilies(m.Instance, m.Name, mods); err != nil {
			return nil, toStatus(err)
		}
		return structpb.NewStruct(map[string]any{"table": m.Name, "family": fam, "rule": rule.String(), "coordinated": false, "clusters": float64(1)})
	}
	peers := s.peers.list()
	req := func(extra map[string]any) map[string]any {
		extra["family"] = fam
		return tableFields(m.Instance, m.Name, extra)
	}
	local := &ebbAdmin{s: s}
	call := func(ctx context.Context, id string, fields map[string]any) (*structpb.Struct, error) {
		if id == s.opts.ClusterID {
			in, err := structpb.NewStruct(fields)
			if err != nil {
				return nil, err
			}
			return local.gcHold(ctx, in)
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return s.callPeer(cctx, id, MethodGCHold, fields)
	}
	clusters := []string{s.opts.ClusterID}
	for _, p := range peers {
		clusters = append(clusters, p.ID)
	}
	var held []string
	defer func() {
		for _, id := range held {
			if _, err := call(context.Background(), id, req(map[string]any{"hold": false})); err != nil {
				s.log.Warn("coordinated raise: cannot release the hold", "cluster", id, "err", err)
			}
		}
	}()
	// 1. Hold the family's age sweeps everywhere.
	for _, id := range clusters {
		if _, err := call(ctx, id, req(map[string]any{"hold": true})); err != nil {
			return nil, status.Errorf(codes.Unavailable, "ebbtable: coordinated raise: cluster %s cannot hold its age sweeps: %v", id, err)
		}
		held = append(held, id)
	}
	// 2. Collect under the old rule as of one instant, everywhere.
	at := s.opts.Clock.Now().UTC().Format(time.RFC3339Nano)
	for _, id := range clusters {
		if _, err := call(ctx, id, req(map[string]any{"hold": true, "collect_at": at})); err != nil {
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
			out, err := call(ctx, id, req(map[string]any{"hold": true}))
			if err == nil && out.GetFields()["rule"].GetStringValue() == rule.String() {
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
	return structpb.NewStruct(map[string]any{"table": m.Name, "family": fam, "rule": rule.String(), "coordinated": true, "clusters": float64(len(clusters))})
}

// gcHold: {project, instance, table, family, hold (bool), collect_at?
// (RFC 3339)} → {rule, held, cutoff}: holds or releases the family's age
// sweeps here, and with collect_at first collects the family as a pass at
// that instant would (under the rule it has now).
func (a *ebbAdmin) gcHold(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	s := a.s
	m, err := a.tableOfRequest(in)
	if err != nil {
		return nil, err
	}
	fam := str(in, "family")
	f, ok := m.Family(fam)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "ebbtable: column family %q not found in table %s", fam, m.Name)
	}
	hold := in.GetFields()["hold"].GetBoolValue()
	s.collector.HoldAge(m.Instance, m.Name, fam, hold)
	if v := str(in, "collect_at"); v != "" {
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: collect_at %q is not an RFC 3339 time", v)
		}
		if err := s.collector.CollectFamilyAt(ctx, m, fam, at); err != nil {
			return nil, toStatus(err)
		}
	}
	out := map[string]any{"rule": f.GC.String(), "held": hold}
	if c, ok := s.ageCutoffs(m)[fam]; ok {
		out["cutoff"] = fmt.Sprint(c)
	}
	return structpb.NewStruct(out)
}
