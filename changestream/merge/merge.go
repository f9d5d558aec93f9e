// Package merge reads a table's change stream the way a change-stream
// client does, whatever serves it: every partition (one per tablet in a
// cluster, the whole table on one node) from its own stream, following
// each stream's close to the new partitions that replace it (a split, a
// merge, a move), and merges the partitions' records in commit order.
// `ebbtable watch` (package cli, over EbbAdmin/Watch) and the web
// console's change tail (package server, in process) both use it; the
// transport is the caller's Source.
package merge

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync/atomic"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
)

// The partitions' records are merged in commit order (commit timestamp,
// tiebreaker, index: the order of the record tokens): a record is emitted
// once every partition has read past it (each response's ReadTo, and the
// heartbeats), so an emitted record's token is a position before which
// everything has been emitted and after which nothing has, and
// Options.Token resumes every partition there.

// Range is a partition's rows: [Start, End), End empty for no end.
type Range struct{ Start, End []byte }

// Token is a partition's continuation token.
type Token struct {
	Range Range
	Token string
}

// Close ends a partition's stream: the partitions that replace it and,
// for each part of its rows, the token to go on from (none: the stream
// reached its end time).
type Close struct {
	NewPartitions []Range
	Tokens        []Token
}

// Response is one message of a partition's stream: a record (Line, a JSON
// line carrying its token), or a heartbeat, with the partition's token and
// ReadTo (every record of the partition up to it has been sent); or the
// stream's Close.
type Response struct {
	Line   string
	Token  string
	ReadTo string
	Close  *Close
}

// Start is where a partition's stream starts: after Token (a record's
// position, for the whole partition), from Tokens (the continuation tokens
// covering it), or at Since (the source's own syntax).
type Start struct {
	Since  string
	Token  string
	Tokens []Token
}

// Stream is one partition's stream; Recv returns io.EOF at its end.
type Stream interface {
	Recv() (*Response, error)
}

// Source serves a table's change stream.
type Source interface {
	// Partitions is the table's partitions now.
	Partitions(ctx context.Context) ([]Range, error)
	// Watch opens a partition's stream. Its context ends when the stream
	// is no longer read.
	Watch(ctx context.Context, part Range, from Start) (Stream, error)
}

// Options says where to start and how to read.
type Options struct {
	// Since or Token is where every initial partition starts.
	Since, Token string
	// Ahead is how many records of one partition may wait for the others
	// before its stream is no longer read (until they catch up): the
	// memory bound of a merge whose partitions are read at different
	// speeds. 4096 if 0.
	Ahead int
	// Retry says whether a stream that failed with err is read again
	// from its last token (a node restarting, a tablet between owners),
	// for at most RetryFor (2 minutes if 0) of failures in a row.
	Retry    func(err error) bool
	RetryFor time.Duration
	Clock    clock.Clock
}

// DefaultAhead is Options.Ahead's default.
const DefaultAhead = 4096

// event is what a partition's reader passes to the merge.
type event struct {
	id   int
	resp *Response
	err  error // the stream failed (not retried); nil resp and err: ended without a close
}

type part struct {
	r      Range
	tokens []Token               // where it starts (empty: Options.Since / Token)
	low    changestream.Position // every record at or before it has been received
	held   int                   // its records received and not emitted yet

	// paused stops its reader between responses; wake restarts it.
	paused atomic.Bool
	wake   chan struct{}
}

type rec struct {
	pos  changestream.Position
	line string
	from *part
}

type recHeap []rec

func (h recHeap) Len() int           { return len(h) }
func (h recHeap) Less(i, j int) bool { return h[i].pos.Less(h[j].pos) }
func (h recHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *recHeap) Push(x any)        { *h = append(*h, x.(rec)) }
func (h *recHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// pending is a new partition waiting for tokens that cover it.
type pending struct {
	r      Range
	tokens []Token
	low    changestream.Position // the lowest bound of the closed streams it came from
	// parents are the streams open when it was named that hold some of
	// its rows: the ones whose closes may bring the tokens it lacks.
	parents []*part
}

// Key names a range in messages: start and end in hex.
func (r Range) Key() string { return fmt.Sprintf("%x:%x", r.Start, r.End) }

// covered says whether the tokens' partitions cover p exactly.
func covered(p Range, toks []Token) bool {
	rs := make([]Range, 0, len(toks))
	for _, t := range toks {
		rs = append(rs, t.Range)
	}
	sort.Slice(rs, func(i, j int) bool { return bytes.Compare(rs[i].Start, rs[j].Start) < 0 })
	at := p.Start
	for _, r := range rs {
		if !bytes.Equal(r.Start, at) {
			return false
		}
		at = r.End
		if len(at) == 0 {
			return len(p.End) == 0
		}
	}
	return len(p.End) > 0 && bytes.Equal(at, p.End)
}

// Run emits the table's change stream, merged, until every partition has
// ended (they reach their end time) or ctx ends or emit fails; emit gets
// each record's JSON line and position. A record seen twice (a stream
// read again from a token) is emitted once.
func Run(ctx context.Context, src Source, o Options, emit func(line string, pos changestream.Position) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.RetryFor <= 0 {
		o.RetryFor = 2 * time.Minute
	}
	if o.Retry == nil {
		o.Retry = func(error) bool { return false }
	}
	var start changestream.Position // a lower bound of every partition's position
	if o.Token != "" {
		p, err := changestream.ParseToken(o.Token)
		if err != nil {
			return err
		}
		start = p
	}
	initial, err := src.Partitions(ctx)
	if err != nil {
		return err
	}
	events := make(chan event)
	active := map[int]*part{}
	waiting := map[string]*pending{}
	nextID := 0
	launch := func(p *part) {
		p.wake = make(chan struct{}, 1)
		id := nextID
		nextID++
		active[id] = p
		from := Start{Since: o.Since}
		switch {
		case len(p.tokens) > 0:
			from = Start{Tokens: p.tokens}
		case o.Token != "":
			from = Start{Token: o.Token}
		}
		go readPartition(ctx, src, o, id, from, p, events)
	}
	for _, r := range initial {
		launch(&part{r: r, low: start})
	}
	ahead := o.Ahead
	if ahead <= 0 {
		ahead = DefaultAhead
	}
	var buf recHeap
	var last changestream.Position
	emitted := false
	flush := func(all bool) error {
		w, bounded := changestream.Position{}, all
		if !all {
			first := true
			for _, p := range active {
				if first || p.low.Less(w) {
					w, first = p.low, false
				}
			}
			for _, p := range waiting {
				if first || p.low.Less(w) {
					w, first = p.low, false
				}
			}
			bounded = !first
		}
		for buf.Len() > 0 && (all || (bounded && !w.Less(buf[0].pos))) {
			r := heap.Pop(&buf).(rec)
			r.from.held--
			if emitted && r.pos == last {
				continue // the same record twice: emit it once
			}
			last, emitted = r.pos, true
			if err := emit(r.line, r.pos); err != nil {
				return err
			}
		}
		return nil
	}
	for len(active) > 0 {
		var ev event
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev = <-events:
		}
		p := active[ev.id]
		if ev.err != nil {
			return ev.err
		}
		if ev.resp == nil { // ended without a close: a server that predates partitions
			return fmt.Errorf("the server ended partition %s without closing it", p.r.Key())
		}
		resp := ev.resp
		if resp.ReadTo == "" && resp.Close == nil {
			return errors.New("the server does not serve change-stream partitions to watch: it is older than this ebbtable")
		}
		if rt := resp.ReadTo; rt != "" {
			pos, err := changestream.ParseToken(rt)
			if err != nil {
				return fmt.Errorf("partition %s: %w", p.r.Key(), err)
			}
			if p.low.Less(pos) {
				p.low = pos
			}
		}
		if line := resp.Line; line != "" {
			pos, err := linePosition(line)
			if err != nil {
				return err
			}
			heap.Push(&buf, rec{pos: pos, line: line, from: p})
			p.held++
		}
		if cl := resp.Close; cl != nil {
			delete(active, ev.id)
			for _, t := range cl.Tokens {
				np, ok := newPartitionOf(cl.NewPartitions, t.Range)
				if !ok {
					return fmt.Errorf("partition %s closed with a token for %s outside its new partitions", p.r.Key(), t.Range.Key())
				}
				k := np.Key()
				w := waiting[k]
				if w == nil {
					w = &pending{r: np, low: p.low}
					for _, q := range active {
						if overlaps(q.r, np) {
							w.parents = append(w.parents, q)
						}
					}
					waiting[k] = w
				}
				if p.low.Less(w.low) {
					w.low = p.low
				}
				w.tokens = append(w.tokens, t)
			}
			for k, w := range waiting {
				if covered(w.r, w.tokens) {
					delete(waiting, k)
					launch(&part{r: w.r, tokens: w.tokens, low: w.low})
				}
			}
			// A new partition whose parents have all closed without
			// covering it waits in vain: the tablets changed again before
			// they closed, and their tokens went to other new partitions.
			// Read each of its tokens' rows on their own (a partition
			// inside one tablet is served as it is; one that is not is
			// closed at once with the tablets now covering it).
			for k, w := range waiting {
				if !stuck(w, active) {
					continue
				}
				delete(waiting, k)
				for _, t := range w.tokens {
					launch(&part{r: t.Range, tokens: []Token{t}, low: w.low})
				}
			}
		}
		if err := flush(false); err != nil {
			return err
		}
		// Readers far ahead of the others wait, except while a new
		// partition waits for tokens: those come from readers that must
		// go on to their close.
		for _, q := range active {
			pause := q.held >= ahead && len(waiting) == 0
			if q.paused.Swap(pause) && !pause {
				select {
				case q.wake <- struct{}{}:
				default:
				}
			}
		}
	}
	if len(waiting) > 0 {
		return fmt.Errorf("%d new partitions never got tokens covering them", len(waiting))
	}
	return flush(true)
}

// stuck says whether every parent of w has closed.
func stuck(w *pending, active map[int]*part) bool {
	for _, p := range active {
		for _, q := range w.parents {
			if p == q {
				return false
			}
		}
	}
	return true
}

func overlaps(a, b Range) bool {
	return (len(b.End) == 0 || bytes.Compare(a.Start, b.End) < 0) &&
		(len(a.End) == 0 || bytes.Compare(b.Start, a.End) < 0)
}

// within says whether r lies inside p.
func within(r, p Range) bool {
	return bytes.Compare(r.Start, p.Start) >= 0 &&
		(len(p.End) == 0 || (len(r.End) > 0 && bytes.Compare(r.End, p.End) <= 0))
}

// newPartitionOf is the new partition holding a token's rows.
func newPartitionOf(nps []Range, r Range) (Range, bool) {
	for _, np := range nps {
		if within(r, np) {
			return np, true
		}
	}
	return Range{}, false
}

// linePosition reads a JSON line's position from its token.
func linePosition(line string) (changestream.Position, error) {
	var j struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal([]byte(line), &j); err != nil {
		return changestream.Position{}, fmt.Errorf("a record that is not JSON: %w", err)
	}
	return changestream.ParseToken(j.Token)
}

// readPartition reads one partition's stream into events, resuming from
// its last token when the stream breaks with an error o.Retry accepts.
func readPartition(ctx context.Context, src Source, o Options, id int, from Start, p *part, events chan<- event) {
	// Its own context: a stream left after its close is released when
	// the reader returns, not when the whole merge ends.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	send := func(ev event) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	last := "" // the token after the last response this reader got
	failingSince := time.Time{}
	backoff := 50 * time.Millisecond
	for {
		if last != "" {
			from = Start{Tokens: []Token{{Range: p.r, Token: last}}}
		}
		st, err := src.Watch(ctx, p.r, from)
		for err == nil {
			for p.paused.Load() {
				select {
				case <-p.wake:
				case <-ctx.Done():
					return
				}
			}
			var resp *Response
			resp, err = st.Recv()
			if err != nil {
				break
			}
			failingSince, backoff = time.Time{}, 50*time.Millisecond
			if resp.Token != "" {
				last = resp.Token
			}
			if !send(event{id: id, resp: resp}) || resp.Close != nil {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			send(event{id: id})
			return
		}
		if ctx.Err() != nil {
			return
		}
		if !o.Retry(err) {
			send(event{id: id, err: fmt.Errorf("partition [%q, %q): %w", p.r.Start, p.r.End, err)})
			return
		}
		now := o.Clock.Now()
		if failingSince.IsZero() {
			failingSince = now
		} else if now.Sub(failingSince) > o.RetryFor {
			send(event{id: id, err: fmt.Errorf("partition [%q, %q): unavailable for %v: %w", p.r.Start, p.r.End, o.RetryFor, err)})
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-o.Clock.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
