package server

import (
	"slices"
	"sync/atomic"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// A bulk write's answer is nearly always one OK status per entry. Building
// that response (an Entry and a pointer per entry) and marshalling it
// through protobuf's generic encoder was about 3% of a bulk write's server
// CPU. okResponses.response shares one immutable all-OK response per entry
// count between calls, encoded once, and the codec writes any other
// response whose statuses are all OK by hand (marshalMutateRowsResponse),
// byte for byte what proto.Marshal writes (TestMarshalMutateRowsResponse).

// okResponses holds the last all-OK response built, with its encoding:
// bulk writers send batches of one size, so one is enough to be reused by
// nearly every call, and the codec sends its encoding rather than
// writing the same bytes again for each (encoded). Each server has its
// own (security.okResps), shared by its handlers and its codec; a nil one
// shares nothing.
type okResponses struct {
	last atomic.Pointer[okShared]
}

// okShared is a shared all-OK response and its encoding; neither is ever
// changed.
type okShared struct {
	r   *btpb.MutateRowsResponse
	enc []byte
}

// okStatus is the OK status every shared response's entries point to.
var okStatus = &rpcstatus.Status{}

// maxSharedOK bounds the entries of a response kept in okResponses.
const maxSharedOK = 4096

// response is a MutateRowsResponse answering n entries with OK, in order.
// It may be shared with other calls: it must not be changed.
func (o *okResponses) response(n int) *btpb.MutateRowsResponse {
	if o == nil {
		return buildOK(n)
	}
	if s := o.last.Load(); s != nil && len(s.r.Entries) == n {
		return s.r
	}
	r := buildOK(n)
	if n <= maxSharedOK {
		enc, _ := appendOKResponse(nil, r)
		o.last.Store(&okShared{r: r, enc: enc})
	}
	return r
}

// buildOK builds a MutateRowsResponse answering n entries with OK.
func buildOK(n int) *btpb.MutateRowsResponse {
	out := make([]btpb.MutateRowsResponse_Entry, n)
	r := &btpb.MutateRowsResponse{Entries: make([]*btpb.MutateRowsResponse_Entry, n)}
	for i := range out {
		out[i].Index, out[i].Status = int64(i), okStatus
		r.Entries[i] = &out[i]
	}
	return r
}

// encoded returns r's encoding if r is the shared all-OK response (gRPC
// only reads what it sends, and a SliceBuffer's Free does nothing).
func (o *okResponses) encoded(r *btpb.MutateRowsResponse) (mem.BufferSlice, bool) {
	if o == nil {
		return nil, false
	}
	if s := o.last.Load(); s != nil && s.r == r {
		return mem.BufferSlice{mem.SliceBuffer(s.enc)}, true
	}
	return nil, false
}

// MutateRowsResponse's and its Entry's fields
// (google/bigtable/v2/bigtable.proto).
const (
	mutateRowsEntries protowire.Number = 1 // MutateRowsResponse.entries
	entryIndex        protowire.Number = 1 // Entry.index
	entryStatus       protowire.Number = 2 // Entry.status
)

// marshalMutateRowsResponse encodes r by hand when every entry's status is
// OK with nothing else in it (or absent) and r has no other field set; ok
// is false otherwise, and r is left to protobuf.
func marshalMutateRowsResponse(r *btpb.MutateRowsResponse) (mem.BufferSlice, bool) {
	b, ok := appendOKResponse(nil, r)
	if !ok {
		return nil, false
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, true
}

// appendOKResponse is marshalMutateRowsResponse appending to b.
func appendOKResponse(b []byte, r *btpb.MutateRowsResponse) ([]byte, bool) {
	if r.GetRateLimitInfo() != nil || len(r.ProtoReflect().GetUnknown()) > 0 {
		return nil, false
	}
	size := 0
	for _, e := range r.GetEntries() {
		if e == nil || len(e.ProtoReflect().GetUnknown()) > 0 {
			return nil, false
		}
		if st := e.GetStatus(); st != nil && (st.GetCode() != 0 || st.GetMessage() != "" || len(st.GetDetails()) > 0 || len(st.ProtoReflect().GetUnknown()) > 0) {
			return nil, false
		}
		n := okEntrySize(e)
		size += 1 + protowire.SizeVarint(uint64(n)) + n
	}
	b = slices.Grow(b, size)
	for _, e := range r.GetEntries() {
		b = protowire.AppendTag(b, mutateRowsEntries, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(okEntrySize(e)))
		if e.GetIndex() != 0 {
			b = protowire.AppendTag(b, entryIndex, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(e.GetIndex()))
		}
		if e.GetStatus() != nil {
			b = protowire.AppendTag(b, entryStatus, protowire.BytesType)
			b = protowire.AppendVarint(b, 0)
		}
	}
	return b, true
}

// okEntrySize is the encoded size of an entry whose status is OK or absent.
func okEntrySize(e *btpb.MutateRowsResponse_Entry) int {
	n := 0
	if e.GetIndex() != 0 {
		n += 1 + protowire.SizeVarint(uint64(e.GetIndex()))
	}
	if e.GetStatus() != nil {
		n += 2
	}
	return n
}
