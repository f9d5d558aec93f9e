package server

import (
	"sync/atomic"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// A bulk write's answer is nearly always one OK status per entry. Building
// that response (an Entry and a pointer per entry) and marshalling it
// through protobuf's generic encoder was about 3% of a bulk write's server
// CPU. okMutateRowsResponse shares one immutable all-OK response per entry
// count between calls, and the codec writes any response whose statuses
// are all OK by hand (marshalMutateRowsResponse), byte for byte what
// proto.Marshal writes (TestMarshalMutateRowsResponse).

// okResponses holds the last all-OK response built: bulk writers send
// batches of one size, so one is enough to be reused by nearly every call.
var okResponses atomic.Pointer[btpb.MutateRowsResponse]

// okStatus is the OK status every shared response's entries point to.
var okStatus = &rpcstatus.Status{}

// maxSharedOK bounds the entries of a response kept in okResponses.
const maxSharedOK = 4096

// okMutateRowsResponse is a MutateRowsResponse answering n entries with
// OK, in order. It may be shared with other calls: it must not be changed.
func okMutateRowsResponse(n int) *btpb.MutateRowsResponse {
	if r := okResponses.Load(); r != nil && len(r.Entries) == n {
		return r
	}
	out := make([]btpb.MutateRowsResponse_Entry, n)
	r := &btpb.MutateRowsResponse{Entries: make([]*btpb.MutateRowsResponse_Entry, n)}
	for i := range out {
		out[i].Index, out[i].Status = int64(i), okStatus
		r.Entries[i] = &out[i]
	}
	if n <= maxSharedOK {
		okResponses.Store(r)
	}
	return r
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
	b := make([]byte, 0, size)
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
	return mem.BufferSlice{mem.SliceBuffer(b)}, true
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
