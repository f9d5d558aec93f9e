package server

import (
	"errors"
	"slices"
	"sync"

	"github.com/ebbtable/ebbtable/sqlquery"
)

// Prepared plans of the views maintained here. Planning a view's query
// (sqlquery.Prepare: a parse and a plan) is far dearer than checking that
// what it was planned against is unchanged, and maintIndex plans every
// view again whenever a table's schema or this node's tablets change. So a
// plan is kept per instance and query text, with what planning it asked
// the catalog (each table's families, each view's query), and served again
// only while every answer is the same: a changed schema or view is planned
// anew.

// viewPlans is the cache; the zero value is ready.
type viewPlans struct {
	mu sync.Mutex
	m  map[string]*viewPlan // instance + "\x00" + query
	// prepares counts the plans made (tests).
	prepares int
}

// viewPlan is one prepared plan and what it depends on.
type viewPlan struct {
	plan *sqlquery.Plan
	deps []planDep
	// used is the rebuild of the index that last used it (prune).
	used uint64

	incrOnce sync.Once
	ic       *sqlquery.Incremental
	icErr    error

	keyOnce sync.Once
	key     []int
	keyErr  error
}

// planDep is one answer of the catalog during planning: a view's query
// (view), or a table's families (missing: no such table).
type planDep struct {
	view    bool
	name    string
	query   string
	ok      bool
	fams    []string
	missing bool
}

// recordingCatalog is the instance's table catalog, noting its answers.
type recordingCatalog struct {
	sqlquery.EngineCatalog
	rec *planRecord
}

type planRecord struct {
	deps []planDep
	// unsure: an answer was an error other than "no such table"; the plan
	// (or its failure) is not kept.
	unsure bool
}

func (c recordingCatalog) Families(name string) ([]string, error) {
	fams, err := c.EngineCatalog.Families(name)
	switch {
	case err == nil:
		c.rec.deps = append(c.rec.deps, planDep{name: name, fams: slices.Clone(fams)})
	case errors.Is(err, sqlquery.ErrNoTable):
		c.rec.deps = append(c.rec.deps, planDep{name: name, missing: true})
	default:
		c.rec.unsure = true
	}
	return fams, err
}

func (c recordingCatalog) View(name string) (string, bool) {
	q, ok := c.EngineCatalog.View(name)
	c.rec.deps = append(c.rec.deps, planDep{view: true, name: name, query: q, ok: ok})
	return q, ok
}

// current reports whether every answer the plan was made with is still
// the catalog's.
func (p *viewPlan) current(cat sqlquery.EngineCatalog) bool {
	for _, d := range p.deps {
		if d.view {
			if q, ok := cat.View(d.name); q != d.query || ok != d.ok {
				return false
			}
			continue
		}
		fams, err := cat.Families(d.name)
		if d.missing {
			if !errors.Is(err, sqlquery.ErrNoTable) {
				return false
			}
			continue
		}
		if err != nil || !slices.Equal(fams, d.fams) {
			return false
		}
	}
	return true
}

// incremental is plan.Incremental(), computed once.
func (p *viewPlan) incremental() (*sqlquery.Incremental, error) {
	p.incrOnce.Do(func() { p.ic, p.icErr = p.plan.Incremental() })
	return p.ic, p.icErr
}

// materializedKey is plan.MaterializedKey(query), computed once.
func (p *viewPlan) materializedKey(query string) ([]int, error) {
	p.keyOnce.Do(func() { p.key, p.keyErr = p.plan.MaterializedKey(query) })
	return p.key, p.keyErr
}

// viewPlan returns the prepared plan of query in inst, planning it if the
// kept one is stale or missing; an error is Prepare's. rebuild marks the
// plan used by that index rebuild (0: none).
func (s *Server) viewPlan(inst, query string, rebuild uint64) (*viewPlan, error) {
	c := &s.mviews.plans
	cat := s.tableCatalog(inst)
	key := inst + "\x00" + query
	c.mu.Lock()
	p := c.m[key]
	c.mu.Unlock()
	if p == nil || !p.current(cat) {
		rec := &planRecord{}
		plan, err := sqlquery.Prepare(recordingCatalog{EngineCatalog: cat, rec: rec}, query, nil)
		c.mu.Lock()
		c.prepares++
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		p = &viewPlan{plan: plan, deps: rec.deps}
		if rec.unsure {
			return p, nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*viewPlan{}
	}
	c.m[key] = p
	if rebuild > p.used {
		p.used = rebuild
	}
	return p, nil
}

// prune forgets the plans the index rebuild did not use (views deleted
// or changed).
func (c *viewPlans) prune(rebuild uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, p := range c.m {
		if p.used < rebuild {
			delete(c.m, k)
		}
	}
}
