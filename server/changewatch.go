package server

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// EbbAdmin/Watch of one change-stream partition (WatchRequest.partition):
// the Data API's ReadChangeStream, with the same partitions, tokens,
// heartbeats and closes, whose records are ebbtable's JSON lines (they
// carry what a DataChange has no field for: the reason, the transaction
// tag, the system flag). `ebbtable watch` reads every partition of the
// table this way and merges them (package changestream/merge; the web
// console's change tail does too, consolechanges.go). In cluster mode the
// partition is read on its tablet's owner (clusterchanges.go); on one node
// the one partition is the whole table.

// watchLine renders a record as Watch prints it.
func (a *ebbAdmin) watchLine(rec changestream.Record) (string, error) {
	if rec.Type == changestream.User && rec.SourceCluster == "" {
		rec.SourceCluster = a.s.opts.ClusterID
	}
	line, err := rec.MarshalLine()
	if err != nil {
		return "", status.Errorf(codes.Internal, "ebbtable: encode record: %v", err)
	}
	return string(line), nil
}

func watchRange(p *ebbadminpb.WatchPartition) tablets.Range {
	r := tablets.Range{Start: p.GetStartKey(), End: p.GetEndKey()}
	if r.Start == nil {
		r.Start = []byte{}
	}
	return r
}

func toWatchPartition(p *btpb.StreamPartition) *ebbadminpb.WatchPartition {
	r := partitionRange(p)
	return &ebbadminpb.WatchPartition{StartKey: r.Start, EndKey: r.End}
}

// watchPartition serves a Watch with a partition.
func (a *ebbAdmin) watchPartition(in *ebbadminpb.WatchRequest, stream grpc.ServerStreamingServer[ebbadminpb.WatchResponse]) error {
	ctx := stream.Context()
	ref, m, err := a.watchedTable(in)
	if err != nil {
		return err
	}
	part := watchRange(in.GetPartition())
	req := &btpb.ReadChangeStreamRequest{TableName: ref.name(), Partition: streamPartition(part)}
	switch hb := in.GetHeartbeatMillis(); {
	case hb < 0:
		return status.Error(codes.InvalidArgument, "ebbtable: heartbeat_millis must not be negative")
	case hb > 0:
		req.HeartbeatDuration = durationpb.New(time.Duration(hb) * time.Millisecond)
	}
	if u := in.GetUntil(); u != "" {
		t, err := time.Parse(time.RFC3339Nano, u)
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "ebbtable: until %q is not an RFC 3339 time", u)
		}
		req.EndTime = timestamppb.New(t)
	}
	switch {
	case len(in.GetTokens()) > 0 || in.GetToken() != "":
		if in.GetSince() != "" || (len(in.GetTokens()) > 0 && in.GetToken() != "") {
			return status.Error(codes.InvalidArgument, "ebbtable: since, token and tokens exclude each other")
		}
		toks := &btpb.StreamContinuationTokens{}
		for _, t := range in.GetTokens() {
			toks.Tokens = append(toks.Tokens, &btpb.StreamContinuationToken{Partition: streamPartition(watchRange(t.GetPartition())), Token: t.GetToken()})
		}
		if tok := in.GetToken(); tok != "" { // after this record, for the whole partition
			toks.Tokens = append(toks.Tokens, &btpb.StreamContinuationToken{Partition: req.Partition, Token: tok})
		}
		req.StartFrom = &btpb.ReadChangeStreamRequest_ContinuationTokens{ContinuationTokens: toks}
	default:
		start, err := a.s.parseSince(m, in.GetSince())
		if err != nil {
			return err
		}
		req.StartFrom = &btpb.ReadChangeStreamRequest_StartTime{StartTime: timestamppb.New(time.UnixMicro(start))}
		// A forwarded call starts where this node placed it, not at the
		// owner's "now"; "oldest" stays the owner's oldest (each node
		// turned the stream on when it learned of it, a few ms apart).
		if strings.TrimSpace(in.GetSince()) != "oldest" {
			in = proto.Clone(in).(*ebbadminpb.WatchRequest)
			in.Since = time.UnixMicro(start).UTC().Format(time.RFC3339Nano)
		}
	}
	out := watchSink{a: a, stream: stream, excludeSystem: in.GetExcludeSystem()}
	if a.s.cluster != nil {
		x := &clusterData{dataServer: &dataServer{s: a.s}, c: a.s.cluster}
		handled, err := x.readPartition(ctx, req, out, func(ctx context.Context, cc *grpc.ClientConn) error {
			fw, err := ebbadminpb.NewEbbAdminClient(cc).Watch(ctx, in)
			if err != nil {
				return err
			}
			for {
				resp, err := fw.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if err := stream.Send(resp); err != nil {
					return err
				}
			}
		})
		if handled {
			return err
		}
	}
	return a.watchWholeTable(ctx, req, ref, m, out)
}

// watchWholeTable serves the one partition of a table on one node.
func (a *ebbAdmin) watchWholeTable(ctx context.Context, req *btpb.ReadChangeStreamRequest, ref tableRef, m *table.Meta, out watchSink) error {
	if err := checkPartition(req.GetPartition()); err != nil {
		return err
	}
	r := &changeReader{s: a.s, ref: ref, m: m, hb: defaultHeartbeat}
	if hb := req.GetHeartbeatDuration(); hb != nil {
		r.hb = hb.AsDuration()
	}
	if et := req.GetEndTime(); et != nil {
		r.end = clock.Micros(et.AsTime())
	}
	var err error
	r.lower, r.resume, _, err = a.s.wholeTableStart(m, req, func(pos changestream.Position, _ string) error {
		return a.s.startAt(m, pos.Commit+1)
	})
	if err != nil {
		return err
	}
	r.closed = r.resume.Commit
	whole := tablets.Range{Start: []byte{}}
	state := func() csState { return csState{{r: whole, pos: r.resume}} }
	return r.run(ctx,
		func(rec changestream.Record) error {
			return out.record(rec, whole, csState{{r: whole, pos: rec.Position}})
		},
		func() error { return out.heartbeat(whole, state(), r.closed) },
		func() error { return out.closeStream(&btpb.ReadChangeStreamResponse_CloseStream{}) })
}

// watchSink sends a partition's stream as Watch responses.
type watchSink struct {
	a             *ebbAdmin
	stream        grpc.ServerStreamingServer[ebbadminpb.WatchResponse]
	excludeSystem bool
}

func (o watchSink) record(rec changestream.Record, _ tablets.Range, st csState) error {
	if o.excludeSystem && rec.IsSystem {
		return nil // the next heartbeat carries the position past it
	}
	line, err := o.a.watchLine(rec)
	if err != nil {
		return err
	}
	return o.stream.Send(&ebbadminpb.WatchResponse{Line: line, Token: st.token(), ReadTo: st.min().Token()})
}

func (o watchSink) heartbeat(_ tablets.Range, st csState, _ int64) error {
	return o.stream.Send(&ebbadminpb.WatchResponse{Heartbeat: true, Token: st.token(), ReadTo: st.min().Token()})
}

func (o watchSink) closeStream(cl *btpb.ReadChangeStreamResponse_CloseStream) error {
	if c := codes.Code(cl.GetStatus().GetCode()); c != codes.OK {
		return status.Error(c, cl.GetStatus().GetMessage())
	}
	wc := &ebbadminpb.WatchClose{}
	for _, p := range cl.GetNewPartitions() {
		wc.NewPartitions = append(wc.NewPartitions, toWatchPartition(p))
	}
	for _, t := range cl.GetContinuationTokens() {
		wc.Tokens = append(wc.Tokens, &ebbadminpb.WatchToken{Partition: toWatchPartition(t.GetPartition()), Token: t.GetToken()})
	}
	return o.stream.Send(&ebbadminpb.WatchResponse{Close: wc})
}
