package sqlquery

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"time"
)

// Positions of result rows, for resuming a query that is not Resumable
// (ORDER BY, LIMIT, GROUP BY, UNPACK): each result row has a position, the
// rows come in position order, and a retry skips the positions a reader
// already got, so rows changed, added or gone meanwhile are neither
// repeated nor skipped (those before the position are not sent again,
// those after it are sent as they are now).
//
// A position is the row's ORDER BY values (for an unordered grouped
// query, its GROUP BY values) compared as ORDER BY compares them, then a
// tie: the table row key, a kept view's position, the group's key, for
// UNPACK the row key and timestamp; over another view or subquery the
// row's own encoding, where equal rows are told apart by counting them.

// Position is where a reader is in a Positioned plan's result.
type Position struct {
	Keys []Value // the ORDER BY (or GROUP BY) values of the last row got
	Tie  []byte
	// Same is how many rows got had exactly this position (equal rows).
	Same uint64
	// Done is how many rows were got in all (LIMIT counts them).
	Done uint64
	set  bool
}

// errPosition marks a damaged position.
var errPosition = errors.New("ebbtable: damaged resume position")

// Encode encodes the position.
func (p *Position) Encode() []byte {
	b := binary.AppendUvarint(nil, p.Done)
	b = binary.AppendUvarint(b, p.Same)
	if !p.set {
		return append(b, 0)
	}
	b = append(b, 1)
	b = encodeList(b, p.Keys)
	b = binary.AppendUvarint(b, uint64(len(p.Tie)))
	return append(b, p.Tie...)
}

// DecodePosition decodes Encode's bytes.
func DecodePosition(b []byte) (*Position, error) {
	p := &Position{}
	var n int
	if p.Done, n = binary.Uvarint(b); n <= 0 {
		return nil, errPosition
	}
	b = b[n:]
	if p.Same, n = binary.Uvarint(b); n <= 0 {
		return nil, errPosition
	}
	b = b[n:]
	if len(b) == 0 {
		return nil, errPosition
	}
	if p.set = b[0] == 1; !p.set {
		return p, nil
	}
	keys, rest, err := decodeList(b[1:])
	if err != nil {
		return nil, errPosition
	}
	l, n := binary.Uvarint(rest)
	if n <= 0 || uint64(len(rest)-n) != l {
		return nil, errPosition
	}
	p.Keys, p.Tie = keys, bytes.Clone(rest[n:])
	return p, nil
}

// advance records that a row at (keys, tie) was got.
func (p *Position) advance(q *query, keys []Value, tie []byte) {
	p.Done++
	if p.set && q.comparePos(keys, tie, p.Keys, p.Tie) == 0 {
		p.Same++
		return
	}
	p.Keys, p.Tie, p.Same, p.set = keys, bytes.Clone(tie), 1, true
}

// comparePos orders positions: the ORDER BY keys (DESC inverted), then
// the tie bytewise.
func (q *query) comparePos(ak []Value, at []byte, bk []Value, bt []byte) int {
	for i := range min(len(ak), len(bk)) {
		c := compare(ak[i], bk[i])
		if i < len(q.order) && q.order[i].desc {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	return bytes.Compare(at, bt)
}

// resumeState is a positioned run's: where to resume, and where it is.
type resumeState struct {
	q    *query
	from *Position // nil: from the start
	same uint64    // rows at from's position still to skip
	at   *Position
}

// skip reports whether a row at (keys, tie) was got before.
func (r *resumeState) skip(keys []Value, tie []byte) bool {
	if r.from == nil || !r.from.set {
		return false
	}
	c := r.q.comparePos(keys, tie, r.from.Keys, r.from.Tie)
	if c < 0 {
		return true
	}
	if c == 0 && r.same > 0 {
		r.same--
		return true
	}
	return false
}

// Positioned reports whether the plan's result rows come in the order of
// positions (above), so RunFrom can resume it after a Position.
func (p *Plan) Positioned() bool {
	q := p.root
	if len(q.order) > 0 || q.grouped {
		return true
	}
	switch s := q.src.(type) {
	case *tableSource:
		return true
	case *derivedSource:
		return s.stored != "" || s.direct()
	case *unpackSource:
		return s.direct()
	}
	return false
}

// RunFrom is Run resumed after position from (nil: from the start), for a
// Positioned plan (others return ErrNotResumable); fn also gets the
// position after the row, to resume from.
func (p *Plan) RunFrom(ctx context.Context, cat Catalog, params map[string]Value, now time.Time, from *Position, fn func(at *Position, row []Value) error) error {
	if !p.Positioned() {
		return ErrNotResumable
	}
	rs := &resumeState{q: p.root, from: from, at: &Position{}}
	if from != nil {
		rs.same = from.Same
		*rs.at = *from
	}
	x := &execCtx{ctx: ctx, cat: cat, params: params, now: now.UTC(), resume: rs}
	if len(p.root.order) == 0 && !p.root.grouped {
		// An unordered scan resumes after the tie, its row's position. A
		// kept view's rows are positioned by the view: were it no longer
		// kept, its computed rows would have none (ErrStale).
		switch p.root.src.(type) {
		case *tableSource:
			if from != nil && from.set {
				return p.root.run(x, []keyRange{{lo: from.Tie}}, func(row []Value) error { return fn(rs.at, row) })
			}
		case *derivedSource:
			// (A view reading a table row by row is positioned by row
			// key; its scan starts at the position's row.)
			x.afterSrc = p.root.src
			if from != nil && from.set {
				x.after = from.Tie
			}
		}
	}
	return p.root.run(x, nil, func(row []Value) error { return fn(rs.at, row) })
}
