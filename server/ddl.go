package server

import (
	"context"
	"time"

	"github.com/ebbtable/ebbtable/rowttl"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
)

// Methods of EbbAdminService for row deletion policies (package rowttl).
const (
	MethodDDL       = ebbadminpb.EbbAdmin_Ddl_FullMethodName
	MethodTTLRun    = ebbadminpb.EbbAdmin_TtlRun_FullMethodName
	MethodTTLStatus = ebbadminpb.EbbAdmin_TtlStatus_FullMethodName
	MethodTTLPlan   = ebbadminpb.EbbAdmin_TtlPlan_FullMethodName
	// MethodTTLResume resumes a policy a restore left paused.
	MethodTTLResume = ebbadminpb.EbbAdmin_TtlResume_FullMethodName
)

func (a *ebbAdmin) Ddl(ctx context.Context, in *ebbadminpb.DdlRequest) (*ebbadminpb.DdlResponse, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	res, err := rowttl.Exec(a.s.engine, inst, in.GetStatement())
	if err != nil {
		return nil, toStatus(err)
	}
	return &ebbadminpb.DdlResponse{Table: res.Table, Done: res.Done, Expression: res.Expression}, nil
}

func (a *ebbAdmin) TtlRun(ctx context.Context, in *ebbadminpb.TtlRunRequest) (*ebbadminpb.TtlRunResponse, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	ctx, op := a.s.trackProgress(ctx)
	defer op.Finish()
	st, err := a.s.ttl.Run(ctx, rowttl.Selector{Instance: inst, Table: in.GetTable()})
	if err != nil {
		return nil, toStatus(err)
	}
	return &ebbadminpb.TtlRunResponse{
		Tables:          int64(st.Tables),
		Scanned:         int64(st.Scanned),
		Deleted:         int64(st.Deleted),
		Children:        int64(st.Children),
		Undeletable:     int64(st.Undeletable),
		Batches:         int64(st.Batches),
		DurationSeconds: st.Duration.Seconds(),
	}, nil
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func (a *ebbAdmin) TtlStatus(ctx context.Context, in *ebbadminpb.TtlStatusRequest) (*ebbadminpb.TtlStatusResponse, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	now := a.s.opts.Clock.Now()
	out := &ebbadminpb.TtlStatusResponse{IntervalSeconds: a.s.ttl.Interval().Seconds(), Visibility: a.s.engine.Visibility().String()}
	for _, st := range a.s.ttl.Status(inst) {
		age := 0.0
		if !st.Watermark.IsZero() {
			age = max(now.Sub(st.Watermark), 0).Seconds()
		}
		out.Tables = append(out.Tables, &ebbadminpb.TtlTableStatus{
			Table:               st.Table,
			Expression:          st.Expression,
			Separator:           st.Separator,
			Watermark:           rfc3339(st.Watermark),
			WatermarkAgeSeconds: age,
			LastRun:             rfc3339(st.LastRun),
			Scanned:             int64(st.Scanned),
			Deleted:             int64(st.Deleted),
			Children:            int64(st.Children),
			Undeletable:         int64(st.Undeletable),
			SmallestUndeletable: rfc3339(st.SmallestUndeletable),
			Paused:              st.Paused,
		})
	}
	return out, nil
}

func (a *ebbAdmin) TtlResume(ctx context.Context, in *ebbadminpb.TtlResumeRequest) (*ebbadminpb.TtlResumeResponse, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	m, err := a.s.engine.ResumeRowPolicy(inst, in.GetTable())
	if err != nil {
		return nil, toStatus(err)
	}
	return &ebbadminpb.TtlResumeResponse{Table: m.Name, Expression: rowttl.FromTable(*m.RowPolicy).Expression()}, nil
}

func (a *ebbAdmin) TtlPlan(ctx context.Context, in *ebbadminpb.TtlPlanRequest) (*ebbadminpb.TtlPlanResponse, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	pol, err := rowttl.ParsePolicy(in.GetPolicy())
	if err != nil {
		return nil, toStatus(err)
	}
	pr, err := a.s.ttl.Plan(ctx, inst, in.GetTable(), pol)
	if err != nil {
		return nil, toStatus(err)
	}
	return &ebbadminpb.TtlPlanResponse{
		Expression:  pr.Expression,
		Rows:        int64(pr.Rows),
		Children:    int64(pr.Children),
		Null:        int64(pr.Null),
		Undeletable: int64(pr.Undeletable),
		Scanned:     int64(pr.Scanned),
	}, nil
}
