package server

import (
	"context"
	"time"

	"github.com/ebbtable/ebbtable/rowttl"
	"google.golang.org/protobuf/types/known/structpb"
)

// Methods of EbbAdminService for row deletion policies (package rowttl).
const (
	// MethodDDL: {project, instance, statement} → {table, done, expression}.
	MethodDDL = "/" + EbbAdminService + "/Ddl"
	// MethodTTLRun: {project, instance, table?} → {tables, scanned,
	// deleted, children, undeletable, batches, duration_seconds}.
	MethodTTLRun = "/" + EbbAdminService + "/TtlRun"
	// MethodTTLStatus: {project, instance} → {interval_seconds,
	// visibility, tables: [{table, expression, separator, watermark,
	// watermark_age_seconds, last_run, scanned, deleted, children,
	// undeletable, smallest_undeletable}]} (times RFC 3339, "" if none).
	MethodTTLStatus = "/" + EbbAdminService + "/TtlStatus"
	// MethodTTLPlan: {project, instance, table, policy} → {expression,
	// rows, children, null, undeletable, scanned}.
	MethodTTLPlan = "/" + EbbAdminService + "/TtlPlan"
	// MethodTTLResume: {project, instance, table} → {table, expression}:
	// resumes a policy a restore left paused.
	MethodTTLResume = "/" + EbbAdminService + "/TtlResume"
)

func init() {
	ebbAdminDesc.Methods = append(ebbAdminDesc.Methods,
		unaryStruct("Ddl", (*ebbAdmin).ddl),
		unaryStruct("TtlRun", (*ebbAdmin).ttlRun),
		unaryStruct("TtlStatus", (*ebbAdmin).ttlStatus),
		unaryStruct("TtlPlan", (*ebbAdmin).ttlPlan),
		unaryStruct("TtlResume", (*ebbAdmin).ttlResume),
	)
}

func (a *ebbAdmin) ddl(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	res, err := rowttl.Exec(a.s.engine, inst, str(in, "statement"))
	if err != nil {
		return nil, toStatus(err)
	}
	return structpb.NewStruct(map[string]any{"table": res.Table, "done": res.Done, "expression": res.Expression})
}

func (a *ebbAdmin) ttlRun(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	ctx, op := a.s.trackProgress(ctx)
	defer op.Finish()
	st, err := a.s.ttl.Run(ctx, rowttl.Selector{Instance: inst, Table: str(in, "table")})
	if err != nil {
		return nil, toStatus(err)
	}
	return structpb.NewStruct(map[string]any{
		"tables":           st.Tables,
		"scanned":          st.Scanned,
		"deleted":          st.Deleted,
		"children":         st.Children,
		"undeletable":      st.Undeletable,
		"batches":          st.Batches,
		"duration_seconds": st.Duration.Seconds(),
	})
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func (a *ebbAdmin) ttlStatus(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	now := a.s.opts.Clock.Now()
	tables := []any{}
	for _, st := range a.s.ttl.Status(inst) {
		age := 0.0
		if !st.Watermark.IsZero() {
			age = max(now.Sub(st.Watermark), 0).Seconds()
		}
		tables = append(tables, map[string]any{
			"table":                 st.Table,
			"expression":            st.Expression,
			"separator":             st.Separator,
			"watermark":             rfc3339(st.Watermark),
			"watermark_age_seconds": age,
			"last_run":              rfc3339(st.LastRun),
			"scanned":               st.Scanned,
			"deleted":               st.Deleted,
			"children":              st.Children,
			"undeletable":           st.Undeletable,
			"smallest_undeletable":  rfc3339(st.SmallestUndeletable),
			"paused":                st.Paused,
		})
	}
	return structpb.NewStruct(map[string]any{
		"interval_seconds": a.s.ttl.Interval().Seconds(),
		"visibility":       a.s.engine.Visibility().String(),
		"tables":           tables,
	})
}

func (a *ebbAdmin) ttlResume(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	m, err := a.s.engine.ResumeRowPolicy(inst, str(in, "table"))
	if err != nil {
		return nil, toStatus(err)
	}
	return structpb.NewStruct(map[string]any{"table": m.Name, "expression": rowttl.FromTable(*m.RowPolicy).Expression()})
}

func (a *ebbAdmin) ttlPlan(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	pol, err := rowttl.ParsePolicy(str(in, "policy"))
	if err != nil {
		return nil, toStatus(err)
	}
	pr, err := a.s.ttl.Plan(ctx, inst, str(in, "table"), pol)
	if err != nil {
		return nil, toStatus(err)
	}
	return structpb.NewStruct(map[string]any{
		"expression":  pr.Expression,
		"rows":        pr.Rows,
		"children":    pr.Children,
		"null":        pr.Null,
		"undeletable": pr.Undeletable,
		"scanned":     pr.Scanned,
	})
}
