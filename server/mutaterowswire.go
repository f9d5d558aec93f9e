package server

import (
	"sync"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/table"
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
// such a request is served as it was.

// wireStash holds the bytes of each request the codec left undecoded,
// until the handler takes them or the call ends (serveStream).
type wireStash struct {
	mu sync.Mutex
	m  map[*btpb.MutateRowsRequest]*wireEntries
}

func (s *wireStash) put(req *btpb.MutateRowsRequest, w *wireEntries) {
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[*btpb.MutateRowsRequest]*wireEntries)
	}
	s.m[req] = w
	s.mu.Unlock()
}

// take returns and forgets req's bytes; nil when the codec decoded req
// (or nothing decoded it: a request built in process).
func (s *wireStash) take(req *btpb.MutateRowsRequest) *wireEntries {
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
	return &wireEntries{b: b, n: n}
}

// wireEntries reads a checked MutateRowsRequest's entries from its bytes:
// a table.MutationSource of SetCells.
type wireEntries struct {
	b    []byte
	n    int    // entries
	rest []byte // the fields after the current entry
	cur  []byte // the current entry's fields not read yet
	// family is the last family name read, shared by the mutations
	// naming it again (one string per request, not one per mutation).
	family string
	exp    expiry // the call's cell TTL, put in every SetCell
	once   sync.Once
}

func (w *wireEntries) Len() int { return w.n }

func (w *wireEntries) Rewind() { w.rest, w.cur = w.b, nil }

func (w *wireEntries) NextEntry() (row []byte, muts int, ok bool) {
	for len(w.rest) > 0 {
		num, _, v, _, k := field(w.rest)
		w.rest = w.rest[k:]
		if num != 2 {
			continue
		}
		w.cur = v
		for len(v) > 0 {
			num, _, f, _, k := field(v)
			v = v[k:]
			if num == 1 {
				row = f // the last row_key given, as proto keeps
			} else {
				muts++
			}
		}
		return row, muts, true
	}
	return nil, 0, false
}

// NextMutation fills mu as appendMutations converts the SetCell decoded
// from the same bytes (an empty qualifier or value is nil, as protobuf
// leaves it).
func (w *wireEntries) NextMutation(mu *table.Mutation) bool {
	for len(w.cur) > 0 {
		num, _, v, _, k := field(w.cur)
		w.cur = w.cur[k:]
		if num != 2 {
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

// decodeInto decodes the entries into req as the codec would have
// (decodeMutateRows), once.
func (w *wireEntries) decodeInto(req *btpb.MutateRowsRequest) {
	w.once.Do(func() {
		var full btpb.MutateRowsRequest
		if !decodeMutateRows(w.b, &full) {
			panic("ebbtable: a MutateRows request the codec checked does not decode")
		}
		req.Entries = full.Entries
	})
}
