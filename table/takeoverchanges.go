package table

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
	"github.com/ebbtable/ebbtable/changestream"
)

// Change-stream history across a failover take-over (docs/scale-out.md
// "Automatic failover", docs/change-streams.md "In a cluster"): a dead
// node's records of a tablet come back on the node taking it over from
// two places, both under their original positions (the dead node's commit
// timestamps and tiebreaker, which no other node records under):
//
//   - the records of the span beside each checkpoint (SpanHistory,
//     MarshalChanges): every record committed when it was read, so those
//     of writes the checkpoint holds are among them;
//   - the records in the commit log's batches after it (LoggedChanges): a
//     recorded write's batch carries its records.
//
// The taker imports both (ImportChanges, which also raises its commit
// sequence past them); a record in both is the same key and value.

// LoggedChanges returns the change-stream records of table m that a
// commit log record (a batch, as CommitLog.Append got it) carries, of
// rows within spans, with their positions.
func LoggedChanges(m *Meta, spans []RowSpan, repr []byte) ([]changestream.Record, error) {
	lo, hi := changestream.TableStart(m.ID), changestream.TableEnd(m.ID)
	var out []changestream.Record
	r := batchrepr.Read(repr)
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			return nil, fmt.Errorf("%w: commit log record: %v", ErrDataLoss, err)
		}
		if !ok {
			return out, nil
		}
		if kind != pebble.InternalKeyKindSet || bytes.Compare(k, lo) < 0 || bytes.Compare(k, hi) >= 0 {
			continue
		}
		_, pos, err := changestream.DecodeKey(k)
		if err != nil {
			return nil, fmt.Errorf("%w: commit log record: %v", ErrDataLoss, err)
		}
		rec, err := changestream.Decode(v)
		if err != nil {
			return nil, fmt.Errorf("%w: commit log record: %v", ErrDataLoss, err)
		}
		if !rowInSpans(rec.RowKey, spans) {
			continue
		}
		rec.Position = pos
		out = append(out, rec)
	}
}

func rowInSpans(row []byte, spans []RowSpan) bool {
	for _, s := range spans {
		if inRows(row, s.Start, s.End) {
			return true
		}
	}
	return false
}

// SpanHistory returns every record of table m's stream (within its
// retention, not yet trimmed) of rows [start, end) (end empty: to the
// table's end) committed so far, those not yet closed included: a
// checkpoint's records, read after its commit log position, so each write
// the log no longer holds has its records here.
func (e *Engine) SpanHistory(m *Meta, start, end []byte) ([]changestream.Record, error) {
	return e.SpanHistoryFrom(m, changestream.TableStart(m.ID), start, end)
}

// SpanHistoryFrom is SpanHistory from key lower of the table's stream
// (changestream.TimeKey, say) on.
func (e *Engine) SpanHistoryFrom(m *Meta, lower, start, end []byte) ([]changestream.Record, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	var out []changestream.Record
	for {
		recs, next, more, err := e.SpanChanges(m, lower, math.MaxInt64-1, start, end, 4096)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
		if !more {
			return out, nil
		}
		lower = next
	}
}

// FilterChanges keeps the records of rows within spans.
func FilterChanges(recs []changestream.Record, spans []RowSpan) []changestream.Record {
	out := recs[:0:0]
	for _, r := range recs {
		if rowInSpans(r.RowKey, spans) {
			out = append(out, r)
		}
	}
	return out
}

// MarshalChanges encodes records with their positions (a checkpoint's
// side object): for each, its commit timestamp, tiebreaker and index, the
// encoding's length and the encoding.
func MarshalChanges(recs []changestream.Record) []byte {
	var b []byte
	for i := range recs {
		b = binary.BigEndian.AppendUint64(b, uint64(recs[i].Commit))
		b = binary.BigEndian.AppendUint32(b, uint32(recs[i].Tiebreaker))
		b = binary.BigEndian.AppendUint32(b, recs[i].Index)
		enc := recs[i].Encode()
		b = binary.AppendUvarint(b, uint64(len(enc)))
		b = append(b, enc...)
	}
	return b
}

// UnmarshalChanges decodes what MarshalChanges wrote.
func UnmarshalChanges(b []byte) ([]changestream.Record, error) {
	var out []changestream.Record
	for len(b) > 0 {
		if len(b) < 16 {
			return nil, fmt.Errorf("%w: change records: short position", ErrDataLoss)
		}
		pos := changestream.Position{Commit: int64(binary.BigEndian.Uint64(b)), Tiebreaker: int32(binary.BigEndian.Uint32(b[8:])), Index: binary.BigEndian.Uint32(b[12:])}
		b = b[16:]
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return nil, fmt.Errorf("%w: change records: bad length", ErrDataLoss)
		}
		rec, err := changestream.Decode(b[k : k+int(n)])
		if err != nil {
			return nil, fmt.Errorf("%w: change records: %v", ErrDataLoss, err)
		}
		rec.Position = pos
		out = append(out, rec)
		b = b[k+int(n):]
	}
	return out, nil
}
