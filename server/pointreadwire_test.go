package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestPointReadWire reads rows through the official client over a
// connection that keeps the bytes both ways, and checks what each read's
// HTTP/2 stream carried from the server. A row found: response headers of
// gRPC's own fields only, one ReadRowsResponse holding the row's one chunk
// (no last_scanned_row_key, no request stats, no second message), and
// trailers of grpc-status 0 alone. A row missing: one trailers-only
// HEADERS frame, no message. Every frame, field or message more is work
// the client's transport and chunk reader do on every point read
// (docs/performance.md, "Point reads: what the client pays").
func TestPointReadWire(t *testing.T) {
	env := newTestEnv(t)
	tbl := env.createTable(t, "pw", map[string]bigtable.GCPolicy{"f": nil})
	ctx := context.Background()
	m := bigtable.NewMutation()
	m.Set("f", "c", 1000, []byte("value-1"))
	if err := tbl.Apply(ctx, "r1", m); err != nil {
		t.Fatal(err)
	}

	var rec wireRecorder
	conn, err := grpc.NewClient("passthrough:///"+env.srv.Addr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return &recordedConn{Conn: c, rec: &rec}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	client, err := bigtable.NewClientWithConfig(ctx, testProject, testInstance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	rt := client.Open("pw")
	row, err := rt.ReadRow(ctx, "r1")
	if err != nil || len(row["f"]) != 1 || string(row["f"][0].Value) != "value-1" {
		t.Fatalf("ReadRow(r1) = %v, %v; want its one cell", row, err)
	}
	if row, err := rt.ReadRow(ctx, "r404"); err != nil || row != nil {
		t.Fatalf("ReadRow(r404) = %v, %v; want no row", row, err)
	}
	client.Close() // closes conn: the recorder holds the whole connection

	streams := rec.readRowsStreams(t)
	if len(streams) != 2 {
		t.Fatalf("the connection carried %d ReadRows streams, want 2 (one per ReadRow)", len(streams))
	}

	// The row found.
	found := streams[0]
	if len(found) != 3 {
		t.Fatalf("ReadRow(r1): %d frames from the server, want 3 (headers, one data, trailers): %v", len(found), found)
	}
	h, d, tr := found[0], found[1], found[2]
	if h.typ != http2.FrameHeaders || h.endStream {
		t.Fatalf("ReadRow(r1): first frame %v, want response headers", h)
	}
	checkFields(t, "ReadRow(r1) headers", h.fields, map[string]string{":status": "200", "content-type": "application/grpc"})
	if d.typ != http2.FrameData || d.endStream {
		t.Fatalf("ReadRow(r1): second frame %v, want the response's data", d)
	}
	msg := oneMessage(t, d.data)
	resp := new(btpb.ReadRowsResponse)
	if err := proto.Unmarshal(msg, resp); err != nil {
		t.Fatal(err)
	}
	want := &btpb.ReadRowsResponse{Chunks: []*btpb.ReadRowsResponse_CellChunk{{
		RowKey: []byte("r1"), FamilyName: wrapperspb.String("f"), Qualifier: wrapperspb.Bytes([]byte("c")),
		TimestampMicros: 1000, Value: []byte("value-1"),
		RowStatus: &btpb.ReadRowsResponse_CellChunk_CommitRow{CommitRow: true},
	}}}
	if !proto.Equal(resp, want) {
		t.Fatalf("ReadRow(r1): the response is %v, want only the row's chunk %v", resp, want)
	}
	if tr.typ != http2.FrameHeaders || !tr.endStream {
		t.Fatalf("ReadRow(r1): last frame %v, want trailers ending the stream", tr)
	}
	checkFields(t, "ReadRow(r1) trailers", tr.fields, map[string]string{"grpc-status": "0", "grpc-message": ""})

	// The row missing: a trailers-only response.
	missing := streams[1]
	if len(missing) != 1 || missing[0].typ != http2.FrameHeaders || !missing[0].endStream {
		t.Fatalf("ReadRow(r404): frames %v, want one trailers-only HEADERS frame", missing)
	}
	checkFields(t, "ReadRow(r404) trailers-only", missing[0].fields,
		map[string]string{":status": "200", "content-type": "application/grpc", "grpc-status": "0", "grpc-message": ""})
}

// checkFields fails unless fields hold no name beyond allowed's, each with
// allowed's value (a name allowed may be missing: gRPC's own optional
// fields, such as an empty grpc-message, may come or not).
func checkFields(t *testing.T, what string, fields []hpack.HeaderField, allowed map[string]string) {
	t.Helper()
	for _, f := range fields {
		v, ok := allowed[f.Name]
		if !ok {
			t.Errorf("%s: field %s=%q is sent, want only %v", what, f.Name, f.Value, allowed)
		} else if f.Value != v {
			t.Errorf("%s: %s=%q, want %q", what, f.Name, f.Value, v)
		}
	}
	if v, ok := allowed["grpc-status"]; ok && !hasField(fields, "grpc-status", v) {
		t.Errorf("%s: no grpc-status %s in %v", what, v, fields)
	}
}

func hasField(fields []hpack.HeaderField, name, value string) bool {
	for _, f := range fields {
		if f.Name == name && f.Value == value {
			return true
		}
	}
	return false
}

// oneMessage returns the one gRPC message data holds (length-prefixed,
// uncompressed), failing if it holds more or less.
func oneMessage(t *testing.T, data []byte) []byte {
	t.Helper()
	if len(data) < 5 || data[0] != 0 {
		t.Fatalf("data %x: want an uncompressed length-prefixed message", data)
	}
	n := binary.BigEndian.Uint32(data[1:5])
	if uint64(len(data)-5) != uint64(n) {
		t.Fatalf("data of %d bytes after the prefix, the message is %d: want one message and nothing more", len(data)-5, n)
	}
	return data[5:]
}

// wireRecorder keeps the bytes of one client connection, both ways.
type wireRecorder struct {
	mu       sync.Mutex
	toServer bytes.Buffer
	toClient bytes.Buffer
}

type recordedConn struct {
	net.Conn
	rec *wireRecorder
}

func (c *recordedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.rec.mu.Lock()
	c.rec.toClient.Write(p[:n])
	c.rec.mu.Unlock()
	return n, err
}

func (c *recordedConn) Write(p []byte) (int, error) {
	c.rec.mu.Lock()
	c.rec.toServer.Write(p)
	c.rec.mu.Unlock()
	return c.Conn.Write(p)
}

// wireFrame is one frame of a stream, as the server sent it.
type wireFrame struct {
	typ       http2.FrameType
	endStream bool
	fields    []hpack.HeaderField // HEADERS
	data      []byte              // DATA
}

func (f wireFrame) String() string {
	var b strings.Builder
	b.WriteString(f.typ.String())
	if f.endStream {
		b.WriteString("+END_STREAM")
	}
	for _, h := range f.fields {
		b.WriteString(" " + h.Name + "=" + h.Value)
	}
	if f.typ == http2.FrameData {
		fmt.Fprintf(&b, " %d bytes", len(f.data))
	}
	return b.String()
}

// readRowsStreams parses what was recorded and returns, for each stream
// the client opened for ReadRows (in order), the frames the server sent on
// it.
func (r *wireRecorder) readRowsStreams(t *testing.T) [][]wireFrame {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	up := r.toServer.Bytes()
	if !bytes.HasPrefix(up, []byte(http2.ClientPreface)) {
		t.Fatal("the client's bytes do not start with the HTTP/2 preface")
	}
	var order []uint32
	forEachFrame(t, up[len(http2.ClientPreface):], func(f http2.Frame) {
		if h, ok := f.(*http2.MetaHeadersFrame); ok && strings.HasSuffix(h.PseudoValue("path"), "/ReadRows") {
			order = append(order, h.StreamID)
		}
	})
	byStream := map[uint32][]wireFrame{}
	forEachFrame(t, r.toClient.Bytes(), func(f http2.Frame) {
		id := f.Header().StreamID
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			byStream[id] = append(byStream[id], wireFrame{typ: http2.FrameHeaders, endStream: f.StreamEnded(), fields: f.Fields})
		case *http2.DataFrame:
			byStream[id] = append(byStream[id], wireFrame{typ: http2.FrameData, endStream: f.StreamEnded(), data: bytes.Clone(f.Data())})
		default:
			if id != 0 {
				byStream[id] = append(byStream[id], wireFrame{typ: f.Header().Type})
			}
		}
	})
	out := make([][]wireFrame, len(order))
	for i, id := range order {
		out[i] = byStream[id]
	}
	return out
}

// forEachFrame calls fn with each whole frame of b, header blocks decoded.
func forEachFrame(t *testing.T, b []byte, fn func(http2.Frame)) {
	t.Helper()
	fr := http2.NewFramer(nil, bytes.NewReader(b))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	for {
		f, err := fr.ReadFrame()
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return // the end, or a frame cut off when the connection closed
		}
		if err != nil {
			t.Fatalf("parsing the recorded frames: %v", err)
		}
		fn(f)
	}
}
