package sqlquery

import (
	"context"
	"time"
)

// Resumable reports whether the query's result rows each have a position
// and come in its order: the query reads a table directly (the position is
// the row key) or a kept materialized view (StoredViews; the position is
// the view's), is not grouped, and has no ORDER BY or LIMIT. Such a result
// can be restarted after the position of the last row a reader got
// (RunAfter), so a retry neither repeats nor skips a row whatever was
// written in between. Other results have no position but their count.
func (p *Plan) Resumable() bool {
	q := p.root
	if q.grouped || len(q.order) > 0 || q.limit >= 0 || q.limitPar != "" {
		return false
	}
	if p.Direct() {
		return true
	}
	d, ok := q.src.(*derivedSource)
	return ok && d.stored != ""
}

// RunAfter is Run over the rows after position after (all rows when after
// is nil); fn also gets the position each result row comes from. It is for
// Resumable plans; others return ErrNotResumable. A plan over a kept view
// that is no longer kept returns ErrStale.
func (p *Plan) RunAfter(ctx context.Context, cat Catalog, params map[string]Value, now time.Time, after []byte, fn func(pos []byte, row []Value) error) error {
	if !p.Resumable() {
		return ErrNotResumable
	}
	var pos []byte
	x := &execCtx{ctx: ctx, cat: cat, params: params, now: now.UTC(), rowKey: func(k []byte) { pos = k }}
	var outer []keyRange
	switch {
	case !p.Direct():
		x.after, x.afterSrc = after, p.root.src
	case after != nil:
		outer = []keyRange{{lo: succ(after)}}
	}
	return p.root.run(x, outer, func(row []Value) error { return fn(pos, row) })
}
