package server

import (
	"sync/atomic"
	"unicode/utf8"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/protobuf/encoding/protowire"
)

// decodeReadRows decodes a ReadRowsRequest of the shape point reads and
// plain scans send — a table or authorized view, an app profile, row keys,
// a row limit, the reversed flag, the stats view — into req, which must be
// a new message, and reports whether it did. Anything else (a filter, row
// ranges, a materialized view, an unknown field, a field of the wrong wire
// type, a string that is not UTF-8, a malformed message) it leaves to
// proto.Unmarshal: it returns false, and has not touched req (it checks
// the whole message first).
//
// It decodes what proto.Unmarshal would, in two allocations (the RowSet
// with its key slice, and one buffer for every key; each key capped at its
// length, so an append to one cannot overwrite the next) beside the
// strings. For a point read, protobuf's generic decoder cost more than the
// rest of the server's own request handling.
func decodeReadRows(b []byte, req *btpb.ReadRowsRequest) bool {
	rowSets, keys, nBytes, ok := countReadRows(b)
	if !ok {
		return false
	}
	var set *struct {
		rs   btpb.RowSet
		keys [1][]byte
	}
	var arena []byte
	if rowSets > 0 {
		set = new(struct {
			rs   btpb.RowSet
			keys [1][]byte
		})
		req.Rows = &set.rs
		if keys == 1 {
			set.rs.RowKeys = set.keys[:0:1]
		} else if keys > 1 {
			set.rs.RowKeys = make([][]byte, 0, keys)
		}
		arena = make([]byte, 0, nBytes)
	}
	// countReadRows checked every field: their numbers and types are the
	// ones handled here.
	for len(b) > 0 {
		num, _, v, x, n := field(b)
		b = b[n:]
		switch num {
		case 1:
			req.TableName = sharedTableName(v)
		case 5:
			req.AppProfileId = string(v)
		case 9:
			req.AuthorizedViewName = string(v)
		case 4:
			req.RowsLimit = int64(x)
		case 6:
			req.RequestStatsView = btpb.ReadRowsRequest_RequestStatsView(int32(x))
		case 7:
			req.Reversed = x != 0
		case 2:
			// Every occurrence merges into the one RowSet, as proto does.
			for len(v) > 0 {
				_, _, k, _, n := field(v)
				v = v[n:]
				// A repeated bytes field keeps an empty key as an empty,
				// non-nil slice.
				i := len(arena)
				arena = append(arena, k...)
				set.rs.RowKeys = append(set.rs.RowKeys, arena[i:len(arena):len(arena)])
			}
		}
	}
	return true
}

// countReadRows checks that b is a ReadRowsRequest decodeReadRows decodes,
// and counts its row sets, row keys and the keys' bytes.
func countReadRows(b []byte) (rowSets, keys, nBytes int, ok bool) {
	for len(b) > 0 {
		num, typ, v, _, n := field(b)
		if n < 0 {
			return 0, 0, 0, false
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 5 || num == 9) && typ == protowire.BytesType:
			if !utf8.Valid(v) {
				return 0, 0, 0, false
			}
		case (num == 4 || num == 6 || num == 7) && typ == protowire.VarintType:
		case num == 2 && typ == protowire.BytesType:
			rowSets++
			for len(v) > 0 {
				num, typ, k, _, n := field(v)
				if n < 0 || num != 1 || typ != protowire.BytesType {
					return 0, 0, 0, false
				}
				v = v[n:]
				keys++
				nBytes += len(k)
			}
		default:
			return 0, 0, 0, false
		}
	}
	return rowSets, keys, nBytes, true
}

// lastTableName is the table name of the last request decodeReadRows
// decoded.
var lastTableName atomic.Pointer[string]

// sharedTableName returns v as a string: the last request's when the bytes are
// the same (clients name one table in request after request, and a new
// string each time was an allocation per point read). Strings are
// immutable, so requests may share one.
func sharedTableName(v []byte) string {
	if p := lastTableName.Load(); p != nil && *p == string(v) {
		return *p
	}
	s := string(v)
	lastTableName.Store(&s)
	return s
}
