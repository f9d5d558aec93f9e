package cli

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

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// `ebbtable watch` is a change-stream client like the official ones: it
// asks GenerateInitialChangeStreamPartitions for the table's partitions
// (one per tablet in a cluster, the whole table on one node), reads each
// with EbbAdmin/Watch (the Data API's ReadChangeStream with ebbtable's JSON
// lines, served by the tablet's owner whichever node is asked), and when a
// partition's stream closes because its tablet split, merged or moved it
// goes on with the new partitions from the close's continuation tokens. A
// partition made of several closed ones (a merge) starts once tokens cover
// all of it.
//
// The partitions' records are merged in commit order (commit timestamp,
// tiebreaker, index: the order of the record tokens): a record is printed
// once every partition has read past it (each response's read_to, and the
// heartbeats), so a printed token is a position before which everything
// has been printed and after which nothing has, and `--token` resumes
// every partition there.

// watchHeartbeat is how often an idle partition reports its position: the
// most a record waits for the other partitions before it is printed.
const watchHeartbeat = time.Second

// watchAhead is how many records of one partition may wait for the
// others before its stream is no longer read (until they catch up): the
// memory bound of a watch whose partitions are read at different speeds.
const watchAhead = 4096

// watchRetryFor is how long a partition's stream is retried on
// Unavailable (its node restarting, a tablet between owners) before the
// command gives up.
const watchRetryFor = 2 * time.Minute

type watchArgs struct {
	project, instance, table string
	since, until, token      string
	excludeSystem            bool
	ahead                    int // watchAhead if 0 (tests set less)
}

// watchEvent is what a partition's reader passes to the merge.
type watchEvent struct {
	id   int
	resp *ebbadminpb.WatchResponse
	err  error // the stream failed (not retried); nil resp and err: ended without a close
}

type watchPart struct {
	r      *ebbadminpb.WatchPartition
	tokens []*ebbadminpb.WatchToken // where it starts (empty: since / token)
	low    changestream.Position    // every record at or before it has been received
	held   int                      // its records received and not printed yet

	// paused stops its reader between responses; wake restarts it.
	paused atomic.Bool
	wake   chan struct{}
}

type watchRec struct {
	pos  changestream.Position
	line string
	from *watchPart
}

type recHeap []watchRec

func (h recHeap) Len() int           { return len(h) }
func (h recHeap) Less(i, j int) bool { return h[i].pos.Less(h[j].pos) }
func (h recHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *recHeap) Push(x any)        { *h = append(*h, x.(watchRec)) }
func (h *recHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// pending is a new partition waiting for tokens that cover it.
type pending struct {
	r      *ebbadminpb.WatchPartition
	tokens []*ebbadminpb.WatchToken
	low    changestream.Position // the lowest bound of the closed streams it came from
	// parents are the streams open when it was named that hold some of
	// its rows: the ones whose closes may bring the tokens it lacks.
	parents []*watchPart
}

func partKey(p *ebbadminpb.WatchPartition) string {
	return fmt.Sprintf("%x:%x", p.GetStartKey(), p.GetEndKey())
}

// covered says whether the tokens' partitions cover p exactly.
func covered(p *ebbadminpb.WatchPartition, toks []*ebbadminpb.WatchToken) bool {
	rs := make([]*ebbadminpb.WatchPartition, 0, len(toks))
	for _, t := range toks {
		rs = append(rs, t.GetPartition())
	}
	sort.Slice(rs, func(i, j int) bool { return bytes.Compare(rs[i].GetStartKey(), rs[j].GetStartKey()) < 0 })
	at := p.GetStartKey()
	for _, r := range rs {
		if !bytes.Equal(r.GetStartKey(), at) {
			return false
		}
		at = r.GetEndKey()
		if len(at) == 0 {
			return len(p.GetEndKey()) == 0
		}
	}
	return len(p.GetEndKey()) > 0 && bytes.Equal(at, p.GetEndKey())
}

// runWatch prints the table's change stream to emit until until passes
// (every partition ended) or ctx ends.
func runWatch(ctx context.Context, conn *grpc.ClientConn, a watchArgs, emit func(string) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tableName := "projects/" + a.project + "/instances/" + a.instance + "/tables/" + a.table
	var start changestream.Position // a lower bound of every partition's position
	if a.token != "" {
		p, err := changestream.ParseToken(a.token)
		if err != nil {
			return usagef("--token %q: %v", a.token, err)
		}
		start = p
	}
	gen, err := btpb.NewBigtableClient(conn).GenerateInitialChangeStreamPartitions(ctx, &btpb.GenerateInitialChangeStreamPartitionsRequest{TableName: tableName})
	if err != nil {
		return err
	}
	var initial []*ebbadminpb.WatchPartition
	for {
		resp, err := gen.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		rr := resp.GetPartition().GetRowRange()
		initial = append(initial, &ebbadminpb.WatchPartition{StartKey: rr.GetStartKeyClosed(), EndKey: rr.GetEndKeyOpen()})
	}
	admin := ebbadminpb.NewEbbAdminClient(conn)
	events := make(chan watchEvent)
	active := map[int]*watchPart{}
	waiting := map[string]*pending{}
	nextID := 0
	launch := func(p *watchPart) {
		p.wake = make(chan struct{}, 1)
		id := nextID
		nextID++
		active[id] = p
		req := &ebbadminpb.WatchRequest{
			Project: a.project, Instance: a.instance, Table: a.table, Partition: p.r,
			Until: a.until, ExcludeSystem: a.excludeSystem, HeartbeatMillis: watchHeartbeat.Milliseconds(),
		}
		switch {
		case len(p.tokens) > 0:
			req.Tokens = p.tokens
		case a.token != "":
			req.Token = a.token
		default:
			req.Since = a.since
		}
		go readWatchPartition(ctx, admin, id, req, p, events)
	}
	for _, r := range initial {
		launch(&watchPart{r: r, low: start})
	}
	ahead := a.ahead
	if ahead <= 0 {
		ahead = watchAhead
	}
	var buf recHeap
	var last changestream.Position
	printed := false
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
			r := heap.Pop(&buf).(watchRec)
			if printed && r.pos == last {
				r.from.held--
				continue // the same record twice: print it once
			}
			r.from.held--
			last, printed = r.pos, true
			if err := emit(r.line); err != nil {
				return err
			}
		}
		return nil
	}
	for len(active) > 0 {
		var ev watchEvent
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
			return fmt.Errorf("the server ended partition %s without closing it", partKey(p.r))
		}
		resp := ev.resp
		if resp.GetReadTo() == "" && resp.GetClose() == nil {
			return errors.New("the server does not serve change-stream partitions to watch: it is older than this ebbtable")
		}
		if rt := resp.GetReadTo(); rt != "" {
			pos, err := changestream.ParseToken(rt)
			if err != nil {
				return fmt.Errorf("partition %s: %w", partKey(p.r), err)
			}
			if p.low.Less(pos) {
				p.low = pos
			}
		}
		if line := resp.GetLine(); line != "" {
			pos, err := linePosition(line)
			if err != nil {
				return err
			}
			heap.Push(&buf, watchRec{pos: pos, line: line, from: p})
			p.held++
		}
		if cl := resp.GetClose(); cl != nil {
			delete(active, ev.id)
			for _, t := range cl.GetTokens() {
				np := newPartitionOf(cl.GetNewPartitions(), t.GetPartition())
				if np == nil {
					return fmt.Errorf("partition %s closed with a token for %s outside its new partitions", partKey(p.r), partKey(t.GetPartition()))
				}
				k := partKey(np)
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
					launch(&watchPart{r: w.r, tokens: w.tokens, low: w.low})
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
					launch(&watchPart{r: t.GetPartition(), tokens: []*ebbadminpb.WatchToken{t}, low: w.low})
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
func stuck(w *pending, active map[int]*watchPart) bool {
	for _, p := range active {
		for _, q := range w.parents {
			if p == q {
				return false
			}
		}
	}
	return true
}

func overlaps(a, b *ebbadminpb.WatchPartition) bool {
	return (len(b.GetEndKey()) == 0 || bytes.Compare(a.GetStartKey(), b.GetEndKey()) < 0) &&
		(len(a.GetEndKey()) == 0 || bytes.Compare(b.GetStartKey(), a.GetEndKey()) < 0)
}

// within says whether r lies inside p.
func within(r, p *ebbadminpb.WatchPartition) bool {
	return bytes.Compare(r.GetStartKey(), p.GetStartKey()) >= 0 &&
		(len(p.GetEndKey()) == 0 || (len(r.GetEndKey()) > 0 && bytes.Compare(r.GetEndKey(), p.GetEndKey()) <= 0))
}

// newPartitionOf is the new partition holding a token's rows.
func newPartitionOf(nps []*ebbadminpb.WatchPartition, r *ebbadminpb.WatchPartition) *ebbadminpb.WatchPartition {
	for _, np := range nps {
		if within(r, np) {
			return np
		}
	}
	return nil
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

// readWatchPartition reads one partition's stream into events, resuming
// from its last token when the stream breaks with Unavailable.
func readWatchPartition(ctx context.Context, admin ebbadminpb.EbbAdminClient, id int, req *ebbadminpb.WatchRequest, p *watchPart, events chan<- watchEvent) {
	// Its own context: a stream left after its close is released when
	// the reader returns, not when the whole watch ends.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	send := func(ev watchEvent) bool {
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
			req.Since, req.Token = "", ""
			req.Tokens = []*ebbadminpb.WatchToken{{Partition: req.Partition, Token: last}}
		}
		st, err := admin.Watch(ctx, req)
		for err == nil {
			for p.paused.Load() {
				select {
				case <-p.wake:
				case <-ctx.Done():
					return
				}
			}
			var resp *ebbadminpb.WatchResponse
			resp, err = st.Recv()
			if err != nil {
				break
			}
			failingSince, backoff = time.Time{}, 50*time.Millisecond
			if t := resp.GetToken(); t != "" {
				last = t
			}
			if !send(watchEvent{id: id, resp: resp}) || resp.GetClose() != nil {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			send(watchEvent{id: id})
			return
		}
		if ctx.Err() != nil {
			return
		}
		if c := status.Code(err); c != codes.Unavailable && c != codes.Aborted {
			send(watchEvent{id: id, err: fmt.Errorf("partition [%q, %q): %w", p.r.GetStartKey(), p.r.GetEndKey(), err)})
			return
		}
		if failingSince.IsZero() {
			failingSince = time.Now()
		} else if time.Since(failingSince) > watchRetryFor {
			send(watchEvent{id: id, err: fmt.Errorf("partition [%q, %q): unavailable for %v: %w", p.r.GetStartKey(), p.r.GetEndKey(), watchRetryFor, err)})
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
