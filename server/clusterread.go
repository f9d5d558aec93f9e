package server

import (
	"context"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// A read of a tablet this node owns holds the tablet's gate (read side)
// while it runs, so a move waits for it. A long read, or one whose client
// reads slowly, would hold up the move, and with it every new request for
// the tablet (a waiting writer blocks new readers). So the local read
// runs in its own goroutine, handing responses to the stream through a
// small buffer, and stops as soon as a move asks for the gate: it lets go
// of the gate, the responses it read are still sent, then the stream ends
// with UNAVAILABLE. Clients retry a read on UNAVAILABLE from the row after
// the last one they received; the retry finds the tablet on its new owner.

// gateWant tells the reads of a tablet that a move is waiting for its gate:
// ch is closed while n > 0 moves are.
type gateWant struct {
	n  int
	ch chan struct{}
}

// readBuffer is how many responses (up to maxResponseBytes each) a local
// read runs ahead of its stream.
const readBuffer = 2

// directReadKeys: a read of no more rows than this, by key, is short and
// is served directly under the gate.
const directReadKeys = 16

func (c *clusterMember) wantLocked(k gateKey) *gateWant {
	if c.wants == nil {
		c.wants = map[gateKey]*gateWant{}
	}
	w := c.wants[k]
	if w == nil {
		w = &gateWant{ch: make(chan struct{})}
		c.wants[k] = w
	}
	return w
}

// moveWanted is closed when a move waits for the tablet's gate (read it
// while holding the gate).
func (c *clusterMember) moveWanted(table string, tablet uint64) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wantLocked(gateKey{table, tablet}).ch
}

// wantGate announces a move waiting for the tablet's gate; call done once
// the move holds it no longer (before it lets go of the gate).
func (c *clusterMember) wantGate(table string, tablet uint64) (done func()) {
	k := gateKey{table, tablet}
	c.mu.Lock()
	w := c.wantLocked(k)
	w.n++
	if w.n == 1 {
		close(w.ch)
	}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if w.n--; w.n == 0 {
			w.ch = make(chan struct{})
		}
	}
}

var errTabletMoving = status.Error(codes.Unavailable, "ebbtable: the tablet is moving; retry from the last row received")

// pieceStream is the stream a local read of one piece writes to: its
// responses, whether sent as messages or already encoded by the chunk
// writer (SendMsg of a *wireMessage), go to out.
type pieceStream struct {
	grpc.ServerStream
	ctx context.Context
	out func(m any) error // a *btpb.ReadRowsResponse or an owned *wireMessage
}

func (s pieceStream) Context() context.Context            { return s.ctx }
func (s pieceStream) Send(r *btpb.ReadRowsResponse) error { return s.out(r) }
func (s pieceStream) SendMsg(m any) error {
	if w, ok := m.(*wireMessage); ok && !w.handOver {
		m = &wireMessage{b: append([]byte(nil), w.b...), handOver: true} // the writer reuses w.b
	}
	return s.out(m)
}

// sendCounted sends one of a piece's responses on the client's stream and
// counts the rows it completes.
func sendCounted(stream btpb.Bigtable_ReadRowsServer, m any, count func(int64)) error {
	switch r := m.(type) {
	case *btpb.ReadRowsResponse:
		count(committedRows(r))
		return stream.Send(r)
	case *wireMessage:
		count(wireCommittedRows(r.b))
		return stream.SendMsg(r)
	}
	return stream.SendMsg(m)
}

func committedRows(r *btpb.ReadRowsResponse) int64 {
	var n int64
	for _, ch := range r.GetChunks() {
		if ch.GetCommitRow() {
			n++
		}
	}
	return n
}

// wireCommittedRows counts the chunks with commit_row set in an encoded
// ReadRowsResponse.
func wireCommittedRows(b []byte) int64 {
	var n int64
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return n
		}
		b = b[l:]
		if num != responseChunks || typ != protowire.BytesType {
			if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
				return n
			}
			b = b[l:]
			continue
		}
		ch, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return n
		}
		b = b[l:]
		for len(ch) > 0 {
			cn, ct, cl := protowire.ConsumeTag(ch)
			if cl < 0 {
				break
			}
			ch = ch[cl:]
			if cn == chunkCommitRow && ct == protowire.VarintType {
				v, vl := protowire.ConsumeVarint(ch)
				if vl < 0 {
					break
				}
				if v != 0 {
					n++
				}
				ch = ch[vl:]
				continue
			}
			if cl = protowire.ConsumeFieldValue(cn, ct, ch); cl < 0 {
				break
			}
			ch = ch[cl:]
		}
	}
	return n
}

// readLocal serves one piece of a read from this node's data, the gate
// held by t until the read ends or a move wants it; count is told the
// rows sent.
func (x *clusterData) readLocal(ctx context.Context, table string, t target, sub *btpb.ReadRowsRequest, stream btpb.Bigtable_ReadRowsServer, count func(int64)) error {
	if rs := sub.GetRows(); len(rs.GetRowRanges()) == 0 && len(rs.GetRowKeys()) <= directReadKeys {
		// A few rows by key (ReadRow): served at once, no goroutine.
		defer t.release()
		return x.dataServer.ReadRows(sub, pieceStream{ServerStream: stream, ctx: ctx,
			out: func(m any) error { return sendCounted(stream, m, count) }})
	}
	wanted := x.c.moveWanted(table, t.tablet.ID)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan any, readBuffer)
	errc := make(chan error, 1)
	go func() {
		defer t.release()
		defer close(ch)
		errc <- x.dataServer.ReadRows(sub, pieceStream{ServerStream: stream, ctx: ctx, out: func(m any) error {
			select {
			case <-wanted:
				return errTabletMoving
			default:
			}
			select {
			case ch <- m:
				return nil
			case <-wanted:
				return errTabletMoving
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	}()
	for m := range ch {
		if err := sendCounted(stream, m, count); err != nil {
			return err // cancel stops the read
		}
	}
	return <-errc
}
