package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/rowttl"
	"github.com/ebbtable/ebbtable/sqlquery"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/protobuf/encoding/protojson"
)

// Incremental maintenance of materialized views (docs/sql.md, "Materialized
// views"). A view whose query groups one table (sqlquery.Incremental) is
// kept in the engine, in its own state space (table.ViewSpace):
//
//	'V'              the state's header (query, table, schema it was built for)
//	'C' row          what the row contributes (its group, its aggregates' inputs)
//	'E' row          the row's deadline: when what a reader sees of it may
//	                 next change by time alone (native expiry, a max-age
//	                 rule, the row deletion policy)
//	'D' due row      the deadlines, by due time
//	'O' esc(_key) g  group g's output row, under its _key
//	'G' 'M' 'U' 'L'  the groups' aggregate state (package sqlquery)
//
// The engine logs every row a commit changes in a table with such a view
// (table/viewlog.go), whatever changed it: a write, a deletion, the
// collector, a row deletion policy, DropRowRange. The maintainer consumes
// the log — in the background as writes arrive, and before every read of
// the view — together with the rows whose deadline has come: it reads each
// such row once, takes its old contribution out of its group and puts the
// new one in, recomputes the output of the groups touched, and commits the
// new state with the log entries' deletion in one batch. A change costs the
// row's read and the aggregates it touches, not its group's size. A schema
// change of the table, a log the state cannot trust, or a new view builds
// the state from one scan of the table.

// viewStateVersion is the layout above; another rebuilds the state. 2:
// GROUP BY prefers a select-list alias to a column (a query's groups may
// have changed), and STRING _key views are maintained.
const viewStateVersion = 2

// viewStateVersionDistinct is the version of a view with a DISTINCT
// aggregate: 3, its distinct values are kept beside their counts (a
// cluster's reads merge them, sqlquery/incrmerge.go).
const viewStateVersionDistinct = 3

// maintBatch is how many log entries (and due rows) one batch consumes.
const maintBatch = 512

// maintPoll is how often the background maintainer looks for work without
// being told of it (deadlines passing; a notice that came before its
// commit).
const maintPoll = time.Second

type mviews struct {
	mu    sync.Mutex
	locks map[uint64]*sync.Mutex // per table: one maintainer at a time
	// gen counts view creations and deletions: the index is rebuilt when
	// it moved.
	gen      atomic.Int64
	index    map[uint64][]*maintView
	indexGen int64
	indexed  bool
	// skipped are the tables of views not maintained because this node
	// holds no tablet of them (mviewcluster.go).
	skipped []tableRef
	// merged are, in a cluster, the views a read merges the owners'
	// states of, by instance/id (mviewpartial.go).
	merged map[string]*maintView
	// plans keeps the views' prepared plans (mviewplans.go); rebuilds
	// counts the index's rebuilds.
	plans    viewPlans
	rebuilds uint64

	// baseRows counts base-table rows the view code read (queries and raw
	// cells): tests see that a read of a maintained view reads none.
	baseRows atomic.Int64
	// mergedReads and mergeFallbacks count reads of views merged from
	// the owners' states and those computed instead (mviewpartial.go);
	// notLiveFallbacks those of the latter because an owner was not live
	// or not reached (fellBack), lastFallback the last other's reason.
	mergedReads, mergeFallbacks, notLiveFallbacks atomic.Int64
	lastFallback                                  atomic.Pointer[string]
	// mergeOff, set by a benchmark, computes such views on read instead.
	mergeOff atomic.Bool

	stop, done chan struct{}
	stopOnce   sync.Once

	// from is, per table, the view-log sequence number to read from next
	// (table.ReadViewLog); kept under the table's lock.
	from sync.Map
	// idle is, per table, its last round that found nothing to do
	// (*idleRound); kept under the table's lock. stateGen counts writes of
	// view state made outside maintainTable (dropView, viewsBeforeIngest).
	idle     sync.Map
	stateGen atomic.Int64
	// rounds and idleRounds count maintainTable's rounds that looked for
	// work, and those it skipped as idle (tests).
	rounds, idleRounds atomic.Int64
}

// idleRound is a table's maintenance round that ended with nothing to do:
// the views it covered, their states' earliest deadline then (0: none),
// and mviews.stateGen when it began.
type idleRound struct {
	views []*maintView
	due   int64
	gen   int64
}

func (v *mviews) logFrom(id uint64) uint64 {
	f, _ := v.from.Load(id)
	n, _ := f.(uint64)
	return n
}

func (v *mviews) setLogFrom(id, next uint64) { v.from.Store(id, next) }

// maintView is a maintained view as planned now.
type maintView struct {
	inst, id, query string
	meta            *table.Meta
	plan            *sqlquery.Plan
	ic              *sqlquery.Incremental
	keyAt           int
	space           []byte
	// clustered: the view's table is a cluster table; spans are then the
	// parts of it this node owns, which the state covers (mviewcluster.go).
	clustered bool
	spans     []table.RowRange
	// keyByGroup: the view's _key is one of its GROUP BY keys, so a group
	// has one output key on every node (a read of some keys asks the
	// owners for just those groups; mviewpartial.go).
	keyByGroup bool

	// hdr is the header the state must have (header), made once: meta,
	// query and spans do not change for a maintView.
	hdrOnce  sync.Once
	hdr      viewHeader
	hdrBytes []byte
	hdrErr   error
}

// whole reports whether this node's state covers the whole table.
func (mv *maintView) whole() bool { return !mv.clustered || spansWhole(mv.spans) }

// covers reports whether row is in the spans the state covers.
func (mv *maintView) covers(row []byte) bool { return !mv.clustered || spansCover(mv.spans, row) }

// coverageSpans is a clustered state's header's Coverage.
const coverageSpans = "spans"

type viewHeader struct {
	Version int    `json:"version"`
	Query   string `json:"query"`
	TableID uint64 `json:"table_id"`
	Schema  string `json:"schema"`
	// Coverage: in a cluster, coverageSpans, and Spans the spans of the
	// table the state covers.
	Coverage string      `json:"coverage,omitempty"`
	Spans    [][2][]byte `json:"spans,omitempty"`
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

// start runs the background maintainer until stopMaint.
func (v *mviews) start(s *Server) {
	v.stop, v.done = make(chan struct{}), make(chan struct{})
	notify := s.engine.ViewLogNotify()
	go func() {
		defer close(v.done)
		t := time.NewTicker(maintPoll)
		defer t.Stop()
		for {
			select {
			case <-v.stop:
				return
			case <-notify:
			case <-t.C:
			}
			if err := s.maintainAll(context.Background()); err != nil && !errors.Is(err, table.ErrClosed) {
				s.log.Warn("materialized view maintenance failed", "err", err)
			}
		}
	}()
}

// stopMaint stops the background maintainer and waits for it.
func (v *mviews) stopMaint() {
	if v.stop == nil {
		return
	}
	v.stopOnce.Do(func() { close(v.stop) })
	<-v.done
}

func (v *mviews) tableLock(id uint64) *sync.Mutex {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.locks == nil {
		v.locks = map[uint64]*sync.Mutex{}
	}
	l := v.locks[id]
	if l == nil {
		l = &sync.Mutex{}
		v.locks[id] = l
	}
	return l
}

// changed tells the maintainer that views were created or deleted.
func (v *mviews) changed() { v.gen.Add(1) }

// maintainable reports whether plan over m is maintained incrementally: it
// groups the table directly, the table is not interleaved, and the query
// does not depend on the time it runs at.
func maintainable(vp *viewPlan, m *table.Meta, query string) (*sqlquery.Incremental, bool) {
	if len(m.InterleaveSeparator) != 0 || strings.Contains(strings.ToUpper(query), "CURRENT_") {
		return nil, false
	}
	ic, err := vp.incremental()
	return ic, err == nil
}

// planMaint plans a view for maintenance; nil when it is not maintained.
func (s *Server) planMaint(inst, id, query string) *maintView {
	mv, _ := s.planMaintCover(inst, id, query, 0)
	return mv
}

// planMaintCover plans a view for maintenance (nil: it is not
// maintainable); local is whether this node maintains it: outside a
// cluster, or in one while it owns some of the table (mviewcluster.go).
// The plan is the one kept for the query while the schema it was made
// with stands (mviewplans.go); rebuild is maintIndex's.
func (s *Server) planMaintCover(inst, id, query string, rebuild uint64) (mv *maintView, local bool) {
	vp, err := s.viewPlan(inst, query, rebuild)
	if err != nil || len(vp.plan.Tables) != 1 {
		return nil, false
	}
	plan := vp.plan
	m, err := s.engine.Table(inst, plan.Tables[0])
	if err != nil {
		return nil, false
	}
	ic, ok := maintainable(vp, m, query)
	if !ok {
		return nil, false
	}
	keyAt := viewKeyColumn(plan.Columns)
	if keyAt < 0 {
		return nil, false
	}
	spans, clustered := s.viewSpans(inst, m.Name)
	mv = &maintView{inst: inst, id: id, query: query, meta: m, plan: plan, ic: ic, keyAt: keyAt, space: table.ViewSpace(inst + "/" + id), clustered: clustered, spans: spans}
	if key, err := vp.materializedKey(query); err == nil && slices.Contains(key, keyAt) {
		mv.keyByGroup = true
	}
	return mv, mv.whole() || len(spans) > 0
}

// views returns the maintained views by table, planned against the tables
// as they are now (a table whose schema changed is planned again).
func (s *Server) maintIndex() (map[uint64][]*maintView, error) {
	v := &s.mviews
	v.mu.Lock()
	defer v.mu.Unlock()
	gen := v.gen.Load()
	fresh := v.indexed && v.indexGen == gen
	if fresh {
		for _, vs := range v.index {
			for _, mv := range vs {
				if m, err := s.engine.Table(mv.inst, mv.meta.Name); err != nil || m != mv.meta {
					fresh = false
				}
			}
		}
	}
	if fresh && s.viewCoverageChanged(v.index, v.skipped) {
		fresh = false
	}
	if fresh {
		return v.index, nil
	}
	index := map[uint64][]*maintView{}
	var skipped []tableRef
	merged := map[string]*maintView{}
	v.rebuilds++
	rebuild := v.rebuilds
	err := s.engine.InstanceMeta(kindMaterializedView, "", func(inst, name string, b []byte) error {
		mv := &adminpb.MaterializedView{}
		if err := protojson.Unmarshal(b, mv); err != nil {
			return err
		}
		p, local := s.planMaintCover(inst, name, mv.GetQuery(), rebuild)
		switch {
		case p == nil:
		case local:
			index[p.meta.ID] = append(index[p.meta.ID], p)
		default:
			skipped = append(skipped, tableRef{instance: inst, table: p.meta.Name})
		}
		if p != nil && p.clustered {
			merged[inst+"/"+name] = p
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	v.index, v.indexGen, v.indexed, v.skipped, v.merged = index, gen, true, skipped, merged
	v.plans.prune(rebuild)
	return index, nil
}

// maintainAll brings every maintained view up to now.
func (s *Server) maintainAll(ctx context.Context) error {
	index, err := s.maintIndex()
	if err != nil {
		return err
	}
	var errs []error
	for id, views := range index {
		errs = append(errs, s.maintainTable(ctx, id, views))
	}
	if s.cluster != nil {
		// Tablets that moved away leave views unmaintained here.
		errs = append(errs, s.unlogUnmaintained(index))
	}
	return errors.Join(errs...)
}

// maintainTable builds what needs building and consumes the table's log and
// due deadlines, under the table's maintenance lock.
func (s *Server) maintainTable(ctx context.Context, tableID uint64, views []*maintView) error {
	l := s.mviews.tableLock(tableID)
	l.Lock()
	defer l.Unlock()
	if len(views) == 0 {
		return nil
	}
	if s.maintIdle(tableID, views) {
		s.mviews.idleRounds.Add(1)
		return nil
	}
	s.mviews.rounds.Add(1)
	// Whatever happens below, the table is idle again only once a round
	// ends with nothing to do.
	s.mviews.idle.Delete(tableID)
	gen := s.mviews.stateGen.Load()
	m := views[0].meta
	if !s.engine.ViewLogged(tableID) {
		if err := s.engine.SetViewLogged(tableID, true); err != nil {
			return err
		}
		for _, mv := range views {
			if err := s.rebuildView(ctx, mv); err != nil {
				return err
			}
		}
	}
	for _, mv := range views {
		ok, have, err := s.viewCurrent(mv)
		if err != nil {
			return err
		}
		switch {
		case !ok:
			err = s.rebuildView(ctx, mv)
		case mv.clustered && !spansEqual(have, mv.spans):
			err = s.reconcileView(ctx, mv, have)
		}
		if err != nil {
			return err
		}
	}
	for {
		from := s.mviews.logFrom(tableID)
		entries, next, err := s.engine.ReadViewLog(tableID, from, maintBatch)
		if err != nil {
			return err
		}
		now := s.opts.Clock.Now()
		var rows [][]byte
		var dropped [][]byte
		unknown := false
		for _, en := range entries {
			switch en.Kind {
			case table.ViewLogRow:
				rows = append(rows, en.Row)
			case table.ViewLogDropped:
				dropped = append(dropped, en.Row)
			default:
				unknown = true
			}
		}
		if unknown {
			for _, mv := range views {
				if err := s.rebuildView(ctx, mv); err != nil {
					return err
				}
			}
			rows, dropped = nil, nil
		}
		vb := s.engine.NewViewBatch()
		work := len(entries) > 0
		var nextDue int64 // the views' earliest deadline after now (0: none)
		for _, mv := range views {
			st := viewStore{vb: vb, space: mv.space}
			dirty := slices.Clone(rows)
			for _, p := range dropped {
				if err := st.Scan(append([]byte{'C'}, p...), prefixEndOf('C', p), false, func(k, _ []byte) (bool, error) {
					dirty = append(dirty, bytes.Clone(k[1:]))
					return true, nil
				}); err != nil {
					vb.Close()
					return err
				}
			}
			due, after, err := st.dueRows(clock.Micros(now), maintBatch)
			if err != nil {
				vb.Close()
				return err
			}
			if after > 0 && (nextDue == 0 || after < nextDue) {
				nextDue = after
			}
			work = work || len(due) > 0
			if err := s.updateRows(ctx, mv, m, st, now, append(dirty, due...)); err != nil {
				vb.Close()
				return err
			}
		}
		if !work {
			vb.Close()
			s.mviews.setLogFrom(tableID, next)
			// Nothing was written since this round's scans: its states
			// are as they read them.
			s.mviews.idle.Store(tableID, &idleRound{views: slices.Clone(views), due: nextDue, gen: gen})
			return nil
		}
		if err := vb.Consumed(entries); err != nil {
			vb.Close()
			return err
		}
		err = vb.Commit()
		vb.Close()
		if err != nil {
			return err
		}
		s.mviews.setLogFrom(tableID, next)
	}
}

// maintIdle reports whether a round of the table's views would find
// nothing to do, without reading storage; under the table's lock. The
// table's last round found nothing to do (idleRound), for these very views
// (the same plans: the same table meta, query and spans), and since then:
//
//   - no view state was written: every writer of it holds the table's lock
//     and runs in maintainTable (rebuildView, reconcileView, the log's
//     batches), which drops the table's idleRound first, or bumps
//     stateGen (dropView, viewsBeforeIngest); the engine writes view state
//     only through ViewBatch. So each state still has the header
//     viewCurrent accepted, for the spans the view covers now;
//   - no deadline came: the states' deadlines are those the round's
//     dueRows saw, none of them due then, the earliest still after now;
//   - the log has nothing from where that round stopped
//     (table.Engine.ViewLogSince: an acknowledged write's entry is counted
//     before its commit, so a read after a write does maintain).
//
// Such a round would read the log (empty), the due rows (none), change
// nothing and commit nothing; skipping it changes nothing either.
func (s *Server) maintIdle(tableID uint64, views []*maintView) bool {
	r, _ := s.mviews.idle.Load(tableID)
	idle, _ := r.(*idleRound)
	if idle == nil || idle.gen != s.mviews.stateGen.Load() || !slices.Equal(idle.views, views) {
		return false
	}
	if idle.due != 0 && clock.Micros(s.opts.Clock.Now()) >= idle.due {
		return false
	}
	return s.engine.ViewLogged(tableID) && !s.engine.ViewLogSince(tableID, s.mviews.logFrom(tableID))
}

func prefixEndOf(tag byte, p []byte) []byte {
	if end := prefixEnd(append([]byte{tag}, p...)); end != nil {
		return end
	}
	return []byte{tag + 1}
}

// header is the header the view's state must have, and its encoding (what
// putHeader writes); made once per maintView.
func (mv *maintView) header() (viewHeader, []byte, error) {
	mv.hdrOnce.Do(func() {
		schema, err := json.Marshal(mv.meta)
		if err != nil {
			mv.hdrErr = err
			return
		}
		version := viewStateVersion
		if mv.ic.HasDistinct() {
			version = viewStateVersionDistinct
		}
		h := viewHeader{Version: version, Query: mv.query, TableID: mv.meta.ID, Schema: string(schema)}
		if mv.clustered {
			h.Coverage, h.Spans = coverageSpans, encodeSpans(mv.spans)
		}
		mv.hdr = h
		mv.hdrBytes, mv.hdrErr = json.Marshal(h)
	})
	return mv.hdr, mv.hdrBytes, mv.hdrErr
}

// viewCurrent reports whether the view's stored state was built for its
// query over the table as it is, and the spans it covers (in a cluster).
func (s *Server) viewCurrent(mv *maintView) (ok bool, spans []table.RowRange, err error) {
	want, wantBytes, err := mv.header()
	if err != nil {
		return false, nil, err
	}
	// A point read: no iterator (one would load a file of every level).
	got, _, err := s.engine.GetViewState(mv.space, []byte{'V'})
	if err != nil || got == nil {
		return false, nil, err
	}
	if bytes.Equal(got, wantBytes) {
		// The header putHeader wrote for this plan: no decoding.
		return true, decodeSpans(want.Spans), nil
	}
	var h viewHeader
	if json.Unmarshal(got, &h) != nil {
		return false, nil, nil
	}
	spans = decodeSpans(h.Spans)
	return h.Version == want.Version && h.Query == want.Query && h.TableID == want.TableID && h.Schema == want.Schema && h.Coverage == want.Coverage, spans, nil
}

// rebuildView computes a view's state from one scan of its table: the
// deadlines from the stored cells, then every row's contribution. It
// commits as it goes; the table's log, on since before it started, names
// every row changed meanwhile.
func (s *Server) rebuildView(ctx context.Context, mv *maintView) error {
	vb := s.engine.NewViewBatch()
	defer func() { vb.Close() }()
	if err := vb.DeleteSpace(mv.space); err != nil {
		return err
	}
	flush := func() error {
		if vb.Len() < 1<<20 {
			return nil
		}
		if err := vb.Commit(); err != nil {
			return err
		}
		vb.Close()
		vb = s.engine.NewViewBatch()
		return nil
	}
	now := s.opts.Clock.Now()
	nowMicros := clock.Micros(now)
	dl := newDeadlines(mv.meta, nowMicros)
	var row []byte
	var d int64
	put := func() error {
		if row != nil && d > 0 {
			st := viewStore{vb: vb, space: mv.space}
			if err := st.setDeadline(row, 0, d); err != nil {
				return err
			}
		}
		return nil
	}
	spans := []table.RowRange{{}}
	if mv.clustered {
		spans = mv.spans
	}
	for _, sp := range spans {
		err := s.engine.RawCells(mv.meta, sp.Start, sp.End, func(c table.RawCell) error {
			s.mviews.baseRows.Add(1)
			if !bytes.Equal(c.Row, row) {
				if err := put(); err != nil {
					return err
				}
				if err := flush(); err != nil {
					return err
				}
				row, d = bytes.Clone(c.Row), 0
			}
			d = dl.consider(d, c)
			return nil
		})
		if err != nil {
			return err
		}
	}
	if err := put(); err != nil {
		return err
	}
	cat := countingCatalog{s.tableCatalog(mv.inst), &s.mviews.baseRows}
	var pending []*rowChange
	apply := func() error {
		st := viewStore{vb: vb, space: mv.space}
		if err := s.applyChanges(ctx, mv, st, now, pending); err != nil {
			return err
		}
		pending = pending[:0]
		return flush()
	}
	each := func(r []byte, c *sqlquery.Contribution) error {
		if c == nil {
			return nil
		}
		pending = append(pending, &rowChange{row: bytes.Clone(r), new: c})
		if len(pending) >= maintBatch {
			return apply()
		}
		return nil
	}
	var err error
	if mv.clustered {
		err = mv.ic.ContributionsIn(ctx, cat, now, mv.spans, each)
	} else {
		err = mv.ic.Contributions(ctx, cat, now, nil, each)
	}
	if err != nil {
		return err
	}
	if err := apply(); err != nil {
		return err
	}
	if mv.ic.Global() {
		// The one group exists, and is output, even over no rows.
		st := viewStore{vb: vb, space: mv.space}
		if err := s.applyChanges(ctx, mv, st, now, []*rowChange{{global: true}}); err != nil {
			return err
		}
	}
	if err := s.putHeader(vb, mv); err != nil {
		return err
	}
	return vb.Commit()
}

// rowChange is one row's move from its old contribution to its new one.
type rowChange struct {
	row      []byte
	old, new *sqlquery.Contribution
	global   bool // touch the global group, changing nothing
}

// updateRows brings the given rows of the view up to now: their deadlines
// and contributions.
func (s *Server) updateRows(ctx context.Context, mv *maintView, m *table.Meta, st viewStore, now time.Time, rows [][]byte) error {
	if len(rows) == 0 {
		return nil
	}
	slices.SortFunc(rows, bytes.Compare)
	rows = slices.CompactFunc(rows, bytes.Equal)
	nowMicros := clock.Micros(now)
	dl := newDeadlines(mv.meta, nowMicros)
	// Rows outside the spans the state covers (a cluster) contribute
	// nothing: their deadlines and contributions go.
	var covered [][]byte
	for _, r := range rows {
		var d int64
		if !mv.covers(r) {
			old, err := st.deadline(r)
			if err != nil {
				return err
			}
			if err := st.setDeadline(r, old, 0); err != nil {
				return err
			}
			continue
		}
		covered = append(covered, r)
		if err := s.engine.RawCells(mv.meta, r, append(bytes.Clone(r), 0), func(c table.RawCell) error {
			s.mviews.baseRows.Add(1)
			d = dl.consider(d, c)
			return nil
		}); err != nil {
			return err
		}
		old, err := st.deadline(r)
		if err != nil {
			return err
		}
		if err := st.setDeadline(r, old, d); err != nil {
			return err
		}
	}
	news := map[string]*sqlquery.Contribution{}
	cat := countingCatalog{s.tableCatalog(mv.inst), &s.mviews.baseRows}
	if len(covered) > 0 {
		if err := mv.ic.Contributions(ctx, cat, now, covered, func(r []byte, c *sqlquery.Contribution) error {
			news[string(r)] = c
			return nil
		}); err != nil {
			return err
		}
	}
	changes := make([]*rowChange, 0, len(rows))
	for _, r := range rows {
		ob, _, err := st.Get(append([]byte{'C'}, r...))
		if err != nil {
			return err
		}
		nc := news[string(r)]
		if bytes.Equal(ob, sqlquery.EncodeContribution(nc)) {
			continue
		}
		oc, err := sqlquery.DecodeContribution(ob)
		if err != nil {
			return err
		}
		changes = append(changes, &rowChange{row: r, old: oc, new: nc})
	}
	return s.applyChanges(ctx, mv, st, now, changes)
}

// applyChanges moves rows' contributions between groups and rewrites the
// touched groups' outputs.
func (s *Server) applyChanges(ctx context.Context, mv *maintView, st viewStore, now time.Time, changes []*rowChange) error {
	groups := map[string]*sqlquery.GroupState{}
	var order []string
	load := func(gid []byte) (*sqlquery.GroupState, error) {
		if g, ok := groups[string(gid)]; ok {
			return g, nil
		}
		g, err := sqlquery.LoadGroup(st, gid)
		if err != nil {
			return nil, err
		}
		groups[string(gid)] = g
		order = append(order, string(gid))
		return g, nil
	}
	for _, ch := range changes {
		if ch.global {
			if _, err := load(nil); err != nil {
				return err
			}
			if groups[""] == nil {
				groups[""] = &sqlquery.GroupState{}
			}
			continue
		}
		for _, step := range []struct {
			c    *sqlquery.Contribution
			sign int64
		}{{ch.old, -1}, {ch.new, +1}} {
			if step.c == nil {
				continue
			}
			g, err := load(step.c.Group)
			if err != nil {
				return err
			}
			if g, err = mv.ic.Apply(st, ch.row, step.c, step.sign, g); err != nil {
				return err
			}
			groups[string(step.c.Group)] = g
		}
		k := append([]byte{'C'}, ch.row...)
		if ch.new == nil {
			if err := st.Delete(k); err != nil {
				return err
			}
		} else if err := st.Set(k, sqlquery.EncodeContribution(ch.new)); err != nil {
			return err
		}
	}
	for _, gid := range order {
		g := groups[gid]
		if g == nil {
			continue
		}
		if g.HasOut {
			if err := st.Delete(outKey(g.Out, []byte(gid))); err != nil {
				return err
			}
			g.Out, g.HasOut = nil, false
		}
		if g.N > 0 || mv.ic.Global() {
			var val []byte
			vals, err := mv.ic.Output(ctx, st, []byte(gid), g, now)
			if err != nil {
				val = append([]byte{1}, err.Error()...)
				g.Out, g.HasOut = nil, true
			} else if k := viewKey(vals[mv.keyAt]); k != nil {
				val = sqlquery.EncodeValue([]byte{0}, sqlquery.Struct(vals))
				g.Out, g.HasOut = k, true
			}
			if g.HasOut {
				if err := st.Set(outKey(g.Out, []byte(gid)), val); err != nil {
					return err
				}
			}
		}
		if err := mv.ic.SaveGroup(st, []byte(gid), g); err != nil {
			return err
		}
	}
	return nil
}

// outKey is 'O' · esc(_key) · group: outputs sort by _key.
func outKey(key, gid []byte) []byte {
	k := []byte{'O'}
	for _, c := range key {
		if c == 0 {
			k = append(k, 0, 0xFF)
			continue
		}
		k = append(k, c)
	}
	k = append(k, 0, 1)
	return append(k, gid...)
}

// viewStore is a view's state space through a view batch.
type viewStore struct {
	vb    *table.ViewBatch
	space []byte
}

func (v viewStore) Get(k []byte) ([]byte, bool, error) { return v.vb.Get(v.space, k) }
func (v viewStore) Set(k, val []byte) error            { return v.vb.Set(v.space, k, val) }
func (v viewStore) Delete(k []byte) error              { return v.vb.Delete(v.space, k) }
func (v viewStore) Scan(lo, hi []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	return v.vb.Scan(v.space, lo, hi, reverse, fn)
}

func (v viewStore) deadline(row []byte) (int64, error) {
	b, ok, err := v.Get(append([]byte{'E'}, row...))
	if err != nil || !ok || len(b) != 8 {
		return 0, err
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

func dueKey(d int64, row []byte) []byte {
	return append(binary.BigEndian.AppendUint64([]byte{'D'}, uint64(d)), row...)
}

// setDeadline moves row's deadline from old to d (0: none).
func (v viewStore) setDeadline(row []byte, old, d int64) error {
	if old == d {
		return nil
	}
	if old > 0 {
		if err := v.Delete(dueKey(old, row)); err != nil {
			return err
		}
	}
	if d == 0 {
		return v.Delete(append([]byte{'E'}, row...))
	}
	if err := v.Set(dueKey(d, row), nil); err != nil {
		return err
	}
	return v.Set(append([]byte{'E'}, row...), binary.BigEndian.AppendUint64(nil, uint64(d)))
}

// dueRows lists up to limit rows whose deadline is at or before now, and,
// when it listed them all, the earliest deadline after now (0: none).
func (v viewStore) dueRows(now int64, limit int) (rows [][]byte, after int64, err error) {
	err = v.Scan([]byte{'D'}, []byte{'E'}, false, func(k, _ []byte) (bool, error) {
		if len(k) < 9 {
			return true, nil
		}
		if d := int64(binary.BigEndian.Uint64(k[1:9])); d > now {
			after = d
			return false, nil
		}
		if len(rows) == limit {
			return false, nil
		}
		rows = append(rows, bytes.Clone(k[9:]))
		return true, nil
	})
	return rows, after, err
}

// deadlines computes a row's next time-driven change from its stored cells.
type deadlines struct {
	now  int64
	ages map[string][]int64
	pol  *rowttl.Policy
}

func newDeadlines(m *table.Meta, now int64) *deadlines {
	d := &deadlines{now: now, ages: map[string][]int64{}}
	for _, f := range m.Families {
		var walk func(r gcrule.Rule)
		walk = func(r gcrule.Rule) {
			if r.Kind() == gcrule.KindMaxAge {
				d.ages[f.Name] = append(d.ages[f.Name], r.Age().Microseconds())
			}
			for _, c := range r.Children() {
				walk(c)
			}
		}
		walk(f.GC)
	}
	if m.RowPolicy != nil {
		p := rowttl.FromTable(*m.RowPolicy)
		d.pol = &p
	}
	return d
}

// consider returns the earlier of cur (0: none) and the next time after now
// at which c's visibility may change: its native expiry, its passing one of
// its family's max ages, the row deletion policy's column passing the
// policy's interval (each at the moment and a microsecond after). It may be early (a cell an intersection rule keeps),
// never late.
func (d *deadlines) consider(cur int64, c table.RawCell) int64 {
	// Whether a cell goes at its time t or just after it, the row is
	// looked at again at both.
	take := func(t int64) {
		for _, at := range [2]int64{t, t + 1} {
			if at > d.now && (cur == 0 || at < cur) {
				cur = at
			}
		}
	}
	if c.ExpireAt > 0 {
		take(c.ExpireAt)
	}
	for _, a := range d.ages[c.Family] {
		take(c.Timestamp + a)
	}
	if d.pol != nil && c.Family == d.pol.Family && string(c.Qualifier) == string(d.pol.Qualifier) {
		if ts, ok := rowttl.ParseTimestamp(c.Value); ok {
			take(ts + d.pol.Days*24*time.Hour.Microseconds())
		}
	}
	return cur
}

// maintainedRows brings the view up to now and calls fn with its output
// rows in _key order (those of keys only, when keys is not empty). ok is
// false when the view is not maintained; the caller then computes it.
func (s *Server) maintainedRows(ctx context.Context, inst, id string, keys [][]byte, fn func([]sqlquery.Value) error) (ok bool, err error) {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, bytes.Compare)
	keys = slices.CompactFunc(keys, bytes.Equal)
	var ranges []table.RowRange
	for _, k := range keys {
		ranges = append(ranges, table.RowRange{Start: k, End: append(bytes.Clone(k), 0)})
	}
	return s.scanKept(ctx, inst, id, ranges, nil, func(_ []byte, row []sqlquery.Value) error { return fn(row) })
}

// dropView deletes a deleted view's state, and stops the log of a table no
// other maintained view reads.
func (s *Server) dropView(inst, id string) error {
	s.mviews.changed()
	vb := s.engine.NewViewBatch()
	defer vb.Close()
	if err := vb.DeleteSpace(table.ViewSpace(inst + "/" + id)); err != nil {
		return err
	}
	if err := vb.Commit(); err != nil {
		return err
	}
	s.mviews.stateGen.Add(1) // maintIdle
	index, err := s.maintIndex()
	if err != nil {
		return err
	}
	return s.unlogUnmaintained(index)
}
