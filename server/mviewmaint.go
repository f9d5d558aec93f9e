package server

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/rowttl"
	"github.com/ebbtable/ebbtable/sqlquery"
	"github.com/ebbtable/ebbtable/table"
)

// Incremental maintenance of materialized views (docs/sql.md, "Materialized
// views"). A view over a table with a change stream keeps, per source row,
// the view rows (groups, by the view's _key) it feeds and the next time its
// visible cells may change by time alone (its deadline: a native expiry, a
// max-age rule, the row deletion policy); per group, the source rows that
// feed it and its output rows. Catching up (before every read) consumes the
// table's change records since the checkpoint and the rows whose deadline
// has come, re-runs the view's query over each such row to learn its new
// groups, and recomputes every group it left or joined from that group's
// source rows only. Any schema change of the table, a change of the view's
// query, or a checkpoint older than the stream's retention rebuilds the view.
// The state lives in memory: the first read after a start rebuilds it.

type mviewState struct {
	mu       sync.Mutex
	query    string
	schema   string // the table's Meta as JSON when built
	tableID  uint64
	lower    []byte // where the next change read starts
	cp       int64  // the commit time (micros) lower starts at or after
	built    bool
	rowGroup map[string][]string           // source row → group keys it feeds
	deadline map[string]int64              // source row → next time-driven change (micros)
	members  map[string]map[string]bool    // group key → source rows
	out      map[string][][]sqlquery.Value // group key → its output rows
}

type mviews struct {
	mu sync.Mutex
	m  map[string]*mviewState // instance/view → state
	// baseRows counts base-table rows the view code read (queries and raw
	// cells): tests see that a read of a maintained view reads none.
	baseRows atomic.Int64
}

func (v *mviews) state(key string) *mviewState {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = map[string]*mviewState{}
	}
	st := v.m[key]
	if st == nil {
		st = &mviewState{}
		v.m[key] = st
	}
	return st
}

// drop forgets a deleted view's state.
func (v *mviews) drop(key string) {
	v.mu.Lock()
	delete(v.m, key)
	v.mu.Unlock()
}

// countingCatalog counts the rows the view's queries read.
type countingCatalog struct {
	sqlquery.Catalog
	n *atomic.Int64
}

func (c countingCatalog) ReadRows(ctx context.Context, name string, req table.ReadRequest, fn func(cell.Row) error) error {
	return c.Catalog.ReadRows(ctx, name, req, func(r cell.Row) error {
		c.n.Add(1)
		return fn(r)
	})
}

// maintainable reports whether plan over m can be maintained: it reads the
// table directly, the table has a change stream and no interleaving, and
// the query does not depend on the time it runs at.
func maintainable(plan *sqlquery.Plan, m *table.Meta, query string) bool {
	return plan.Direct() && m.ChangeStream != nil && len(m.InterleaveSeparator) == 0 &&
		!strings.Contains(strings.ToUpper(query), "CURRENT_")
}

// maintainedRows brings the view up to now and calls fn with its output
// rows in no particular order. ok is false when the view is not
// maintainable; the caller then computes it.
func (s *Server) maintainedRows(ctx context.Context, inst, id, query string, plan *sqlquery.Plan, keyAt int, fn func([]sqlquery.Value) error) (ok bool, err error) {
	if len(plan.Tables) != 1 {
		return false, nil
	}
	m, err := s.engine.Table(inst, plan.Tables[0])
	if err != nil || !maintainable(plan, m, query) {
		return false, nil
	}
	schema, err := json.Marshal(m)
	if err != nil {
		return false, err
	}
	st := s.mviews.state(inst + "/" + id)
	st.mu.Lock()
	defer st.mu.Unlock()
	now := s.opts.Clock.Now()
	nowMicros := clock.Micros(now)
	cat := countingCatalog{s.catalog(inst), &s.mviews.baseRows}
	if !st.built || st.query != query || st.schema != string(schema) || st.tableID != m.ID || st.stale(m, nowMicros) {
		if err := st.rebuild(ctx, s, cat, m, plan, keyAt, now, query, string(schema)); err != nil {
			return false, err
		}
	} else if err := st.catchUp(ctx, s, cat, m, plan, keyAt, now); err != nil {
		return false, err
	}
	for _, rows := range st.out {
		for _, r := range rows {
			if err := fn(r); err != nil {
				return true, err
			}
		}
	}
	return true, nil
}

// stale reports whether records the view has not read may have been
// trimmed: its checkpoint is older than the stream keeps.
func (st *mviewState) stale(m *table.Meta, now int64) bool {
	return st.cp < now-m.ChangeStream.Retention.Microseconds()+time.Minute.Microseconds()
}

// rebuild computes the view from scratch: every stored row is dirty.
func (st *mviewState) rebuild(ctx context.Context, s *Server, cat sqlquery.Catalog, m *table.Meta, plan *sqlquery.Plan, keyAt int, now time.Time, query, schema string) error {
	st.query, st.schema, st.tableID, st.built = query, schema, m.ID, false
	st.rowGroup, st.deadline = map[string][]string{}, map[string]int64{}
	st.members, st.out = map[string]map[string]bool{}, map[string][][]sqlquery.Value{}
	// Records after the closed timestamp taken first are read again by the
	// next catch-up; re-reading a row is idempotent.
	closed := s.engine.ClosedTimestamp()
	st.lower, st.cp = changestream.TimeKey(m.ID, closed+1), closed+1
	var rows []string
	err := s.engine.RawCells(m, nil, nil, func(c table.RawCell) error {
		s.mviews.baseRows.Add(1)
		if n := len(rows); n == 0 || rows[n-1] != string(c.Row) {
			rows = append(rows, string(c.Row))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := st.update(ctx, s, cat, m, plan, keyAt, now, rows); err != nil {
		return err
	}
	st.built = true
	return nil
}

// catchUp applies the change records since the checkpoint and the rows
// whose deadline has passed.
func (st *mviewState) catchUp(ctx context.Context, s *Server, cat sqlquery.Catalog, m *table.Meta, plan *sqlquery.Plan, keyAt int, now time.Time) error {
	dirty := map[string]bool{}
	for {
		b, err := s.engine.ReadChanges(m, st.lower, 1000)
		if err != nil {
			return err
		}
		for _, r := range b.Records {
			dirty[string(r.RowKey)] = true
		}
		if b.Full && len(b.Records) > 0 {
			last := b.Records[len(b.Records)-1].Position
			st.lower, st.cp = changestream.After(m.ID, last), last.Commit
			continue
		}
		st.lower, st.cp = changestream.TimeKey(m.ID, b.Closed+1), b.Closed+1
		break
	}
	nowMicros := clock.Micros(now)
	for row, d := range st.deadline {
		if d <= nowMicros {
			dirty[row] = true
		}
	}
	if len(dirty) == 0 {
		return nil
	}
	rows := make([]string, 0, len(dirty))
	for r := range dirty {
		rows = append(rows, r)
	}
	slices.Sort(rows)
	return st.update(ctx, s, cat, m, plan, keyAt, now, rows)
}

// update re-derives the groups and deadlines of the given source rows and
// recomputes every group one of them left or joined.
func (st *mviewState) update(ctx context.Context, s *Server, cat sqlquery.Catalog, m *table.Meta, plan *sqlquery.Plan, keyAt int, now time.Time, rows []string) error {
	nowMicros := clock.Micros(now)
	affected := map[string]bool{}
	for _, row := range rows {
		for _, g := range st.rowGroup[row] {
			affected[g] = true
			delete(st.members[g], row)
		}
		delete(st.rowGroup, row)
		delete(st.deadline, row)
		var groups []string
		err := plan.RunOver(ctx, cat, nil, now, [][]byte{[]byte(row)}, func(vals []sqlquery.Value) error {
			k, _ := vals[keyAt].([]byte)
			if k != nil && !slices.Contains(groups, string(k)) {
				groups = append(groups, string(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, g := range groups {
			affected[g] = true
			if st.members[g] == nil {
				st.members[g] = map[string]bool{}
			}
			st.members[g][row] = true
		}
		if len(groups) > 0 {
			st.rowGroup[row] = groups
		}
		d, err := rowDeadline(s, m, []byte(row), nowMicros)
		if err != nil {
			return err
		}
		if d > 0 {
			st.deadline[row] = d
		}
	}
	// Recompute the affected groups from their own source rows.
	srcSet := map[string]bool{}
	for g := range affected {
		delete(st.out, g)
		for r := range st.members[g] {
			srcSet[r] = true
		}
		if len(st.members[g]) == 0 {
			delete(st.members, g)
		}
	}
	if len(srcSet) == 0 {
		return nil
	}
	src := make([][]byte, 0, len(srcSet))
	for r := range srcSet {
		src = append(src, []byte(r))
	}
	slices.SortFunc(src, func(a, b []byte) int { return strings.Compare(string(a), string(b)) })
	return plan.RunOver(ctx, cat, nil, now, src, func(vals []sqlquery.Value) error {
		k, _ := vals[keyAt].([]byte)
		if k != nil && affected[string(k)] {
			st.out[string(k)] = append(st.out[string(k)], slices.Clone(vals))
		}
		return nil
	})
}

// rowDeadline is the earliest time after now (micros) at which what a
// reader sees of row may change by time alone, 0 if never: a stored cell's
// native expiry, a cell passing one of its family's max ages, the row
// deletion policy's column value passing the policy's interval. It may be
// early (a cell an intersection rule keeps), never late.
func rowDeadline(s *Server, m *table.Meta, row []byte, now int64) (int64, error) {
	ages := map[string][]int64{}
	for _, f := range m.Families {
		var walk func(r gcrule.Rule)
		walk = func(r gcrule.Rule) {
			if r.Kind() == gcrule.KindMaxAge {
				ages[f.Name] = append(ages[f.Name], r.Age().Microseconds())
			}
			for _, c := range r.Children() {
				walk(c)
			}
		}
		walk(f.GC)
	}
	var pol *rowttl.Policy
	if m.RowPolicy != nil {
		p := rowttl.FromTable(*m.RowPolicy)
		pol = &p
	}
	var d int64
	consider := func(t int64) {
		if t += 1; t > now && (d == 0 || t < d) {
			d = t
		}
	}
	err := s.engine.RawCells(m, row, append(slices.Clone(row), 0), func(c table.RawCell) error {
		s.mviews.baseRows.Add(1)
		if c.ExpireAt > 0 {
			consider(c.ExpireAt)
		}
		for _, a := range ages[c.Family] {
			consider(c.Timestamp + a)
		}
		if pol != nil && c.Family == pol.Family && string(c.Qualifier) == string(pol.Qualifier) {
			if ts, ok := rowttl.ParseTimestamp(c.Value); ok {
				consider(ts + pol.Days*24*time.Hour.Microseconds())
			}
		}
		return nil
	})
	return d, err
}
