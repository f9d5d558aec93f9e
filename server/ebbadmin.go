package server

import (
	"context"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/collector"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// EbbAdminService is the full name of ebbtable's own admin service, served on
// the same port as the Bigtable APIs. Its messages and service descriptor
// are package ebbadminpb, generated from proto/ebbtable/admin/v1/admin.proto;
// the cli package and peer clusters are its clients.
const EbbAdminService = "ebbtable.admin.v1.EbbAdmin"

// Method names of EbbAdminService.
const (
	MethodGCRun            = ebbadminpb.EbbAdmin_GcRun_FullMethodName
	MethodGCPlan           = ebbadminpb.EbbAdmin_GcPlan_FullMethodName
	MethodGCStatus         = ebbadminpb.EbbAdmin_GcStatus_FullMethodName
	MethodSetFamilyOptions = ebbadminpb.EbbAdmin_SetFamilyOptions_FullMethodName
	// MethodDebugClock moves a server's clock, if it was started with
	// --debug-clock.
	MethodDebugClock = ebbadminpb.EbbAdmin_DebugClock_FullMethodName
	// MethodWatch streams a table's change stream, each line one record in
	// changestream's JSON encoding.
	MethodWatch = ebbadminpb.EbbAdmin_Watch_FullMethodName
)

// ebbAdmin serves EbbAdminService; its methods are spread over the files of
// the features they drive (ddl.go, raise.go, diff.go, replication.go, …).
type ebbAdmin struct {
	ebbadminpb.UnimplementedEbbAdminServer
	s *Server
}

// instanceRequest is a request about an instance: every EbbAdmin request
// with project and instance fields.
type instanceRequest interface {
	GetProject() string
	GetInstance() string
}

// isAdminMessage says whether m is one of EbbAdminService's messages.
func isAdminMessage(m proto.Message) bool {
	return m.ProtoReflect().Descriptor().ParentFile().Package() == "ebbtable.admin.v1"
}

func instanceOf(in instanceRequest) (string, error) {
	p, i := in.GetProject(), in.GetInstance()
	if p == "" || i == "" {
		return "", status.Error(codes.InvalidArgument, "ebbtable: project and instance are required")
	}
	return "projects/" + p + "/instances/" + i, nil
}

// GcRun runs a pass now and returns when its deletions are durable and its
// reclaim compactions are done.
func (a *ebbAdmin) GcRun(ctx context.Context, in *ebbadminpb.GcRunRequest) (*ebbadminpb.GcRunResponse, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	ctx, op := a.s.trackProgress(ctx)
	defer op.Finish()
	st, err := a.s.collector.RunPass(ctx, collector.Selector{Instance: inst, Table: in.GetTable()})
	if err != nil {
		return nil, toStatus(err)
	}
	return &ebbadminpb.GcRunResponse{
		Tables:          int64(st.Tables),
		Examined:        int64(st.Examined),
		Collected:       int64(st.Collected),
		CollectedBytes:  int64(st.CollectedBytes),
		DurationSeconds: st.Duration.Seconds(),
		SweepSeconds:    st.Sweep.Seconds(),
		ReclaimSeconds:  st.Compaction.Seconds(),
		ReclaimedBytes:  int64(st.ReclaimedBytes),
		// Tables with collected bytes too few or too sparse to compact for,
		// and those bytes (left to Pebble's compactions).
		ReclaimLeftTables:   int64(st.ReclaimLeft),
		ReclaimPendingBytes: int64(st.ReclaimPendingBytes),
		// Tables passed by visiting rows, and the rows visited.
		IncrementalTables: int64(st.Incremental),
		VisitedRows:       int64(st.VisitedRows),
		// Obsolete files not deleted yet when the pass returned.
		ReclaimDeletingBytes: st.ReclaimDeletingBytes,
	}, nil
}

// GcPlan counts what a rule (cbt syntax) would make eligible.
func (a *ebbAdmin) GcPlan(ctx context.Context, in *ebbadminpb.GcPlanRequest) (*ebbadminpb.GcPlanResponse, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	rule, err := gcrule.Parse(in.GetRule())
	if err != nil {
		return nil, toStatus(err)
	}
	pr, err := a.s.collector.Plan(ctx, inst, in.GetTable(), in.GetFamily(), rule)
	if err != nil {
		return nil, toStatus(err)
	}
	return &ebbadminpb.GcPlanResponse{
		Cells:          int64(pr.Cells),
		Bytes:          int64(pr.Bytes),
		CurrentlyCells: int64(pr.CurrentlyCells),
		CurrentlyBytes: int64(pr.CurrentlyBytes),
		Examined:       int64(pr.Examined),
		Rule:           rule.String(),
	}, nil
}

// GcStatus reports the collector's state and each table's figures.
func (a *ebbAdmin) GcStatus(ctx context.Context, in *ebbadminpb.GcStatusRequest) (*ebbadminpb.GcStatusResponse, error) {
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
	out := &ebbadminpb.GcStatusResponse{
		IntervalSeconds: a.s.collector.Interval().Seconds(),
		Visibility:      a.s.engine.Visibility().String(),
		LastPassStarted: rfc3339(last.Started),
		LastPassSeconds: last.Duration.Seconds(),
		PilesWaiting:    int64(a.s.collector.PilesWaiting()),
	}
	for _, st := range sts {
		var fams []*ebbadminpb.GcFamilyStatus
		if m, err := a.s.engine.Table(st.Instance, st.Table); err == nil {
			for _, f := range m.Families {
				fam := &ebbadminpb.GcFamilyStatus{Name: f.Name, Rule: f.GC.String()}
				// age_cutoff: how far this cluster has collected by age
				// (docs/replication.md, "GC across clusters").
				if c, ok := cutoff[m.Instance+"\x00"+m.Name+"\x00"+f.Name]; ok {
					fam.AgeCutoff = proto.String(time.UnixMicro(c).UTC().Format(time.RFC3339Nano))
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
		out.Tables = append(out.Tables, &ebbadminpb.GcTableStatus{
			Table:             st.Table,
			Families:          fams,
			LastPass:          rfc3339(st.LastPass),
			Examined:          int64(st.Examined),
			Collected:         int64(st.Collected),
			CollectedBytes:    int64(st.CollectedBytes),
			DebtCells:         int64(st.DebtCells),
			DebtBytes:         int64(st.DebtBytes),
			DebtOldestSeconds: st.DebtOldest.Seconds(),
			LogicalBytes:      int64(st.LogicalBytes),
			DiskBytes:         int64(st.DiskBytes),
			ReclaimedBytes:    int64(st.ReclaimedBytes),
			// Collected by the last pass but left to Pebble's compactions.
			ReclaimPendingBytes:  int64(st.ReclaimPendingBytes),
			ReclaimDeletingBytes: st.ReclaimDeletingBytes,
			// The last pass's kind; the GC agenda's entries waiting (due
			// now, due later); the versions-eligible cells it found.
			Incremental:    st.Incremental,
			VisitedRows:    int64(st.VisitedRows),
			AgendaDue:      int64(st.AgendaDue),
			AgendaLater:    int64(st.AgendaLater),
			HiddenVersions: int64(st.HiddenVersions),
			DebtPartial:    debtPartial,
		})
	}
	return out, nil
}

// setFamilyOptions turns ebbtable's per-family options on or off; today the
// expiry-timestamp guard of the one-second expiration pattern.
func (a *ebbAdmin) SetFamilyOptions(ctx context.Context, in *ebbadminpb.SetFamilyOptionsRequest) (*ebbadminpb.SetFamilyOptionsResponse, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return nil, err
	}
	if in.ExpiryTimestamps == nil {
		return nil, status.Error(codes.InvalidArgument, "ebbtable: expiry_timestamps (true or false) is required")
	}
	on := in.GetExpiryTimestamps()
	if _, err := a.s.engine.SetExpiryTimestamps(inst, in.GetTable(), in.GetFamily(), on); err != nil {
		return nil, toStatus(err)
	}
	return &ebbadminpb.SetFamilyOptionsResponse{Table: in.GetTable(), Family: in.GetFamily(), ExpiryTimestamps: on}, nil
}

// watch streams a table's change-stream records as JSON lines: from since
// ("" = now, "oldest", RFC 3339, or a duration ago) or after token, until
// until (RFC 3339; "" = until the client cancels), without the system
// transactions' records when exclude_system is true.
// With a partition it reads that change-stream partition (changewatch.go).
func (a *ebbAdmin) Watch(in *ebbadminpb.WatchRequest, stream grpc.ServerStreamingServer[ebbadminpb.WatchResponse]) error {
	if in.GetPartition() != nil {
		return a.watchPartition(in, stream)
	}
	excludeSystem := in.GetExcludeSystem()
	return a.tail(in, stream, func(rec changestream.Record) error {
		if excludeSystem && rec.IsSystem {
			return nil
		}
		line, err := a.watchLine(rec)
		if err != nil {
			return err
		}
		return stream.Send(&ebbadminpb.WatchResponse{Line: line})
	})
}

// watchedTable is the table a Watch names, its change stream on.
func (a *ebbAdmin) watchedTable(in *ebbadminpb.WatchRequest) (tableRef, *table.Meta, error) {
	inst, err := instanceOf(in)
	if err != nil {
		return tableRef{}, nil, err
	}
	ref := tableRef{instance: inst, table: in.GetTable()}
	m, err := a.s.streamedTable(ref)
	return ref, m, err
}

// tail positions a change-stream reader as the request asks and hands each
// record to emit until the client cancels or until passes.
func (a *ebbAdmin) tail(in *ebbadminpb.WatchRequest, stream grpc.ServerStream, emit func(changestream.Record) error) error {
	ref, m, err := a.watchedTable(in)
	if err != nil {
		return err
	}
	r := &changeReader{s: a.s, ref: ref, m: m, hb: defaultHeartbeat}
	if tok := in.GetToken(); tok != "" {
		pos, err := changestream.ParseToken(tok)
		if err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if err := a.s.startAt(m, pos.Commit+1); err != nil {
			return err
		}
		r.lower, r.resume = changestream.After(m.ID, pos), pos
	} else {
		start, err := a.s.parseSince(m, in.GetSince())
		if err != nil {
			return err
		}
		if err := a.s.startAt(m, start); err != nil {
			return err
		}
		r.lower, r.resume = changestream.TimeKey(m.ID, start), closedPosition(start-1)
	}
	if u := in.GetUntil(); u != "" {
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
func (a *ebbAdmin) DebugClock(ctx context.Context, in *ebbadminpb.DebugClockRequest) (*ebbadminpb.DebugClockResponse, error) {
	sh, ok := a.s.opts.Clock.(*clock.Shifted)
	if !ok {
		return nil, status.Error(codes.FailedPrecondition, "ebbtable: this server's clock cannot be moved; start it with --debug-clock")
	}
	if v := in.GetSet(); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: set %q is not an RFC 3339 time", v)
		}
		if !sh.Set(t) {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: the debug clock only moves forward (it reads %s)", sh.Now().UTC().Format(time.RFC3339Nano))
		}
	}
	if v := in.GetAdvance(); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "ebbtable: advance %q is not a non-negative duration", v)
		}
		sh.Advance(d)
	}
	return &ebbadminpb.DebugClockResponse{Now: sh.Now().UTC().Format(time.RFC3339Nano)}, nil
}
