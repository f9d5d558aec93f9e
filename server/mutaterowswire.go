package server

import (
	"sync"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// A bulk write's request goes from the wire into the Pebble batch without a
// message built per entry or mutation. The codec checks the request's bytes
// (countMutateRows: the shape decodeMutateRows decodes, i.e. what
// proto.Unmarshal would accept, of SetCell mutations only), sets the
// request's names, and keeps the bytes beside the request (wireStash) in
// place of its entries. The handler takes them back (dataServer.MutateRows)
// and hands the engine a wireEntries, which reads entries and SetCells
// from the bytes as the engine validates and writes them
// (table.Engine.MutateRowsFrom). A handler that needs the entries as
// messages (a forwarded call, an authorized view, cluster mode) decodes
// them first (wireEntries.decodeInto): the same decoder as before, so
// such a request is served as it was. The bytes are gRPC's own received
// buffer when the request came in one (no copy), held until the call is
// done with them: the handler, or the stream's end for a call refused
// before its handler took them, releases it (wireEntries.release).
//
// A single-row write (MutateRow) of SetCells takes the same way: its request
// is one entry with the request's names beside it (entryShape), checked by
// the same countEntry (stashMutateRow), read by the same wireEntries, and
// written by the same MutateRowsFrom as a bulk write of one entry
// (dataServer.MutateRow); a handler that needs its mutations as messages
// decodes them with protobuf (wireEntries.decodeRowInto).

// wireStash holds the bytes of each request the codec left undecoded,
// until the handler takes them or the call ends (serveStream).
type wireStash struct {
	mu sync.Mutex
	m  map[any]*wireEntries // by request: a *MutateRowsRequest or *MutateRowRequest
}

func (s *wireStash) put(req any, w *wireEntries) {
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[any]*wireEntries)
	}
	old := s.m[req]
	s.m[req] = w
	s.mu.Unlock()
	if old != nil {
		// req decoded into again (a second request on a call of one,
		// which gRPC refuses): nothing reads the first's bytes.
		old.release()
	}
}

// take returns and forgets req's bytes; nil when the codec decoded req
// (or nothing decoded it: a request built in process).
func (s *wireStash) take(req any) *wireEntries {
	s.mu.Lock()
	w, ok := s.m[req]
	if ok {
		delete(s.m, req)
	}
	s.mu.Unlock()
	return w
}

// len is how many requests' bytes are held (tests).
func (s *wireStash) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// stashMutateRows checks b, a MutateRowsRequest's bytes, and when it is
// one of SetCells with 1 to MaxEntriesPerMutateRows entries sets req's
// names and returns the entries' reader; else nil (b is left to the
// decoders). b must not be changed later: the reader returns slices of it.
func stashMutateRows(b []byte, req *btpb.MutateRowsRequest) *wireEntries {
	n, _, _, ok := countMutateRows(b)
	if !ok || n == 0 || n > MaxEntriesPerMutateRows {
		return nil
	}
	// countMutateRows checked every field.
	for rest := b; len(rest) > 0; {
		num, _, v, _, k := field(rest)
		rest = rest[k:]
		setMutateRowsName(req, num, v)
	}
	return &wireEntries{b: b, n: n, shape: mutateRowsEntry}
}

// stashMutateRow checks b, a MutateRowRequest's bytes, and when it is one
// of SetCells (countEntry's mutateRowEntry) sets req's names and row key
// and returns its one entry's reader; else nil (b is left to protobuf). b
// must not be changed later: the reader and the row key are slices of it.
func stashMutateRow(b []byte, req *btpb.MutateRowRequest) *wireEntries {
	if _, _, ok := countEntry(b, mutateRowEntry); !ok {
		return nil
	}
	for rest := b; len(rest) > 0; {
		num, _, v, _, k := field(rest)
		rest = rest[k:]
		switch num {
		case 1:
			req.TableName = string(v)
		case 2:
			req.RowKey = nilIfEmpty(v)
		case 4:
			req.AppProfileId = string(v)
		case 6:
			req.AuthorizedViewName = string(v)
		}
	}
	return &wireEntries{b: b, n: 1, shape: mutateRowEntry}
}

// wireEntries reads a checked MutateRowsRequest's entries, or a
// MutateRowRequest's one, from its bytes: a table.MutationSource of
// SetCells.
type wireEntries struct {
	b []byte
	// held, if not nil, is gRPC's received buffer b lies in, held by the
	// codec instead of copying b out of it; release gives it back.
	held  mem.Buffer
	n     int // entries
	shape entryShape
	rest  []byte // the fields after the current entry
	cur   []byte // the current entry's fields not read yet
	done  bool   // a one-entry request's entry was read
	// family is the last family name read, shared by the mutations
	// naming it again (one string per request, not one per mutation).
	family string
	exp    expiry // the call's cell TTL, put in every SetCell
	once   sync.Once
}

// release gives back the received buffer the bytes lie in, if the codec
// held one, once nothing reads them any more: whoever takes w from the
// stash calls it when its call is done with the bytes (the engine keeps
// none of them past MutateRowsFrom; the decoders copy what they keep).
// w reads nothing after.
func (w *wireEntries) release() {
	if w.held != nil {
		w.held.Free()
		w.held = nil
	}
	w.b, w.rest, w.cur = nil, nil, nil
}

func (w *wireEntries) Len() int { return w.n }

func (w *wireEntries) Rewind() { w.rest, w.cur, w.done = w.b, nil, false }

func (w *wireEntries) NextEntry() (row []byte, muts int, ok bool) {
	if w.cur, ok = w.nextEntry(); !ok {
		return nil, 0, false
	}
	for v := w.cur; len(v) > 0; {
		num, _, f, _, k := field(v)
		v = v[k:]
		switch num {
		case w.shape.row:
			row = f // the last row_key given, as proto keeps
		case w.shape.mut:
			muts++
		}
	}
	return row, muts, true
}

// nextEntry returns the next entry's fields: the next entries field's, or
// for a one-entry request (shape.entries 0) the whole request's, once.
func (w *wireEntries) nextEntry() ([]byte, bool) {
	if w.shape.entries == 0 {
		if w.done {
			return nil, false
		}
		w.done = true
		return w.b, true
	}
	for len(w.rest) > 0 {
		num, _, v, _, k := field(w.rest)
		w.rest = w.rest[k:]
		if num == w.shape.entries {
			return v, true
		}
	}
	return nil, false
}

// NextMutation fills mu as appendMutations converts the SetCell decoded
// from the same bytes (an empty qualifier or value is nil, as protobuf
// leaves it).
func (w *wireEntries) NextMutation(mu *table.Mutation) bool {
	for len(w.cur) > 0 {
		num, _, v, _, k := field(w.cur)
		w.cur = w.cur[k:]
		if num != w.shape.mut {
			continue
		}
		*mu = table.Mutation{Kind: table.SetCell, TTLMicros: w.exp.ttl, ExpireAt: w.exp.at}
		origin := btpb.Mutation_TIMESTAMP_ORIGIN_UNSPECIFIED
		for len(v) > 0 {
			num, _, sv, x, k := field(v)
			v = v[k:]
			if num == 7 { // timestamp_origin; else 1, the one set_cell
				origin = btpb.Mutation_TimestampOrigin(int32(x))
				continue
			}
			for len(sv) > 0 {
				num, _, f, x, k := field(sv)
				sv = sv[k:]
				switch num {
				case 1:
					if string(f) != w.family {
						w.family = string(f)
					}
					mu.Family = w.family
				case 2:
					mu.Qualifier = nilIfEmpty(f)
				case 3:
					mu.Timestamp = int64(x)
				case 4:
					mu.Value = nilIfEmpty(f)
				}
			}
		}
		mu.AutoTimestamp = origin == btpb.Mutation_CLIENT_AUTO_GENERATED
		return true
	}
	return false
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// decodeInto decodes a MutateRowsRequest's entries into req as the codec
// would have (decodeMutateRows), once.
func (w *wireEntries) decodeInto(req *btpb.MutateRowsRequest) {
	w.once.Do(func() {
		if w.b == nil {
			panic("ebbtable: a MutateRows request's bytes decoded after their release")
		}
		var full btpb.MutateRowsRequest
		if !decodeMutateRows(w.b, &full) {
			panic("ebbtable: a MutateRows request the codec checked does not decode")
		}
		req.Entries = full.Entries
	})
}

// decodeRowInto decodes a MutateRowRequest's mutations into req as the
// codec would have (protobuf), once.
func (w *wireEntries) decodeRowInto(req *btpb.MutateRowRequest) {
	w.once.Do(func() {
		var full btpb.MutateRowRequest
		if err := proto.Unmarshal(w.b, &full); err != nil {
			panic("ebbtable: a MutateRow request the codec checked does not decode: " + err.Error())
		}
		req.Mutations = full.Mutations
	})
}
