package server

import (
	"context"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/gcrule"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// EbbAdminService is the full name of ebbtable's own admin service, served on
// the same port as the Bigtable APIs. Its messages are google.protobuf.Struct
// values whose fields each method documents; the cli package is its client.
const EbbAdminService = "ebbtable.admin.v1.EbbAdmin"

// Method names of EbbAdminService.
const (
	MethodGCRun    = "/" + EbbAdminService + "/GcRun"
	MethodGCPlan   = "/" + EbbAdminService + "/GcPlan"
	MethodGCStatus = "/" + EbbAdminService + "/GcStatus"
	// MethodSetFamilyOptions: {project, instance, table, family,
	// expiry_timestamps (bool)} → {table, family, expiry_timestamps}.
	MethodSetFamilyOptions = "/" + EbbAdminService + "/SetFamilyOptions"
	// MethodDebugClock moves a server's clock, if it was started with
	// --debug-clock: {set? (RFC 3339), advance? (Go duration)} → {now}.
	MethodDebugClock = "/" + EbbAdminService + "/DebugClock"
	// MethodWatch streams a table's change stream: {project, instance,
	// table, since?, until?, exclude_system? (bool), token?} → a stream of
	// {line}, each line one record in changestream's JSON encoding.
	MethodWatch = "/" + EbbAdminService + "/Watch"
)

type ebbAdmin struct{ s *Server }

func unaryStruct(name string, fn func(*ebbAdmin, context.Context, *structpb.Struct) (*structpb.Struct, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(structpb.Struct)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return fn(srv.(*ebbAdmin), ctx, req.(*structpb.Struct))
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + EbbAdminService + "/" + name}, h)
		},
	}
}

var ebbAdminDesc = grpc.ServiceDesc{
	ServiceName: EbbAdminService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		unaryStruct("GcRun", (*ebbAdmin).gcRun),
		unaryStruct("GcPlan", (*ebbAdmin).gcPlan),
		unaryStruct("GcStatus", (*ebbAdmin).gcStatus),
		unaryStruct("SetFamilyOptions", (*ebbAdmin).setFamilyOptions),
		unaryStruct("DebugClock", (*ebbAdmin).debugClock),
		unaryStruct("GcRaise", (*ebbAdmin).gcRaise),
		unaryStruct("GcHold", (*ebbAdmin).gcHold),
		unaryStruct("Join", (*ebbAdmin).join),
		unaryStruct("TableChunks", (*ebbAdmin).tableChunks),
		unaryStruct("TableCells", (*ebbAdmin).tableCells),
		unaryStruct("RepairCells", (*ebbAdmin).repairCells),
		unaryStruct("ReplicationDiff", (*ebbAdmin).replicationDiff),
		unaryStruct("Ready", (*ebbAdmin).ready),
		unaryStruct("Pull", (*ebbAdmin).pull),
		unaryStruct("ReplicationStatus", (*ebbAdmin).replicationStatus),
		unaryStruct("ReplicationLink", (*ebbAdmin).replicationLink),
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Watch",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			in := new(structpb.Struct)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			return srv.(*ebbAdmin).watch(in, stream)
		},
	}, {
		StreamName:    "Snapshot",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			in := new(structpb.Struct)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			return srv.(*ebbAdmin).snapshot(in, stream)
		},
	}},
	Metadata: "ebbtable/admin.proto",
}

func str(in *structpb.Struct, k string) string { return in.GetFields()[k].GetStringValue() }

func instanceOf(in *structpb.Struct) (string, error) {
	p, i := str(in, "project"), str(in, "instance")
	if p == "" || i == "" {
		return "", status.Error(codes.InvalidArgument, "ebbtable: project and instance are required")
	}
	return "projects/" + p + "/instances/" + i, nil
}

// gcRun: {project, instance, table?} → {tables, examined, collected,
// collected_bytes, duration_seconds, sweep_seconds, reclaim_seconds,
// reclaimed_bytes, reclaim_left_tables}. Runs a pass now and returns when
// its deletions are durable and its reclaim compactions are done.
func (a *ebbAdmin) gcRun(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	ctx, op := a.s.trackProgress(ctx)
	defer op.Finish()
	st, err := a.s.collector.RunPass(ctx, collector.Selector{Instance: inst, Table: str(in, "table")})
	if err != nil {
		return nil, toStatus(err)
	}
	return structpb.NewStruct(map[string]any{
		"tables":           st.Tables,
		"examined":         st.Examined,
		"collected":        st.Collected,
		"collected_bytes":  st.CollectedBytes,
		"duration_seconds": st.Duration.Seconds(),
		"sweep_seconds":    st.Sweep.Seconds(),
		"reclaim_seconds":  st.Compaction.Seconds(),
		"reclaimed_bytes":  st.ReclaimedBytes,
		// Tables with collected bytes too few or too sparse to compact for,
		// and those bytes (left to Pebble's compactions).
		"reclaim_left_tables":   st.ReclaimLeft,
		"reclaim_pending_bytes": st.ReclaimPendingBytes,
		// Tables passed by visiting rows, and the rows visited.
		"incremental_tables": st.Incremental,
		"visited_rows":       st.VisitedRows,
	})
}

// gcPlan: {project, instance, table, family, rule (cbt syntax)} → {cells,
// bytes, currently_cells, currently_bytes, examined, rule}.
func (a *ebbAdmin) gcPlan(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	rule, err := gcrule.Parse(str(in, "rule"))
	if err != nil {
		return nil, toStatus(err)
	}
	pr, err := a.s.collector.Plan(ctx, inst, str(in, "table"), str(in, "family"), rule)
	if err != nil {
		return nil, toStatus(err)
	}
	return structpb.NewStruct(map[string]any{
		"cells":           pr.Cells,
		"bytes":           pr.Bytes,
		"currently_cells": pr.CurrentlyCells,
		"currently_bytes": pr.CurrentlyBytes,
		"examined":        pr.Examined,
		"rule":            rule.String(),
	})
}

// gcStatus: {project, instance} → {interval_seconds, visibility,
// last_pass_started, last_pass_seconds, tables: [{table, families: [{name,
// rule, age_cutoff (RFC 3339, families with an age term once swept)}],
// last_pass, examined, collected, collected_bytes, debt_cells,
// debt_bytes, debt_oldest_seconds, logical_bytes, disk_bytes,
// reclaimed_bytes, reclaim_pending_bytes}]}.
func (a *ebbAdmin) gcStatus(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	sts, last := a.s.collector.Status(inst)
	cuts, err := a.s.collector.AgeCutoffs(inst)
	if err != nil {
		return nil, toStatus(err)
	}
	cutoff := map[string]int64{}
	for _, c := range cuts {
		cutoff[c.Instance+"\x00"+c.Table+"\x00"+c.Family] = c.Cutoff
	}
	var tables []any
	for _, st := range sts {
		var fams []any
		if m, err := a.s.engine.Table(st.Instance, st.Table); err == nil {
			for _, f := range m.Families {
				fam := map[string]any{"name": f.Name, "rule": f.GC.String()}
				// age_cutoff: how far this cluster has collected by age
				// (docs/replication.md, "GC across clusters").
				if c, ok := cutoff[m.Instance+"\x00"+m.Name+"\x00"+f.Name]; ok {
					fam["age_cutoff"] = time.UnixMicro(c).UTC().Format(time.RFC3339Nano)
				}
				fams = append(fams, fam)
			}
		}
		// Live debt: a dry scan of the table now, bounded (debt_partial:
		// the table is larger than the bound; the figures are a floor).
		debtPartial := false
		if m, err := a.s.engine.Table(st.Instance, st.Table); err == nil {
			d, err := a.s.collector.DebtOf(ctx, m)
			if err != nil {
				return nil, toStatus(err)
			}
			st.DebtCells, st.DebtBytes, st.DebtOldest = d.Cells, d.Bytes, d.Oldest
			debtPartial = d.Partial
		}
		lastPass := ""
		if !st.LastPass.IsZero() {
			lastPass = st.LastPass.UTC().Format(time.RFC3339Nano)
		}
		tables = append(tables, map[string]any{
			"table":               st.Table,
			"families":            fams,
			"last_pass":           lastPass,
			"examined":            st.Examined,
			"collected":           st.Collected,
			"collected_bytes":     st.CollectedBytes,
			"debt_cells":          st.DebtCells,
			"debt_bytes":          st.DebtBytes,
			"debt_oldest_seconds": st.DebtOldest.Seconds(),
			"debt_partial":        debtPartial,
			"logical_bytes":       st.LogicalBytes,
			"disk_bytes":          st.DiskBytes,
			"reclaimed_bytes":     st.ReclaimedBytes,
			// Collected by the last pass but left to Pebble's compactions.
			"reclaim_pending_bytes": st.ReclaimPendingBytes,
			// The last pass's kind; the GC agenda's entries waiting (due
			// now, due later); the versions-eligible cells it found.
			"incremental":     st.Incremental,
			"visited_rows":    st.VisitedRows,
			"agenda_due":      st.AgendaDue,
			"agenda_later":    st.AgendaLater,
			"hidden_versions": st.HiddenVersions,
		})
	}
	started := ""
	if !last.Started.IsZero() {
		started = last.Started.UTC().Format(time.RFC3339Nano)
	}
	return structpb.NewStruct(map[string]any{
		"interval_seconds":  a.s.collector.Interval().Seconds(),
		"visibility":        a.s.engine.Visibility().String(),
		"last_pass_started": started,
		"last_pass_seconds": last.Duration.Seconds(),
		"tables":            tables,
		"piles_waiting":     a.s.collector.PilesWaiting(),
	})
}

// setFamilyOptions turns ebbtable's per-family options on or off; today the
// expiry-timestamp guard of the one-second expiration pattern.
func (a *ebbAdmin) setFamilyOptions(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	v, ok := in.GetFields()["expiry_timestamps"]
	if !ok {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: expiry_timestamps (true or false) is required")
	}
	on := v.GetBoolValue()
	if _, err := a.s.engine.SetExpiryTimestamps(inst, str(in, "table"), str(in, "family"), on); err != nil {
		return nil, toStatus(err)
	}
	return structpb.NewStruct(map[string]any{"table": str(in, "table"), "family": str(in, "family"), "expiry_timestamps": on})
}

// watch streams a table's change-stream records as JSON lines: from since
// ("" = now, "oldest", RFC 3339, or a duration ago) or after token, until
// until (RFC 3339; "" = until the client cancels), without the system
// transactions' records when exclude_system is true.
func (a *ebbAdmin) watch(in *structpb.Struct, stream grpc.ServerStream) error {
	excludeSystem := in.GetFields()["exclude_system"].GetBoolValue()
	return a.tail(in, stream, func(rec changestream.Record) error {
		if excludeSystem && rec.IsSystem {
			return nil
		}
		if rec.Type == changestream.User && rec.SourceCluster == "" {
			rec.SourceCluster = a.s.opts.ClusterID
		}
		line, err := rec.MarshalLine()
		if err != nil {
			return status.Errorf(codes.Internal, "ebbtable: encode record: %v", err)
		}
		return stream.SendMsg(&structpb.Struct{Fields: map[string]*structpb.Value{"line": structpb.NewStringValue(string(line))}})
	})
}

// tail positions a change-stream reader as the request asks and hands each
// record to emit until the client cancels or until passes.
func (a *ebbAdmin) tail(in *structpb.Struct, stream grpc.ServerStream, emit func(changestream.Record) error) error {
	inst, err := instanceOf(in)
	if err != nil {
		return err
	}
	ref := tableRef{instance: inst, table: str(in, "table")}
	m, err := a.s.streamedTable(ref)
	if err != nil {
		return err
	}
	r := &changeReader{s: a.s, ref: ref, m: m, hb: defaultHeartbeat}
	if tok := str(in, "token"); tok != "" {
		pos, err := changestream.ParseToken(tok)
		if err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if err := a.s.startAt(m, pos.Commit+1); err != nil {
			return err
		}
		r.lower, r.resume = changestream.After(m.ID, pos), pos
	} else {
		start, err := a.s.parseSince(m, str(in, "since"))
		if err != nil {
			return err
		}
		if err := a.s.startAt(m, start); err != nil {
			return err
		}
		r.lower, r.resume = changestream.TimeKey(m.ID, start), closedPosition(start-1)
	}
	if u := str(in, "until"); u != "" {
		t, err := time.Parse(time.RFC3339Nano, u)
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "ebbtable: until %q is not an RFC 3339 time", u)
		}
		r.end = clock.Micros(t)
	}
	r.closed = r.resume.Commit
	return r.run(stream.Context(), emit, func() error { return nil }, func() error { return nil })
}

// debugClock moves the clock of a server started with a debug clock.
func (a *ebbAdmin) debugClock(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	sh, ok := a.s.opts.Clock.(*clock.Shifted)
	if !ok {
		return nil, status.Error(codes.FailedPrecondition, "ebbtable: this server's clock cannot be moved; start it with --debug-clock")
	}
	if v := str(in, "set"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: set %q is not an RFC 3339 time", v)
		}
		if !sh.Set(t) {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: the debug clock only moves forward (it reads %s)", sh.Now().UTC().Format(time.RFC3339Nano))
		}
	}
	if v := str(in, "advance"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: advance %q is not a non-negative duration", v)
		}
		sh.Advance(d)
	}
	return structpb.NewStruct(map[string]any{"now": sh.Now().UTC().Format(time.RFC3339Nano)})
}
