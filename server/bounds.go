package server

import (
	"bytes"
	"sync"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// meteredCodec is the server's proto codec with the in-flight bound in
// front of decoding. gRPC hands it each request as the buffers it read;
// decoding would copy them twice (into one contiguous buffer, then into the
// message). A request that would pass --max-inflight-bytes is left
// undecoded, so its buffers go back at once, and the interceptors refuse
// it with RESOURCE_EXHAUSTED; a request within the bound is counted from
// here until its call ends.
type meteredCodec struct {
	encoding.CodecV2
	sec *security
	ok  *okResponses // the server's shared all-OK MutateRows response (nil: none)
}

// meter is what the codec noted about one decoded request.
type meter struct {
	n   int64 // bytes counted in flight
	err error // the request was refused, and left undecoded
}

// meters maps each request message the codec decoded to its meter, until
// an interceptor takes it. (A map under a mutex: a sync.Map allocated an
// entry and boxed the meter for every request.)
type meters struct {
	mu sync.Mutex
	m  map[any]meter
}

// put notes the meter of a decoded request. A request decoded into
// again (a second request sent on a call of one, which gRPC refuses after
// decoding it) adds to its meter: both are counted in flight.
func (ms *meters) put(req any, m meter) {
	ms.mu.Lock()
	if ms.m == nil {
		ms.m = make(map[any]meter)
	}
	if old, ok := ms.m[req]; ok {
		m.n += old.n
		if old.err != nil {
			m.err = old.err
		}
	}
	ms.m[req] = m
	ms.mu.Unlock()
}

func newMeteredCodec(sec *security) meteredCodec {
	return meteredCodec{CodecV2: encoding.GetCodecV2(grpcproto.Name), sec: sec, ok: &sec.okResps}
}

// Marshal encodes a response; a wireMessage (ReadRows' chunks, see
// chunkWriter) is already encoded, the shared all-OK MutateRowsResponse
// was encoded when it was built (okResponses.encoded), and any other of OK statuses
// is written by hand (marshalMutateRowsResponse). A MutateRowResponse has
// no fields: without unknown ones (a forwarded call's answer may carry
// some) it is no bytes, which protobuf took 1–2 µs of a single-row write
// to find out.
func (c meteredCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*wireMessage); ok {
		return marshalWire(m), nil
	}
	if r, ok := v.(*btpb.MutateRowResponse); ok && r != nil && len(r.ProtoReflect().GetUnknown()) == 0 {
		return nil, nil
	}
	if r, ok := v.(*btpb.MutateRowsResponse); ok {
		if b, ok := c.ok.encoded(r); ok {
			return b, nil
		}
		if b, ok := marshalMutateRowsResponse(r); ok {
			return b, nil
		}
	}
	return c.CodecV2.Marshal(v)
}

func (c meteredCodec) Unmarshal(data mem.BufferSlice, v any) error {
	n := int64(data.Len())
	if err := c.sec.acquire(n); err != nil {
		c.sec.meters.put(v, meter{err: err})
		return nil
	}
	held, err := c.unmarshal(data, v)
	if err != nil {
		c.sec.inflight.Add(-n)
		return err
	}
	c.sec.meters.put(v, meter{n: n + held})
	return nil
}

// unmarshal decodes a MutateRows or ReadRows request by hand when it can
// (decodeMutateRows, decodeReadRows), or keeps a bulk or single-row write's
// bytes for the handler (stashMutateRows, stashMutateRow), anything else
// through protobuf. held is what it counted in flight beyond the request's
// length: the rest of gRPC's buffer a kept request holds (holdMutateRows).
func (c meteredCodec) unmarshal(data mem.BufferSlice, v any) (held int64, err error) {
	if req, ok := v.(*btpb.ReadRowsRequest); ok {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		done := decodeReadRows(buf.ReadOnlyData(), req)
		buf.Free()
		if done {
			return 0, nil
		}
	}
	if req, ok := v.(*btpb.MutateRowsRequest); ok {
		// A bulk write of SetCells is kept as its bytes, which the engine
		// writes from (mutaterowswire.go). A request that came in one
		// buffer (a bulk write's usual 100 rows, in one HTTP/2 frame) is
		// kept in that buffer, held until its call ends
		// (wireEntries.release); else in a copy of its own.
		if len(data) == 1 {
			b := data[0].ReadOnlyData()
			if w := stashMutateRows(b, req); w != nil {
				held := c.holdMutateRows(data[0], w)
				c.sec.wire.put(req, w)
				return held, nil
			}
			// decodeMutateRows copies what it keeps.
			if decodeMutateRows(b, req) {
				return 0, nil
			}
			return 0, c.CodecV2.Unmarshal(data, v)
		}
		b := data.Materialize()
		if w := stashMutateRows(b, req); w != nil {
			c.sec.wire.put(req, w)
			return 0, nil
		}
		if decodeMutateRows(b, req) {
			return 0, nil
		}
	}
	if req, ok := v.(*btpb.MutateRowRequest); ok {
		// A single-row write of SetCells likewise (mutaterowswire.go).
		b := data.Materialize()
		if w := stashMutateRow(b, req); w != nil {
			c.sec.wire.put(req, w)
			return 0, nil
		}
		// Declined (a delete, an idempotency token, bytes protobuf must
		// judge): protobuf decodes the copy already made, as the codec
		// would, rather than a second one.
		return 0, proto.Unmarshal(b, req)
	}
	return 0, c.CodecV2.Unmarshal(data, v)
}

// holdMutateRows keeps w's bytes in buf, gRPC's received buffer they lie
// in, until the call ends (wireEntries.release), and returns the bytes it
// counted in flight beyond them: a held request keeps the whole buffer
// (a pooled one of 16 KiB for a 13.5 KB request), so what lies past the
// request in it (its capacity; the few bytes before it, the message's
// gRPC header, are not seen) is counted too, and given back with the rest
// of the request's bytes when the call ends. When the bound cannot take
// those, the request is copied out of buf instead, and buf goes back now.
func (c meteredCodec) holdMutateRows(buf mem.Buffer, w *wireEntries) int64 {
	b := buf.ReadOnlyData()
	extra := int64(cap(b) - len(b))
	if extra > 0 && !c.sec.tryAcquire(extra) {
		w.b = bytes.Clone(b)
		return 0
	}
	buf.Ref()
	w.held = buf
	return extra
}

// take returns and forgets what the codec noted about req; ok is false
// when the codec did not decode it.
func (ms *meters) take(req any) (meter, bool) {
	ms.mu.Lock()
	m, ok := ms.m[req]
	if ok {
		delete(ms.m, req)
	}
	ms.mu.Unlock()
	return m, ok
}

// admit counts a received request in flight: from the codec's meter when
// it decoded the request, else by its encoded size. It returns the bytes
// to release when the call ends.
func (sec *security) admit(req any) (int64, error) {
	if m, ok := sec.meters.take(req); ok {
		return m.n, m.err
	}
	n := requestBytes(req)
	if err := sec.acquire(n); err != nil {
		return 0, err
	}
	return n, nil
}
