package server

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ebbtable/ebbtable/cell"
)

// chunkWriter turns rows into ReadRows chunks and batches them into
// responses. It writes each response in the protobuf wire format as it
// goes — the bytes proto.Marshal would produce for the ReadRowsResponse of
// the same chunks — and sends them through the server's codec as they are
// (wireMessage): building a CellChunk, its two wrappers and its row status
// per cell, then sizing and marshalling them, was most of a scan's
// response cost and a third of its allocations.
//
// Responses are flushed only between rows: the official Go client checks
// after every response that no row is left open, so a row never spans
// responses (values are still split into maxChunkValue chunks within one).
type chunkWriter struct {
	stream grpc.ServerStream
	buf    []byte // the response so far: its chunks, field 1 each
	// limits, when set, replaces maxChunkValue and maxResponseBytes: a
	// test's values need not be megabytes to be split and flushed.
	limits *chunkLimits
}

// chunkLimits is the largest value piece of a chunk and the size at which
// a response is flushed (tests).
type chunkLimits struct{ value, response int }

// limit is the writer's value piece and response sizes.
func (w *chunkWriter) limit() (value, response int) {
	if l := w.limits; l != nil {
		return l.value, l.response
	}
	return maxChunkValue, maxResponseBytes
}

// ReadRowsResponse.CellChunk's fields (google/bigtable/v2/bigtable.proto),
// and the value field of the StringValue and BytesValue wrappers.
const (
	chunkRowKey     protowire.Number = 1
	chunkFamilyName protowire.Number = 2
	chunkQualifier  protowire.Number = 3
	chunkTimestamp  protowire.Number = 4
	chunkLabels     protowire.Number = 5
	chunkValue      protowire.Number = 6
	chunkValueSize  protowire.Number = 7
	chunkCommitRow  protowire.Number = 9
	responseChunks  protowire.Number = 1 // ReadRowsResponse.chunks
	wrapperValue    protowire.Number = 1
)

// chunk is one CellChunk's fields. hasFamily and hasQualifier say whether
// the wrappers are present (an empty qualifier is sent as a present,
// empty wrapper).
type chunk struct {
	rowKey       []byte
	hasFamily    bool
	family       string
	hasQualifier bool
	qualifier    []byte
	timestamp    int64
	labels       []string
	value        []byte
	valueSize    int32
	commit       bool
}

// wrapperSize is the encoded size of a StringValue or BytesValue holding
// n bytes (proto3: an empty value is left out).
func wrapperSize(n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(wrapperValue) + protowire.SizeBytes(n)
}

// size is the chunk's encoded size, fields as proto.Marshal writes them:
// proto3 scalars only when not zero, the row status oneof whenever set.
func (c *chunk) size() int {
	n := 0
	if len(c.rowKey) > 0 {
		n += 1 + protowire.SizeBytes(len(c.rowKey))
	}
	if c.hasFamily {
		n += 1 + protowire.SizeBytes(wrapperSize(len(c.family)))
	}
	if c.hasQualifier {
		n += 1 + protowire.SizeBytes(wrapperSize(len(c.qualifier)))
	}
	if c.timestamp != 0 {
		n += 1 + protowire.SizeVarint(uint64(c.timestamp))
	}
	for _, l := range c.labels {
		n += 1 + protowire.SizeBytes(len(l))
	}
	if len(c.value) > 0 {
		n += 1 + protowire.SizeBytes(len(c.value))
	}
	if c.valueSize != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(c.valueSize)))
	}
	if c.commit {
		n += 2
	}
	return n
}

// appendWrapper appends a StringValue or BytesValue field holding v.
func appendWrapper[T string | []byte](b []byte, num protowire.Number, v T) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(wrapperSize(len(v))))
	if len(v) > 0 {
		b = protowire.AppendTag(b, wrapperValue, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// add appends the chunk to the response, as its field 1.
func (w *chunkWriter) add(c *chunk) {
	size := c.size()
	b := protowire.AppendTag(w.buf, responseChunks, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	if len(c.rowKey) > 0 {
		b = protowire.AppendTag(b, chunkRowKey, protowire.BytesType)
		b = protowire.AppendBytes(b, c.rowKey)
	}
	if c.hasFamily {
		b = appendWrapper(b, chunkFamilyName, c.family)
	}
	if c.hasQualifier {
		b = appendWrapper(b, chunkQualifier, c.qualifier)
	}
	if c.timestamp != 0 {
		b = protowire.AppendTag(b, chunkTimestamp, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(c.timestamp))
	}
	for _, l := range c.labels {
		b = protowire.AppendTag(b, chunkLabels, protowire.BytesType)
		b = protowire.AppendString(b, l)
	}
	if len(c.value) > 0 {
		b = protowire.AppendTag(b, chunkValue, protowire.BytesType)
		b = protowire.AppendBytes(b, c.value)
	}
	if c.valueSize != 0 {
		b = protowire.AppendTag(b, chunkValueSize, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(c.valueSize)))
	}
	if c.commit {
		b = protowire.AppendTag(b, chunkCommitRow, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	w.buf = b
}

// flush sends the chunks gathered so far as the last response: its
// buffer goes to gRPC as it is.
func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.stream.SendMsg(&wireMessage{b: w.buf, handOver: true})
	w.buf = nil
	return err
}

// row adds a row's chunks, and sends them once the response is full; the
// next response reuses the buffer (the codec copies it).
func (w *chunkWriter) row(r cell.Row) error {
	if w.buf == nil {
		// Room for this row at once (a point read's whole response),
		// not grown from 8 bytes; a scan's buffer grows from there.
		w.buf = make([]byte, 0, rowChunksSize(r))
	}
	w.cells(r)
	if _, full := w.limit(); len(w.buf) >= full {
		err := w.stream.SendMsg(&wireMessage{b: w.buf})
		w.buf = w.buf[:0]
		return err
	}
	return nil
}

// rowChunksSize is room for r's chunks as cells writes them (values split
// into pieces, a chunk each): their keys, names, labels and values, and 48
// bytes a chunk for tags, lengths, timestamp, value size and commit (42 at
// most for keys under 16 KiB). Only a capacity: append grows past it.
func rowChunksSize(r cell.Row) int {
	piece := maxChunkValue
	n := len(r.Key) + 8
	for i := range r.Cells {
		c := &r.Cells[i]
		pieces := max(1, (len(c.Value)+piece-1)/piece)
		n += len(c.Family) + len(c.Qualifier) + len(c.Value) + pieces*48
		for _, l := range c.Labels {
			n += len(l) + 6
		}
	}
	return n
}

// cells appends a row's chunks: the row key on the first, the family on
// the first and wherever it changes, the qualifier wherever the column
// changes, the commit on the last.
func (w *chunkWriter) cells(r cell.Row) {
	var lastFam string
	var lastQual []byte
	piece, _ := w.limit()
	for i := range r.Cells {
		c := &r.Cells[i]
		first := chunk{timestamp: c.Timestamp, labels: c.Labels}
		if i == 0 {
			first.rowKey = r.Key
		}
		if i == 0 || c.Family != lastFam {
			first.hasFamily, first.family = true, c.Family
			first.hasQualifier, first.qualifier = true, c.Qualifier
		} else if string(c.Qualifier) != string(lastQual) {
			first.hasQualifier, first.qualifier = true, c.Qualifier
		}
		lastFam, lastQual = c.Family, c.Qualifier
		last := i == len(r.Cells)-1
		v := c.Value
		if len(v) <= piece {
			first.value = v
			first.commit = last
			w.add(&first)
			continue
		}
		first.value = v[:piece]
		first.valueSize = int32(len(v))
		w.add(&first)
		for off := piece; off < len(v); off += piece {
			end := min(off+piece, len(v))
			next := chunk{value: v[off:end]}
			if end < len(v) {
				next.valueSize = int32(len(v))
			} else {
				next.commit = last
			}
			w.add(&next)
		}
	}
}

// wireMessage is a message already in the protobuf wire format, sent by
// the server's codec as it is (meteredCodec.Marshal). Unless handOver is
// set, b stays the caller's: the codec copies it before SendMsg returns.
// With handOver the caller gives b up to gRPC.
//
// A wireMessage is sent once: gRPC keeps the slice marshalWire returns,
// which is one, until the message is written.
type wireMessage struct {
	b        []byte
	handOver bool
	one      [1]mem.Buffer // the BufferSlice marshalWire returns
}

// marshalWire hands gRPC an encoded message: b itself when it is handed
// over, else a copy, in a buffer from gRPC's pool when it is large enough
// to be worth pooling (gRPC frees it once written).
func marshalWire(m *wireMessage) mem.BufferSlice {
	switch {
	case m.handOver:
		m.one[0] = mem.SliceBuffer(m.b)
	case mem.IsBelowBufferPoolingThreshold(len(m.b)):
		m.one[0] = mem.SliceBuffer(append([]byte(nil), m.b...))
	default:
		pool := mem.DefaultBufferPool()
		p := pool.Get(len(m.b))
		copy(*p, m.b)
		m.one[0] = mem.NewBuffer(p, pool)
	}
	return m.one[:]
}
