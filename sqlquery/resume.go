package sqlquery

import (
	"context"
	"time"
)

// Resumable reports whether the query's result rows each come from one
// table row and come in row-key order: it reads a table directly, is not
// grouped, and has no ORDER BY or LIMIT. Such a result can be restarted
// after the row key of the last row a reader got (RunAfter), so a retry
// neither repeats nor skips a row whatever was written in between. Other
// results have no position but their count.
func (p *Plan) Resumable() bool {
	q := p.root
	return p.Direct() && !q.grouped && len(q.order) == 0 && q.limit < 0 && q.limitPar == ""
}

// RunAfter is Run over the table rows after key (all rows when key is
// nil); fn also gets the row key each result row comes from. It is for
// Resumable plans; others return ErrNotResumable.
func (p *Plan) RunAfter(ctx context.Context, cat Catalog, params map[string]Value, now time.Time, after []byte, fn func(key []byte, row []Value) error) error {
	if !p.Resumable() {
		return ErrNotResumable
	}
	var outer []keyRange
	if after != nil {
		outer = []keyRange{{lo: succ(after)}}
	}
	var key []byte
	x := &execCtx{ctx: ctx, cat: cat, params: params, now: now.UTC(), rowKey: func(k []byte) { key = k }}
	return p.root.run(x, outer, func(row []Value) error { return fn(key, row) })
}
