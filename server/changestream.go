package server

import (
	"context"
	"math"
	"strings"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/table"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Change streams are served as one partition covering the whole table.
//
// Errors: a table without a stream is FailedPrecondition; a start time (or
// token) older than the retention horizon — max(now − retention, the time
// the stream was turned on) — is OutOfRange, as Bigtable and Spanner answer
// a start outside the retained window; a start time in the future, a bad
// token or a partition other than the whole table is InvalidArgument.

const (
	defaultHeartbeat = 5 * time.Second // the API's default
	readBatch        = 512
)

// wholeTable is the one partition: every row.
func wholeTable() *btpb.StreamPartition {
	return &btpb.StreamPartition{RowRange: &btpb.RowRange{
		StartKey: &btpb.RowRange_StartKeyClosed{StartKeyClosed: []byte{}},
		EndKey:   &btpb.RowRange_EndKeyOpen{EndKeyOpen: []byte{}},
	}}
}

func checkPartition(p *btpb.StreamPartition) error {
	rr := p.GetRowRange()
	if rr == nil {
		return nil
	}
	start, end := rr.GetStartKeyClosed(), rr.GetEndKeyOpen()
	if len(start) != 0 || len(end) != 0 || rr.GetStartKeyOpen() != nil || rr.GetEndKeyClosed() != nil {
		return status.Error(codes.InvalidArgument, "ebbtable: the change stream has one partition, the whole table (empty start and end keys); use GenerateInitialChangeStreamPartitions")
	}
	return nil
}

// streamedTable returns the table's schema if it has a change stream.
func (s *Server) streamedTable(ref tableRef) (*table.Meta, error) {
	m, err := s.engine.Table(ref.instance, ref.table)
	if err != nil {
		return nil, toStatus(err)
	}
	if m.ChangeStream == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "ebbtable: table %s has no change stream; enable one with UpdateTable (change_stream_config)", ref.table)
	}
	return m, nil
}

// startAt checks a start time against the stream's window.
func (s *Server) startAt(m *table.Meta, start int64) error {
	now := clock.Micros(s.opts.Clock.Now())
	if start > now {
		return status.Errorf(codes.InvalidArgument, "ebbtable: change stream start time %s is in the future", time.UnixMicro(start).UTC().Format(time.RFC3339Nano))
	}
	if h := m.ChangeStream.Horizon(now); start < h {
		return status.Errorf(codes.OutOfRange, "ebbtable: change stream start time %s is before the oldest retained change (%s): older records are past the retention period or predate the stream",
			time.UnixMicro(start).UTC().Format(time.RFC3339Nano), time.UnixMicro(h).UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// wholeTableStart is where a read of a table's one partition starts: the
// request's start time (checked by startAt) or its one continuation token
// (checked by tokenOK); given is false when the request names neither.
func (s *Server) wholeTableStart(m *table.Meta, req *btpb.ReadChangeStreamRequest, tokenOK func(pos changestream.Position, tok string) error) (lower []byte, resume changestream.Position, given bool, err error) {
	switch from := req.GetStartFrom().(type) {
	case *btpb.ReadChangeStreamRequest_StartTime:
		start := clock.Micros(from.StartTime.AsTime())
		if err := s.startAt(m, start); err != nil {
			return nil, resume, false, err
		}
		return changestream.TimeKey(m.ID, start), closedPosition(start - 1), true, nil
	case *btpb.ReadChangeStreamRequest_ContinuationTokens:
		toks := from.ContinuationTokens.GetTokens()
		if len(toks) != 1 {
			return nil, resume, false, status.Errorf(codes.InvalidArgument, "ebbtable: want exactly one continuation token for the one partition, got %d", len(toks))
		}
		if err := checkPartition(toks[0].GetPartition()); err != nil {
			return nil, resume, false, err
		}
		pos, err := changestream.ParseToken(toks[0].GetToken())
		if err != nil {
			return nil, resume, false, status.Error(codes.InvalidArgument, err.Error())
		}
		if err := tokenOK(pos, toks[0].GetToken()); err != nil {
			return nil, resume, false, err
		}
		return changestream.After(m.ID, pos), pos, true, nil
	}
	return nil, resume, false, nil
}

// GenerateInitialChangeStreamPartitions returns the one partition.
func (d *dataServer) GenerateInitialChangeStreamPartitions(req *btpb.GenerateInitialChangeStreamPartitionsRequest, stream btpb.Bigtable_GenerateInitialChangeStreamPartitionsServer) error {
	ref, err := parseTable(req.GetTableName())
	if err != nil {
		return toStatus(err)
	}
	if handled, err := routeStream(d, stream.Context(), ref.instance, req.GetAppProfileId(), nil,
		func(ctx context.Context, c btpb.BigtableClient) (recver[btpb.GenerateInitialChangeStreamPartitionsResponse], error) {
			return c.GenerateInitialChangeStreamPartitions(ctx, req)
		}, stream.Send); handled {
		return err
	}
	if _, err := d.s.streamedTable(ref); err != nil {
		return err
	}
	return stream.Send(&btpb.GenerateInitialChangeStreamPartitionsResponse{Partition: wholeTable()})
}

// changeReader walks a table's stream for one call.
type changeReader struct {
	s     *Server
	ref   tableRef
	m     *table.Meta
	lower []byte // key to read on from
	// resume is the position a continuation token gives: everything at or
	// before it has been delivered (or skipped by the start time).
	resume changestream.Position
	end    int64 // inclusive end time, 0 = none
	hb     time.Duration
	// closed is the closed timestamp of the last read that reached the end
	// of what was committed.
	closed int64
}

// closedPosition is the position just past every record at commit ts.
func closedPosition(ts int64) changestream.Position {
	return changestream.Position{Commit: ts, Tiebreaker: -1, Index: math.MaxUint32}
}

// run delivers records in commit order to onRecord (which may drop one;
// the position still advances) until the end time (onEnd), an error, the
// client's cancel or the server's shutdown. Between records it calls
// onHeartbeat every hb. It waits on the engine's notify channel, which any
// recorded commit of any table closes, or on a timer of the injected clock:
// never a busy loop.
func (r *changeReader) run(ctx context.Context, onRecord func(changestream.Record) error, onHeartbeat func() error, onEnd func() error) error {
	clk := r.s.opts.Clock
	nextBeat := clk.Now().Add(r.hb)
	for {
		if err := ctx.Err(); err != nil {
			return toStatus(err)
		}
		notify := r.s.engine.ChangesNotify()
		m, err := r.s.streamedTable(r.ref)
		if err != nil {
			return err
		}
		if m.ID != r.m.ID {
			return status.Errorf(codes.NotFound, "ebbtable: table %s was deleted", r.ref.table)
		}
		b, err := r.s.engine.ReadChanges(m, r.lower, readBatch)
		if err != nil {
			return toStatus(err)
		}
		for _, rec := range b.Records {
			if r.end > 0 && rec.Commit > r.end {
				return onEnd()
			}
			if err := onRecord(rec); err != nil {
				return err
			}
			r.resume = rec.Position
			r.lower = changestream.After(m.ID, rec.Position)
		}
		if b.Full {
			continue
		}
		if b.Closed > r.closed {
			r.closed = b.Closed
		}
		if cp := closedPosition(r.closed); r.resume.Less(cp) {
			r.resume = cp
			r.lower = changestream.After(m.ID, cp)
		}
		if r.end > 0 && r.closed >= r.end {
			return onEnd()
		}
		now := clk.Now()
		if !now.Before(nextBeat) {
			if err := onHeartbeat(); err != nil {
				return err
			}
			nextBeat = now.Add(r.hb)
		}
		wait := nextBeat.Sub(now)
		if r.end > 0 {
			if untilEnd := time.UnixMicro(r.end + 1).Sub(now); untilEnd < wait {
				wait = max(untilEnd, time.Millisecond)
			}
		}
		// A commit usually wakes the stream first: stop the timer then,
		// or each wake leaves one pending on a fake clock.
		timer, stop := clock.Timer(clk, wait)
		select {
		case <-ctx.Done():
			stop()
			return toStatus(ctx.Err())
		case <-r.s.stopping:
			stop()
			return status.Error(codes.Unavailable, "ebbtable: server shutting down; resume from the last token")
		case <-notify:
		case <-timer:
		}
		stop()
	}
}

// ReadChangeStream streams a table's changes from a start time or a
// continuation token, with heartbeats, until end_time or the client cancels.
func (d *dataServer) ReadChangeStream(req *btpb.ReadChangeStreamRequest, stream btpb.Bigtable_ReadChangeStreamServer) error {
	ref, err := parseTable(req.GetTableName())
	if err != nil {
		return toStatus(err)
	}
	if handled, err := routeStream(d, stream.Context(), ref.instance, req.GetAppProfileId(), nil,
		func(ctx context.Context, c btpb.BigtableClient) (recver[btpb.ReadChangeStreamResponse], error) {
			return c.ReadChangeStream(ctx, req)
		}, stream.Send); handled {
		return err
	}
	m, err := d.s.streamedTable(ref)
	if err != nil {
		return err
	}
	if err := checkPartition(req.GetPartition()); err != nil {
		return err
	}
	r := &changeReader{s: d.s, ref: ref, m: m, hb: defaultHeartbeat}
	if hb := req.GetHeartbeatDuration(); hb != nil {
		if !hb.IsValid() || hb.AsDuration() <= 0 {
			return status.Error(codes.InvalidArgument, "ebbtable: heartbeat_duration must be positive")
		}
		r.hb = hb.AsDuration()
	}
	if et := req.GetEndTime(); et != nil {
		r.end = clock.Micros(et.AsTime())
	}
	now := clock.Micros(d.s.opts.Clock.Now())
	var given bool
	r.lower, r.resume, given, err = d.s.wholeTableStart(m, req, func(pos changestream.Position, tok string) error {
		if pos.Commit+1 < m.ChangeStream.Horizon(now) {
			return status.Errorf(codes.OutOfRange, "ebbtable: continuation token %q points before the oldest retained change", tok)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !given {
		r.lower = changestream.TimeKey(m.ID, now)
		r.resume = closedPosition(now - 1)
	}
	r.closed = r.resume.Commit
	token := func() *btpb.StreamContinuationToken {
		return &btpb.StreamContinuationToken{Partition: wholeTable(), Token: r.resume.Token()}
	}
	return r.run(stream.Context(),
		func(rec changestream.Record) error {
			for _, dc := range d.dataChanges(rec) {
				if err := stream.Send(&btpb.ReadChangeStreamResponse{StreamRecord: &btpb.ReadChangeStreamResponse_DataChange_{DataChange: dc}}); err != nil {
					return err
				}
			}
			return nil
		},
		func() error {
			return stream.Send(&btpb.ReadChangeStreamResponse{StreamRecord: &btpb.ReadChangeStreamResponse_Heartbeat_{
				Heartbeat: &btpb.ReadChangeStreamResponse_Heartbeat{
					ContinuationToken:     token(),
					EstimatedLowWatermark: timestamppb.New(time.UnixMicro(r.closed)),
				}}})
		},
		func() error {
			return stream.Send(&btpb.ReadChangeStreamResponse{StreamRecord: &btpb.ReadChangeStreamResponse_CloseStream_{
				CloseStream: &btpb.ReadChangeStreamResponse_CloseStream{Status: &rpcstatus.Status{Code: int32(codes.OK)}}}})
		})
}

// maxChangeMessage is the size at which a DataChange is continued in
// another message; SetCell values longer than maxChunkValue are split.
const maxChangeMessage = 1 << 20

// dataChanges renders a record as the API's DataChange: one message, or a
// sequence when its mods are large — the first message carries the row key
// and commit details, the others type CONTINUATION and chunks only, the last
// done, the token and the low watermark. A SetCell value over maxChunkValue
// is split into chunks with ChunkInfo, delivered contiguously.
func (d *dataServer) dataChanges(rec changestream.Record) []*btpb.ReadChangeStreamResponse_DataChange {
	first := &btpb.ReadChangeStreamResponse_DataChange{
		Type:            btpb.ReadChangeStreamResponse_DataChange_USER,
		RowKey:          rec.RowKey,
		CommitTimestamp: timestamppb.New(time.UnixMicro(rec.Commit)),
		Tiebreaker:      rec.Tiebreaker,
	}
	if rec.Type == changestream.GarbageCollection {
		first.Type = btpb.ReadChangeStreamResponse_DataChange_GARBAGE_COLLECTION
		// Local collections have no source cluster; a versions collection
		// replicated from the GC leader names it.
		first.SourceClusterId = rec.SourceCluster
	} else {
		first.SourceClusterId = rec.SourceCluster
		if first.SourceClusterId == "" {
			first.SourceClusterId = d.s.opts.ClusterID
		}
	}
	out := []*btpb.ReadChangeStreamResponse_DataChange{first}
	cur, size := first, len(rec.RowKey)
	add := func(c *btpb.ReadChangeStreamResponse_MutationChunk, n int) {
		if size > 0 && size+n > maxChangeMessage {
			cur = &btpb.ReadChangeStreamResponse_DataChange{Type: btpb.ReadChangeStreamResponse_DataChange_CONTINUATION}
			out = append(out, cur)
			size = 0
		}
		cur.Chunks = append(cur.Chunks, c)
		size += n
	}
	for _, mod := range rec.Mods {
		n := len(mod.Family) + len(mod.Qualifier) + 32
		if mod.Kind != changestream.SetCell || len(mod.Value) <= maxChunkValue {
			add(&btpb.ReadChangeStreamResponse_MutationChunk{Mutation: modToProto(mod)}, n+len(mod.Value))
			continue
		}
		for off := 0; off < len(mod.Value); off += maxChunkValue {
			piece := mod
			piece.Value = mod.Value[off:min(off+maxChunkValue, len(mod.Value))]
			add(&btpb.ReadChangeStreamResponse_MutationChunk{
				ChunkInfo: &btpb.ReadChangeStreamResponse_MutationChunk_ChunkInfo{
					ChunkedValueSize:   int32(len(mod.Value)),
					ChunkedValueOffset: int32(off),
					LastChunk:          off+maxChunkValue >= len(mod.Value),
				},
				Mutation: modToProto(piece),
			}, n+len(piece.Value))
		}
	}
	last := out[len(out)-1]
	last.Done = true
	last.Token = rec.Position.Token()
	last.EstimatedLowWatermark = timestamppb.New(time.UnixMicro(rec.Commit))
	return out
}

func modToProto(m changestream.Mod) *btpb.Mutation {
	switch m.Kind {
	case changestream.SetCell:
		return &btpb.Mutation{Mutation: &btpb.Mutation_SetCell_{SetCell: &btpb.Mutation_SetCell{
			FamilyName: m.Family, ColumnQualifier: m.Qualifier, TimestampMicros: m.Timestamp, Value: m.Value}}}
	case changestream.DeleteFromColumn:
		return &btpb.Mutation{Mutation: &btpb.Mutation_DeleteFromColumn_{DeleteFromColumn: &btpb.Mutation_DeleteFromColumn{
			FamilyName: m.Family, ColumnQualifier: m.Qualifier,
			TimeRange: &btpb.TimestampRange{StartTimestampMicros: m.StartTS, EndTimestampMicros: m.EndTS}}}}
	case changestream.DeleteFromFamily:
		return &btpb.Mutation{Mutation: &btpb.Mutation_DeleteFromFamily_{DeleteFromFamily: &btpb.Mutation_DeleteFromFamily{FamilyName: m.Family}}}
	}
	return &btpb.Mutation{Mutation: &btpb.Mutation_DeleteFromRow_{DeleteFromRow: &btpb.Mutation_DeleteFromRow{}}}
}

// parseSince reads a watch start: "" (now), "oldest" (the retention
// horizon), an RFC 3339 time, or a duration ago ("15m").
func (s *Server) parseSince(m *table.Meta, v string) (int64, error) {
	now := s.opts.Clock.Now()
	switch strings.TrimSpace(v) {
	case "", "now":
		return clock.Micros(now), nil
	case "oldest":
		return m.ChangeStream.Horizon(clock.Micros(now)), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return clock.Micros(t), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return clock.Micros(now.Add(-d)), nil
	}
	return 0, status.Errorf(codes.InvalidArgument, "ebbtable: %q is neither an RFC 3339 time, a duration ago (15m), 'now' nor 'oldest'", v)
}
