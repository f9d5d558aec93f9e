package server

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"testing"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ebbtable/ebbtable/cell"
)

// sendRecorder is a server stream that keeps what is sent on it, encoded
// by the server's codec.
type sendRecorder struct {
	grpc.ServerStream
	sent [][]byte
}

func (s *sendRecorder) SendMsg(m any) error {
	data, err := meteredCodec{}.Marshal(m)
	if err != nil {
		return err
	}
	s.sent = append(s.sent, data.Materialize())
	data.Free()
	return nil
}

// modelChunks is the ReadRows response of rows built as proto messages:
// the row key on a row's first chunk, the family on the first and where it
// changes, the qualifier where the column changes, values over
// piece (the writer's maxChunkValue) split with value_size on all but the
// last piece, the commit on the row's last chunk.
func modelChunks(rows []cell.Row, piece int) *btpb.ReadRowsResponse {
	resp := &btpb.ReadRowsResponse{}
	for _, r := range rows {
		for i, c := range r.Cells {
			ch := &btpb.ReadRowsResponse_CellChunk{TimestampMicros: c.Timestamp, Labels: c.Labels}
			if i == 0 {
				ch.RowKey = r.Key
				ch.FamilyName = wrapperspb.String(c.Family)
				ch.Qualifier = wrapperspb.Bytes(c.Qualifier)
			} else if prev := r.Cells[i-1]; c.Family != prev.Family {
				ch.FamilyName = wrapperspb.String(c.Family)
				ch.Qualifier = wrapperspb.Bytes(c.Qualifier)
			} else if !bytes.Equal(c.Qualifier, prev.Qualifier) {
				ch.Qualifier = wrapperspb.Bytes(c.Qualifier)
			}
			last := i == len(r.Cells)-1
			pieces := [][]byte{c.Value}
			if len(c.Value) > piece {
				pieces = nil
				for off := 0; off < len(c.Value); off += piece {
					pieces = append(pieces, c.Value[off:min(off+piece, len(c.Value))])
				}
			}
			for j, p := range pieces {
				if j > 0 {
					ch = &btpb.ReadRowsResponse_CellChunk{}
				}
				ch.Value = p
				if j < len(pieces)-1 {
					ch.ValueSize = int32(len(c.Value))
				} else if last {
					ch.RowStatus = &btpb.ReadRowsResponse_CellChunk_CommitRow{CommitRow: true}
				}
				resp.Chunks = append(resp.Chunks, ch)
			}
		}
	}
	return resp
}

// chunkCases is how many random row sets TestChunkWriterEncoding encodes;
// a quarter of their cells are one or two chunks' worth of value, which
// the race detector makes slow at the server's 1 MiB, so the default is
// modest and most cases lower the writer's limits (chunkLimitsFor).
var chunkCases = flag.Int("chunks.cases", 20, "TestChunkWriterEncoding: random row sets to encode")

// chunkLimitsFor is the writer's limits for case iter: the server's own
// (1 MiB pieces and responses; a value two pieces long crosses a 3- to
// 4-byte varint length) every tenth case, else 8 KiB (crossing 2 to 3
// bytes) or 16 KiB (3-byte lengths throughout), where the small cells'
// rows also fill responses.
func chunkLimitsFor(iter int) chunkLimits {
	switch {
	case iter%10 == 9:
		return chunkLimits{maxChunkValue, maxResponseBytes}
	case iter%2 == 0:
		return chunkLimits{8 << 10, 8 << 10}
	default:
		return chunkLimits{16 << 10, 16 << 10}
	}
}

// randomRow is a row of up to six cells, a quarter of them holding one or
// two pieces' worth of value (piece, the writer's maxChunkValue).
func randomRow(rng *rand.Rand, piece int) cell.Row {
	pick := func(choices ...string) string { return choices[rng.IntN(len(choices))] }
	r := cell.Row{Key: []byte(pick("r", "row-0001", string(bytes.Repeat([]byte{0xff}, 300))))}
	n := 1 + rng.IntN(6)
	for range n {
		c := cell.Cell{
			Family:    pick("cf", "f2", ""),
			Qualifier: []byte(pick("", "q", "qual\x00ifier", string(bytes.Repeat([]byte("x"), 200)))),
			Timestamp: []int64{0, 1, -1, 1 << 50, 1_700_000_000_000_000}[rng.IntN(5)],
		}
		switch rng.IntN(8) {
		case 0:
		case 1:
			c.Value = bytes.Repeat([]byte{7}, piece)
		case 2:
			c.Value = bytes.Repeat([]byte{9}, 2*piece+rng.IntN(3)-1)
		default:
			c.Value = bytes.Repeat([]byte("v"), rng.IntN(300))
		}
		for range rng.IntN(3) {
			c.Labels = append(c.Labels, pick("", "label", "ebbtable-expiry:123"))
		}
		r.Cells = append(r.Cells, c)
	}
	return r
}

// TestChunkWriterEncoding: the writer's responses are, byte for byte, what
// proto.Marshal writes for the chunks built as messages, and decode to
// them; a response holds whole rows.
func TestChunkWriterEncoding(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range *chunkCases {
		lim := chunkLimitsFor(iter)
		rows := make([]cell.Row, 1+rng.IntN(4))
		for i := range rows {
			rows[i] = randomRow(rng, lim.value)
		}
		rec := &sendRecorder{}
		w := chunkWriter{stream: rec, limits: &lim}
		var want [][]byte
		var pending []cell.Row
		for _, r := range rows {
			if err := w.row(r); err != nil {
				t.Fatal(err)
			}
			pending = append(pending, r)
			if len(w.buf) == 0 { // flushed after this row
				b, err := proto.MarshalOptions{Deterministic: true}.Marshal(modelChunks(pending, lim.value))
				if err != nil {
					t.Fatal(err)
				}
				want, pending = append(want, b), nil
			}
		}
		if err := w.flush(); err != nil {
			t.Fatal(err)
		}
		if len(pending) > 0 {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(modelChunks(pending, lim.value))
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, b)
		}
		if len(rec.sent) != len(want) {
			t.Fatalf("case %d: %d responses sent, want %d", iter, len(rec.sent), len(want))
		}
		for i := range want {
			if !bytes.Equal(rec.sent[i], want[i]) {
				var got btpb.ReadRowsResponse
				err := proto.Unmarshal(rec.sent[i], &got)
				t.Fatalf("case %d response %d: encoding differs from proto.Marshal (decodes with err %v)", iter, i, err)
			}
			var got, exp btpb.ReadRowsResponse
			if err := proto.Unmarshal(rec.sent[i], &got); err != nil {
				t.Fatalf("case %d response %d: %v", iter, i, err)
			}
			if err := proto.Unmarshal(want[i], &exp); err != nil || !proto.Equal(&got, &exp) {
				t.Fatalf("case %d response %d: decodes to a different response", iter, i)
			}
		}
	}
}

// TestWireMessageCopied: the codec copies a wire message, so the writer
// may reuse its buffer once SendMsg returns.
func TestWireMessageCopied(t *testing.T) {
	for _, n := range []int{10, 64 << 10} {
		b := bytes.Repeat([]byte{1}, n)
		data, err := meteredCodec{}.Marshal(&wireMessage{b: b})
		if err != nil {
			t.Fatal(err)
		}
		b[0] = 2
		if got := data.Materialize(); len(got) != n || got[0] != 1 {
			t.Fatalf("%d bytes: the codec's buffer follows the caller's", n)
		}
		data.Free()
	}
}
