package server

import (
	"context"
	"errors"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/replication"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Raising a max age on a replicated table: the GcRaise and GcHold handlers.
// The coordinated raise's steps are replication.Raise; here are its
// transport (raiseHolder) and the status codes of its failures.

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
	clusters := []string{s.opts.ClusterID}
	for _, p := range s.peers.list() {
		clusters = append(clusters, p.ID)
	}
	raise := replication.Raise{
		Clusters: clusters,
		Holder:   raiseHolder{a: a, m: m, family: fam},
		Change: func() error {
			_, err := s.engine.ModifyFamilies(m.Instance, m.Name, collectedMods)
			return err
		},
		Rule:  rule.String(),
		Clock: s.opts.Clock,
		// The clusters answer in real time.
		Pace: clock.Real{},
		Wait: raiseWait,
		Poll: 50 * time.Millisecond,
		Log:  s.log,
	}
	if err := raise.Run(ctx); err != nil {
		var re *replication.RaiseError
		switch {
		case errors.As(err, &re) && re.Late:
			return nil, status.Error(codes.DeadlineExceeded, "ebbtable: "+re.Error())
		case errors.As(err, &re):
			return nil, status.Error(codes.Unavailable, "ebbtable: "+re.Error())
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			return nil, status.FromContextError(err).Err()
		}
		return nil, toStatus(err)
	}
	return &ebbadminpb.GcRaiseResponse{Table: m.Name, Family: fam, Rule: rule.String(), Coordinated: true, Clusters: int64(len(clusters))}, nil
}

// raiseHolder is a coordinated raise's GcHold: this cluster's directly,
// a peer's over EbbAdmin.
type raiseHolder struct {
	a      *ebbAdmin
	m      *table.Meta
	family string
}

func (h raiseHolder) Hold(ctx context.Context, cluster string, hold bool, collectAt *time.Time) (string, error) {
	s := h.a.s
	proj, inst, _ := splitInstance(h.m.Instance)
	req := &ebbadminpb.GcHoldRequest{Project: proj, Instance: inst, Table: h.m.Name, Family: h.family, Hold: hold}
	if collectAt != nil {
		req.CollectAtNanos = proto.Int64(collectAt.UnixNano())
	}
	if cluster == s.opts.ClusterID {
		out, err := h.a.GcHold(ctx, req)
		return out.GetRule(), err
	}
	c, err := s.peerClient(cluster)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := c.GcHold(ctx, req)
	return out.GetRule(), err
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
