package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/table"
)

// The live change-stream tail: the page polls changes.json, which returns
// the records after a cursor and the cursor to ask from next.

const (
	tailBatch = 200
	// tailBack is how far back a new tail starts.
	tailBack = 10 * time.Minute
	// tailFirstSpan is the span of commit time the first poll of a tail
	// reads through Options.Changes (changesTail).
	tailFirstSpan = time.Second
)

type changesData struct {
	Enabled   bool
	Retention time.Duration
	Back      time.Duration
}

func (c *Console) changesPage(w http.ResponseWriter, r *http.Request) {
	m, ref, ok := c.lookup(w, r)
	if !ok {
		return
	}
	d := changesData{Enabled: m.ChangeStream != nil, Back: tailBack}
	if m.ChangeStream != nil {
		d.Retention = m.ChangeStream.Retention
	}
	c.render(w, http.StatusOK, "changes", page{Title: m.Name + ": change stream", Table: ref, Tab: "changes", Data: d})
}

// changesReply is one poll's answer. Records are changestream's JSON
// encoding (the one ebbtable watch prints).
type changesReply struct {
	Records []changestream.JSON `json:"records"`
	// After (a record's token) or From (commit microseconds) is where
	// the next poll starts; More says to poll again at once.
	After string `json:"after,omitempty"`
	From  int64  `json:"from,omitempty"`
	More  bool   `json:"more"`
	// Closed is the time up to which the stream has been read.
	Closed string `json:"closed"`
}

func (c *Console) changesJSON(w http.ResponseWriter, r *http.Request) {
	m, _, ok := c.lookup(w, r)
	if !ok {
		return
	}
	fail := func(status int, err error) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
	}
	if m.ChangeStream == nil {
		fail(http.StatusFailedDependency, errors.New("the table has no change stream"))
		return
	}
	now := clock.Micros(c.opts.Clock.Now())
	horizon := m.ChangeStream.Horizon(now)
	q := r.URL.Query()
	lower := changestream.TimeKey(m.ID, max(now-tailBack.Microseconds(), horizon))
	switch {
	case q.Get("after") != "":
		pos, err := changestream.ParseToken(q.Get("after"))
		if err != nil {
			fail(http.StatusBadRequest, err)
			return
		}
		lower = changestream.After(m.ID, pos)
	case q.Get("from") != "":
		from, err := strconv.ParseInt(q.Get("from"), 10, 64)
		if err != nil || from < 0 {
			fail(http.StatusBadRequest, errors.New("from must be microseconds since the epoch"))
			return
		}
		lower = changestream.TimeKey(m.ID, max(from, horizon))
	}
	if c.opts.Changes != nil {
		c.changesTail(w, r, m, now, horizon, fail)
		return
	}
	b, err := c.opts.Engine.ReadChanges(m, lower, tailBatch)
	if err != nil {
		fail(http.StatusInternalServerError, err)
		return
	}
	rep := changesReply{Records: []changestream.JSON{}, More: b.Full, Closed: fmtTime(time.UnixMicro(b.Closed))}
	for i := range b.Records {
		rec := &b.Records[i]
		if rec.Type == changestream.User && rec.SourceCluster == "" {
			rec.SourceCluster = c.opts.Cluster
		}
		rep.Records = append(rep.Records, rec.ToJSON())
	}
	if b.Full {
		rep.After = b.Records[len(b.Records)-1].Position.Token()
	} else {
		// Every record at or before the closed timestamp has been read;
		// later commits all come after it.
		rep.From = b.Closed + 1
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(rep)
}

// ChangeTail reads a table's change stream for the tail: the records after
// q.After (a record's token) or else from q.From (commit microseconds),
// through q.Until (commit microseconds, inclusive), in commit order, at
// most q.Limit of them (Full: there may be more before q.Until). In a
// cluster the server reads every tablet's records, wherever it is served,
// and merges them.
type ChangeTail func(ctx context.Context, m *table.Meta, q TailQuery) (TailBatch, error)

// TailQuery is one poll's range of the change stream.
type TailQuery struct {
	After       string
	From, Until int64
	Limit       int
}

// TailBatch is what a ChangeTail read.
type TailBatch struct {
	// Records are the records in changestream's JSON encoding, as the
	// lines ebbtable watch prints: passed to the page as they are.
	Records []json.RawMessage
	// First and Last are the first and the last record's tokens.
	First, Last string
	Full        bool
}

// tailReply is changesReply with records already encoded. Span, when
// set, is the span of commit time (microseconds) the next poll reads.
type tailReply struct {
	Records []json.RawMessage `json:"records"`
	After   string            `json:"after,omitempty"`
	From    int64             `json:"from,omitempty"`
	Span    int64             `json:"span,omitempty"`
	More    bool              `json:"more"`
	Closed  string            `json:"closed"`
}

// tailWait bounds one poll of a ChangeTail.
const tailWait = 30 * time.Second

// changesTail answers a poll through Options.Changes: up to now, so the
// next poll starts after now (or after the last record, when the batch
// was full).
//
// A backlog (more than a batch to read) is read a span of commit time at
// a time: every partition of the table streams its records ahead of the
// merge, and what a full batch leaves unread is read again by the next
// poll, so a poll reading up to now would cost about a batch per
// partition. After a full batch, the next poll reads no further than the
// commit time the batch's records took (from its first to its last); a
// poll whose span held less than a batch reads twice as far
// the next time, until it reaches now. The first poll reads
// tailFirstSpan; the span rides in the cursor (span=, from the reply);
// without it a poll reads up to now.
func (c *Console) changesTail(w http.ResponseWriter, r *http.Request, m *table.Meta, now, horizon int64, fail func(int, error)) {
	q := r.URL.Query()
	tq := TailQuery{From: max(now-tailBack.Microseconds(), horizon), Until: now, Limit: tailBatch}
	start := tq.From // the commit time the poll reads from
	switch {
	case q.Get("after") != "":
		pos, err := changestream.ParseToken(q.Get("after"))
		if err != nil {
			fail(http.StatusBadRequest, err)
			return
		}
		tq.After, start = q.Get("after"), pos.Commit
	case q.Get("from") != "":
		from, err := strconv.ParseInt(q.Get("from"), 10, 64)
		if err != nil || from < 0 {
			fail(http.StatusBadRequest, errors.New("from must be microseconds since the epoch"))
			return
		}
		tq.From = max(from, horizon)
		start = tq.From
	}
	var span int64
	if q.Get("after") == "" && q.Get("from") == "" {
		span = tailFirstSpan.Microseconds()
		tq.Until = min(now, start+span)
	}
	if v := q.Get("span"); v != "" {
		var err error
		if span, err = strconv.ParseInt(v, 10, 64); err != nil || span <= 0 {
			fail(http.StatusBadRequest, errors.New("span must be a positive number of microseconds"))
			return
		}
		tq.Until = min(now, start+span)
	}
	if tq.After == "" && tq.From > now {
		// Nothing can have committed yet after the last poll's end.
		c.writeTail(w, tailReply{Records: []json.RawMessage{}, From: tq.From, Closed: fmtTime(time.UnixMicro(now))})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), tailWait)
	defer cancel()
	b, err := c.opts.Changes(ctx, m, tq)
	if err != nil {
		fail(http.StatusInternalServerError, err)
		return
	}
	rep := tailReply{Records: b.Records, More: b.Full, Closed: fmtTime(time.UnixMicro(tq.Until))}
	if rep.Records == nil {
		rep.Records = []json.RawMessage{}
	}
	if b.Full && len(b.Records) > 0 {
		rep.After = b.Last
		first, err1 := changestream.ParseToken(b.First)
		last, err2 := changestream.ParseToken(b.Last)
		if err1 == nil && err2 == nil {
			rep.Span = max(last.Commit-first.Commit, 1)
		}
	} else {
		rep.From = tq.Until + 1
		rep.More = tq.Until < now
		if rep.More {
			rep.Span = 2 * span
		}
	}
	c.writeTail(w, rep)
}

func (c *Console) writeTail(w http.ResponseWriter, rep tailReply) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(rep)
}
