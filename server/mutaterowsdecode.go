package server

import (
	"unicode/utf8"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/protobuf/encoding/protowire"
)

// decodeMutateRows decodes a MutateRowsRequest of the shape bulk writes
// send — entries of SetCell mutations — into req, which must be a new
// message, and reports whether it did. Anything else (another mutation
// kind, an idempotency token, an unknown field, a string that is not
// UTF-8, a malformed message) it leaves to proto.Unmarshal: it returns
// false, and has not touched req (it checks the whole message first).
//
// It decodes what proto.Unmarshal would, with a few allocations per
// request instead of five per mutation: the entries and the mutations (with
// their SetCells) are each one array, and every row key, qualifier and value is
// copied into one buffer (each slice capped at its length, so an append to
// one cannot overwrite the next). Protobuf's generic decoder was an eighth
// of a bulk write's server CPU, most of it allocation.
func decodeMutateRows(b []byte, req *btpb.MutateRowsRequest) bool {
	nEntries, nMuts, nBytes, ok := countMutateRows(b)
	if !ok {
		return false
	}
	entries := make([]btpb.MutateRowsRequest_Entry, nEntries)
	entryPtrs := make([]*btpb.MutateRowsRequest_Entry, nEntries)
	muts := make([]decodedSetCell, nMuts)
	mutPtrs := make([]*btpb.Mutation, nMuts)
	arena := make([]byte, 0, nBytes)
	// take copies v into the arena; empty is nil, as proto.Unmarshal
	// leaves a proto3 bytes field.
	take := func(v []byte) []byte {
		if len(v) == 0 {
			return nil
		}
		n := len(arena)
		arena = append(arena, v...)
		return arena[n:len(arena):len(arena)]
	}
	var family string // the last family name, shared by the mutations naming it again
	ei, mi := 0, 0
	// countMutateRows checked every field: their numbers and types are
	// the ones handled here.
	for len(b) > 0 {
		num, _, v, _, n := field(b)
		b = b[n:]
		if setMutateRowsName(req, num, v) {
			continue
		}
		switch num {
		case 2:
			en := &entries[ei]
			entryPtrs[ei] = en
			ei++
			first := mi
			for len(v) > 0 {
				num, _, ev, _, n := field(v)
				v = v[n:]
				if num == 1 {
					en.RowKey = take(ev)
					continue
				}
				d := &muts[mi]
				mu, sc := &d.mutation, &d.setCell
				mutPtrs[mi] = mu
				d.oneof.SetCell = sc
				mu.Mutation = &d.oneof
				mi++
				for len(ev) > 0 {
					num, _, sv, x, n := field(ev)
					ev = ev[n:]
					if num == 7 { // timestamp_origin; else 1, set_cell
						mu.TimestampOrigin = btpb.Mutation_TimestampOrigin(int32(x))
						continue
					}
					for len(sv) > 0 {
						num, _, f, x, n := field(sv)
						sv = sv[n:]
						switch num {
						case 1:
							if string(f) != family {
								family = string(f)
							}
							sc.FamilyName = family
						case 2:
							sc.ColumnQualifier = take(f)
						case 3:
							sc.TimestampMicros = int64(x)
						case 4:
							sc.Value = take(f)
						}
					}
				}
			}
			if mi > first {
				en.Mutations = mutPtrs[first:mi:mi]
			}
		}
	}
	if ei > 0 {
		req.Entries = entryPtrs
	}
	return true
}

// decodedSetCell is one decoded SetCell mutation: the Mutation, its oneof
// wrapper and the SetCell, in one allocation for all of a request's.
type decodedSetCell struct {
	mutation btpb.Mutation
	oneof    btpb.Mutation_SetCell_
	setCell  btpb.Mutation_SetCell
}

// setMutateRowsName sets the name a MutateRowsRequest's field num holds
// (table, app profile, authorized view); false for any other field. A name
// given twice keeps the last, as in proto.Unmarshal.
func setMutateRowsName(req *btpb.MutateRowsRequest, num protowire.Number, v []byte) bool {
	switch num {
	case 1:
		req.TableName = string(v)
	case 3:
		req.AppProfileId = string(v)
	case 5:
		req.AuthorizedViewName = string(v)
	default:
		return false
	}
	return true
}

// field reads the field at the start of b: a length-delimited field's
// contents are v, a varint's value x; n is the bytes read, negative if b
// does not start with a whole length-delimited or varint field. One-byte
// tags (every field of a bulk write's) are read inline, and so are
// lengths under 16 KiB (an entry of a 100-byte cell is about 140 bytes
// long) and one-byte varints; a longer varint (a timestamp) is read
// after the tag.
func field(b []byte) (num protowire.Number, typ protowire.Type, v []byte, x uint64, n int) {
	if len(b) >= 2 && b[0] < 0x80 && b[0]>>3 != 0 {
		num, typ = protowire.Number(b[0]>>3), protowire.Type(b[0]&7)
		switch {
		case typ == protowire.BytesType && b[1] < 0x80:
			if l := 2 + int(b[1]); l <= len(b) {
				return num, typ, b[2:l], 0, l
			}
			return 0, 0, nil, 0, -1
		case typ == protowire.BytesType && len(b) >= 3 && b[2] < 0x80:
			if l := 3 + (int(b[1]&0x7f) | int(b[2])<<7); l <= len(b) {
				return num, typ, b[3:l], 0, l
			}
			return 0, 0, nil, 0, -1
		case typ == protowire.VarintType && b[1] < 0x80:
			return num, typ, nil, uint64(b[1]), 2
		case typ == protowire.VarintType:
			x, m := protowire.ConsumeVarint(b[1:])
			if m < 0 {
				return 0, 0, nil, 0, m
			}
			return num, typ, nil, x, 1 + m
		}
	}
	num, typ, n = protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, 0, n
	}
	switch typ {
	case protowire.BytesType:
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return 0, 0, nil, 0, m
		}
		return num, typ, v, 0, n + m
	case protowire.VarintType:
		x, m := protowire.ConsumeVarint(b[n:])
		if m < 0 {
			return 0, 0, nil, 0, m
		}
		return num, typ, nil, x, n + m
	}
	return 0, 0, nil, 0, -1
}

// countMutateRows checks that b is a MutateRowsRequest decodeMutateRows
// decodes, and counts its entries, mutations and the bytes of its row
// keys, qualifiers and values.
func countMutateRows(b []byte) (entries, muts, nBytes int, ok bool) {
	for len(b) > 0 {
		num, typ, v, _, n := field(b)
		if n < 0 || typ != protowire.BytesType {
			return 0, 0, 0, false
		}
		b = b[n:]
		switch num {
		case 1, 3, 5:
			if !utf8.Valid(v) {
				return 0, 0, 0, false
			}
		case 2:
			entries++
			m, nb, ok := countEntry(v, mutateRowsEntry)
			if !ok {
				return 0, 0, 0, false
			}
			muts += m
			nBytes += nb
		default:
			return 0, 0, 0, false
		}
	}
	return entries, muts, nBytes, true
}

// entryShape is where a message holding one row's mutations keeps them: a
// MutateRowsRequest.Entry, or a whole MutateRowRequest, whose names lie
// beside its row key and mutations.
type entryShape struct {
	entries  protowire.Number    // the request's entries; 0: the request is one entry
	row, mut protowire.Number    // an entry's row key and mutations
	names    [3]protowire.Number // an entry's string fields (0: none)
}

var (
	// mutateRowsEntry is a MutateRowsRequest's: entries of row_key 1 and
	// mutations 2 in field 2.
	mutateRowsEntry = entryShape{entries: 2, row: 1, mut: 2}
	// mutateRowEntry is a MutateRowRequest: one entry of row_key 2 and
	// mutations 3 beside table_name 1, app_profile_id 4 and
	// authorized_view_name 6.
	mutateRowEntry = entryShape{row: 2, mut: 3, names: [3]protowire.Number{1, 4, 6}}
)

func (s *entryShape) isName(num protowire.Number) bool {
	return num == s.names[0] || num == s.names[1] || num == s.names[2]
}

// countEntry checks one entry of shape s (a row key, SetCell mutations and
// s's names, nothing else) and counts its mutations and the bytes of its
// row key, qualifiers and values.
func countEntry(b []byte, s entryShape) (muts, nBytes int, ok bool) {
	for len(b) > 0 {
		num, typ, v, _, n := field(b)
		if n < 0 || typ != protowire.BytesType {
			return 0, 0, false
		}
		b = b[n:]
		switch {
		case num == s.row:
			nBytes += len(v)
		case num == s.mut:
			muts++
			nb, ok := countMutation(v)
			if !ok {
				return 0, 0, false
			}
			nBytes += nb
		case s.isName(num):
			if !utf8.Valid(v) {
				return 0, 0, false
			}
		default:
			return 0, 0, false
		}
	}
	return muts, nBytes, true
}

// countMutation checks one Mutation: exactly one set_cell, and perhaps a
// timestamp origin.
func countMutation(b []byte) (nBytes int, ok bool) {
	sets := 0
	for len(b) > 0 {
		num, typ, v, _, n := field(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		switch {
		case num == 7 && typ == protowire.VarintType:
		case num == 1 && typ == protowire.BytesType:
			// A second set_cell would merge into the first: left to proto.
			if sets++; sets > 1 {
				return 0, false
			}
			nb, ok := countSetCell(v)
			if !ok {
				return 0, false
			}
			nBytes += nb
		default:
			return 0, false
		}
	}
	return nBytes, sets == 1
}

// countSetCell checks one Mutation.SetCell.
func countSetCell(b []byte) (nBytes int, ok bool) {
	for len(b) > 0 {
		num, typ, v, _, n := field(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		switch {
		case num == 3 && typ == protowire.VarintType:
		case num == 1 && typ == protowire.BytesType:
			if !utf8.Valid(v) {
				return 0, false
			}
		case (num == 2 || num == 4) && typ == protowire.BytesType:
			nBytes += len(v)
		default:
			return 0, false
		}
	}
	return nBytes, true
}
