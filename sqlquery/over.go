package sqlquery

import (
	"context"
	"errors"
	"time"
)

// ErrNotDirect is returned by RunOver for a query whose FROM is not a table.
var ErrNotDirect = errors.New("ebbtable: the query does not read a table directly")

// ErrNotResumable is returned by RunAfter for a plan that is not Resumable.
var ErrNotResumable = errors.New("ebbtable: the query's result has no row-key position")

// Direct reports whether the query's FROM is a table (not a view, subquery
// or UNPACK), so RunOver can narrow it to chosen rows of that table.
func (p *Plan) Direct() bool {
	_, ok := p.root.src.(*tableSource)
	return ok && len(p.Tables) == 1
}

// RunOver runs the query over only the given rows of its table (whatever
// its grouping): the groups it yields hold the contributions of those rows
// alone. Incremental view maintenance recomputes groups with it. keys must
// not be empty.
func (p *Plan) RunOver(ctx context.Context, cat Catalog, params map[string]Value, now time.Time, keys [][]byte, fn func(row []Value) error) error {
	if !p.Direct() {
		return ErrNotDirect
	}
	if len(keys) == 0 {
		return nil
	}
	rs := make([]keyRange, 0, len(keys))
	for _, k := range keys {
		rs = append(rs, keyRange{lo: k, hi: succ(k)})
	}
	x := &execCtx{ctx: ctx, cat: cat, params: params, now: now.UTC()}
	return p.root.run(x, normalize(rs), fn)
}
