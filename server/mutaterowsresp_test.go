package server

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestMarshalMutateRowsResponse: the hand encoder writes exactly what
// proto.Marshal writes for every response it takes, and leaves to protobuf
// every response with a status that is not a bare OK or another field set.
func TestMarshalMutateRowsResponse(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	indices := []int64{0, 1, 127, 128, 16383, 16384, math.MaxInt64, -1, math.MinInt64}
	for i := 0; i < 2000; i++ {
		r := &btpb.MutateRowsResponse{}
		n := rng.IntN(6)
		if i%50 == 0 {
			n = rng.IntN(300)
		}
		wantHand := true
		for j := 0; j < n; j++ {
			e := &btpb.MutateRowsResponse_Entry{}
			switch rng.IntN(3) {
			case 0:
				e.Index = int64(j)
			case 1:
				e.Index = indices[rng.IntN(len(indices))]
			}
			switch rng.IntN(12) {
			case 0: // no status
			case 1:
				e.Status = &rpcstatus.Status{Code: int32(rng.IntN(16) + 1)}
				wantHand = false
			case 2:
				e.Status = &rpcstatus.Status{Message: "m"}
				wantHand = false
			case 3:
				e.Status = &rpcstatus.Status{Details: []*anypb.Any{{TypeUrl: "x"}}}
				wantHand = false
			case 4:
				e.Status = &rpcstatus.Status{}
				e.Status.ProtoReflect().SetUnknown([]byte{0x18, 0x01})
				wantHand = false
			case 5:
				e.ProtoReflect().SetUnknown([]byte{0x18, 0x01})
				wantHand = false
			default:
				e.Status = &rpcstatus.Status{}
			}
			r.Entries = append(r.Entries, e)
		}
		switch rng.IntN(20) {
		case 0:
			r.RateLimitInfo = &btpb.RateLimitInfo{Factor: 1}
			wantHand = false
		case 1:
			r.ProtoReflect().SetUnknown([]byte{0x28, 0x01})
			wantHand = false
		}
		got, ok := marshalMutateRowsResponse(r)
		if ok != wantHand {
			t.Fatalf("response %d (%v): hand-encoded %v, want %v", i, r, ok, wantHand)
		}
		if !ok {
			continue
		}
		want, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if b := got.Materialize(); !bytes.Equal(b, want) {
			t.Fatalf("response %d (%v):\nhand  %x\nproto %x", i, r, b, want)
		}
	}
}

// TestOKMutateRowsResponse: the shared all-OK response answers every entry
// in order, is reused for the same count, and is rebuilt for another; the
// codec sends the encoding kept with it, which is proto.Marshal's, and
// only for that response (not for another of the same entries, nor one
// not shared). Each server's responses are its own: another's, built for
// another count in between, neither replaces its response nor is sent
// with its encoding. (The test's own okResponses, no package variable:
// it runs in parallel with servers answering bulk writes.)
func TestOKMutateRowsResponse(t *testing.T) {
	t.Parallel()
	var ok, other okResponses
	codec := meteredCodec{ok: &ok}
	for _, n := range []int{1, 100, 100, 3, 200, maxSharedOK + 1, maxSharedOK + 1} {
		r := ok.response(n)
		if len(r.GetEntries()) != n {
			t.Fatalf("%d entries, want %d", len(r.GetEntries()), n)
		}
		for i, e := range r.GetEntries() {
			if e.GetIndex() != int64(i) || e.GetStatus() == nil || e.GetStatus().GetCode() != 0 || e.GetStatus().GetMessage() != "" {
				t.Fatalf("entry %d: %v", i, e)
			}
		}
		// Another server answers another count meanwhile.
		o := other.response(n + 1)
		codecSendsProto(t, codec, r, fmt.Sprintf("%d entries", n))
		if _, kept := ok.encoded(r); kept != (n <= maxSharedOK) {
			t.Fatalf("%d entries: the kept encoding sent: %v", n, kept)
		}
		if _, kept := ok.encoded(proto.Clone(r).(*btpb.MutateRowsResponse)); kept {
			t.Fatalf("%d entries: the kept encoding sent for a copy of the shared response", n)
		}
		if _, kept := ok.encoded(o); kept {
			t.Fatalf("%d entries: another server's response sent with this one's encoding", n)
		}
		if n <= maxSharedOK && ok.response(n) != r {
			t.Fatalf("%d entries: the shared response was rebuilt after another server's of %d", n, n+1)
		}
	}
	if a, b := ok.response(100), ok.response(100); a != b {
		t.Error("the all-OK response of 100 entries was built twice")
	}
	if ok.response(maxSharedOK+1) == ok.response(maxSharedOK+1) {
		t.Error("an all-OK response above maxSharedOK was shared")
	}
	var none *okResponses // a codec without a server's: nothing shared
	if r := none.response(5); len(r.GetEntries()) != 5 || none.response(5) == r {
		t.Error("a nil okResponses shared its response")
	}
	if _, kept := none.encoded(ok.response(100)); kept {
		t.Error("a nil okResponses sent a kept encoding")
	}
}

// TestMarshalMutateRowResponse: the codec sends a single-row write's
// answer as proto.Marshal writes it: no bytes for the empty response, and
// its unknown fields when it carries some (a forwarded call's answer).
func TestMarshalMutateRowResponse(t *testing.T) {
	t.Parallel()
	codec := newMeteredCodec(&security{})
	withUnknown := &btpb.MutateRowResponse{}
	withUnknown.ProtoReflect().SetUnknown([]byte{0x08, 0x01, 0x12, 0x01, 'x'})
	for _, r := range []*btpb.MutateRowResponse{{}, withUnknown} {
		codecSendsProto(t, codec, r, fmt.Sprint(r))
	}
}

// codecSendsProto fails the test unless the codec sends m as
// proto.Marshal writes it.
func codecSendsProto(t *testing.T, codec meteredCodec, m proto.Message, what string) {
	t.Helper()
	want, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := codec.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if b := got.Materialize(); !bytes.Equal(b, want) {
		t.Fatalf("%s: the codec sent\n%x\nproto.Marshal writes\n%x", what, b, want)
	}
}

// BenchmarkMutateRowsResponse: answering 100 OK entries, as MutateRows
// did before (an Entry per entry, marshalled by protobuf), the shared
// response written by hand, and what the codec does with the shared
// response (sends the encoding kept with it).
func BenchmarkMutateRowsResponse(b *testing.B) {
	const n = 100
	var shared okResponses
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			resp := &btpb.MutateRowsResponse{Entries: make([]*btpb.MutateRowsResponse_Entry, n)}
			out := make([]btpb.MutateRowsResponse_Entry, n)
			for i := range out {
				out[i].Index, out[i].Status = int64(i), okStatus
				resp.Entries[i] = &out[i]
			}
			if _, err := proto.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := marshalMutateRowsResponse(shared.response(n)); !ok {
				b.Fatal("not hand-encoded")
			}
		}
	})
	b.Run("codec", func(b *testing.B) {
		b.ReportAllocs()
		codec := meteredCodec{ok: &shared}
		for b.Loop() {
			if _, err := codec.Marshal(shared.response(n)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkMutateRowResponse: a single-row write's empty answer through
// gRPC's protobuf codec and through the server's (no bytes, no protobuf).
func BenchmarkMutateRowResponse(b *testing.B) {
	codec := newMeteredCodec(&security{})
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"proto", codec.CodecV2}, {"codec", codec}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.codec.Marshal(&btpb.MutateRowResponse{})
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}
