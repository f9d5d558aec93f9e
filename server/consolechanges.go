package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/changestream/merge"
	"github.com/ebbtable/ebbtable/console"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The web console's change tail in cluster mode: the records of every
// tablet, each partition read where its tablet is served (Watch with a
// partition, changewatch.go, in process) and merged in commit order by
// package changestream/merge, as `ebbtable watch` does over gRPC.

// consoleTailRetryFor bounds how long one poll retries a partition whose
// tablet is between owners.
const consoleTailRetryFor = 10 * time.Second

// errTailFull stops a poll's merge once it holds a batch.
var errTailFull = errors.New("tail batch full")

// consoleChanges implements console.ChangeTail.
func (s *Server) consoleChanges(ctx context.Context, m *table.Meta, q console.TailQuery) (console.TailBatch, error) {
	ref := tableRef{instance: m.Instance, table: m.Name}
	project, instance, ok := splitInstance(m.Instance)
	if !ok {
		return console.TailBatch{}, fmt.Errorf("bad instance name %q", m.Instance)
	}
	src := &consoleSource{a: &ebbAdmin{s: s}, ref: ref, req: &ebbadminpb.WatchRequest{
		Project: project, Instance: instance, Table: m.Name,
		Until: time.UnixMicro(q.Until).UTC().Format(time.RFC3339Nano), HeartbeatMillis: 500,
	}}
	o := merge.Options{Token: q.After, RetryFor: consoleTailRetryFor, Clock: s.opts.Clock,
		Retry: func(err error) bool {
			c := status.Code(err)
			return c == codes.Unavailable || c == codes.Aborted
		}}
	if q.After == "" {
		o.Since = time.UnixMicro(q.From).UTC().Format(time.RFC3339Nano)
	}
	var b console.TailBatch
	err := merge.Run(ctx, src, o, func(line string, pos changestream.Position) error {
		// The line is the record's JSON encoding already: no decoding
		// and encoding again on its way to the page.
		b.Records = append(b.Records, json.RawMessage(line))
		b.Last = pos.Token()
		if b.First == "" {
			b.First = b.Last
		}
		if len(b.Records) >= q.Limit {
			return errTailFull
		}
		return nil
	})
	if errors.Is(err, errTailFull) {
		b.Full, err = true, nil
	}
	return b, statusText(err)
}

// consoleSource is the merge's source in process: the table's tablets from
// the cluster's directory (the whole table outside a cluster), each read
// by Watch with a partition on this node, which forwards it to the
// tablet's owner.
type consoleSource struct {
	a   *ebbAdmin
	ref tableRef
	req *ebbadminpb.WatchRequest // the fields every partition's call shares
}

func (c *consoleSource) Partitions(ctx context.Context) ([]merge.Range, error) {
	if cm := c.a.s.cluster; cm != nil {
		if d, ok := cm.directory(ctx, c.ref); ok {
			var out []merge.Range
			for _, t := range d.Tablets {
				out = append(out, merge.Range{Start: t.Start, End: t.End})
			}
			return out, nil
		}
	}
	return []merge.Range{{}}, nil
}

func (c *consoleSource) Watch(ctx context.Context, part merge.Range, from merge.Start) (merge.Stream, error) {
	req := proto.Clone(c.req).(*ebbadminpb.WatchRequest)
	req.Partition, req.Since, req.Token, req.Tokens = WatchPartitionFor(part), from.Since, from.Token, WatchTokensFor(from.Tokens)
	st := c.serve(ctx, req)
	if from.Since == "" {
		return st, nil
	}
	// A start before the owner's oldest retained record (the stream is
	// younger than the tail's window there: each node turned it on when
	// it learned of the table) starts at the owner's oldest instead.
	return &sinceStream{st: st, retry: func() *localWatchStream {
		req := proto.Clone(req).(*ebbadminpb.WatchRequest)
		req.Since = "oldest"
		return c.serve(ctx, req)
	}}, nil
}

// serve runs a Watch in process.
func (c *consoleSource) serve(ctx context.Context, req *ebbadminpb.WatchRequest) *localWatchStream {
	st := &localWatchStream{ctx: ctx, ch: make(chan *ebbadminpb.WatchResponse), done: make(chan struct{}), lines: &c.a.s.consoleTailLines}
	go func() {
		st.err = c.a.watchPartition(req, st)
		close(st.done)
	}()
	return st
}

// sinceStream is a stream started at a time that, failing at once with
// OutOfRange, starts again with retry.
type sinceStream struct {
	st    *localWatchStream
	retry func() *localWatchStream
	got   bool
}

func (s *sinceStream) Recv() (*merge.Response, error) {
	r, err := s.st.Recv()
	if err != nil && !s.got && s.retry != nil && status.Code(err) == codes.OutOfRange {
		s.st, s.retry = s.retry(), nil
		return s.Recv()
	}
	s.got = s.got || err == nil
	return r, err
}

// localWatchStream carries a Watch served in process to its reader.
type localWatchStream struct {
	grpc.ServerStream // nil: only the methods below are used
	ctx               context.Context
	ch                chan *ebbadminpb.WatchResponse
	done              chan struct{}
	err               error         // set before done is closed
	lines             *atomic.Int64 // the server's consoleTailLines
}

func (l *localWatchStream) Context() context.Context     { return l.ctx }
func (l *localWatchStream) SetHeader(metadata.MD) error  { return nil }
func (l *localWatchStream) SendHeader(metadata.MD) error { return nil }
func (l *localWatchStream) SetTrailer(metadata.MD)       {}
func (l *localWatchStream) SendMsg(m any) error {
	r, ok := m.(*ebbadminpb.WatchResponse)
	if !ok {
		return status.Errorf(codes.Internal, "ebbtable: unexpected watch response %T", m)
	}
	return l.Send(r)
}

func (l *localWatchStream) Send(r *ebbadminpb.WatchResponse) error {
	select {
	case l.ch <- r:
		return nil
	case <-l.ctx.Done():
		return toStatus(l.ctx.Err())
	}
}

func (l *localWatchStream) Recv() (*merge.Response, error) {
	select {
	case r := <-l.ch:
		if r.GetLine() != "" {
			l.lines.Add(1)
		}
		return MergeResponse(r), nil
	case <-l.done:
		if l.err != nil {
			return nil, l.err
		}
		return nil, io.EOF
	}
}

// WatchPartitionFor is a merge range as a Watch partition.
func WatchPartitionFor(r merge.Range) *ebbadminpb.WatchPartition {
	return &ebbadminpb.WatchPartition{StartKey: r.Start, EndKey: r.End}
}

// WatchTokensFor is merge tokens as Watch tokens.
func WatchTokensFor(ts []merge.Token) []*ebbadminpb.WatchToken {
	var out []*ebbadminpb.WatchToken
	for _, t := range ts {
		out = append(out, &ebbadminpb.WatchToken{Partition: WatchPartitionFor(t.Range), Token: t.Token})
	}
	return out
}

// MergeResponse is a Watch response as the merge reads it.
func MergeResponse(r *ebbadminpb.WatchResponse) *merge.Response {
	out := &merge.Response{Line: r.GetLine(), Token: r.GetToken(), ReadTo: r.GetReadTo()}
	if cl := r.GetClose(); cl != nil {
		out.Close = &merge.Close{}
		for _, p := range cl.GetNewPartitions() {
			out.Close.NewPartitions = append(out.Close.NewPartitions, merge.Range{Start: p.GetStartKey(), End: p.GetEndKey()})
		}
		for _, t := range cl.GetTokens() {
			out.Close.Tokens = append(out.Close.Tokens, merge.Token{Range: merge.Range{Start: t.GetPartition().GetStartKey(), End: t.GetPartition().GetEndKey()}, Token: t.GetToken()})
		}
	}
	return out
}
