package server

import (
	"fmt"
)

// Maintained materialized views in cluster mode (docs/sql.md, "Cluster
// mode"). A node keeps a view's state from its own engine: the view log
// names the rows its commits change, and the state is built by a scan of
// the local table. Both see only the tablets the node owns, and a tablet
// moved in (IngestSpan) or out (ExciseSpan) writes no log entries. So a
// node maintains a view, and serves its kept rows, only while it owns
// every tablet of the view's table; the state records the revision of the
// table's directory it was built at, and any change of the directory (a
// move, a split, a failover) rebuilds it with one scan when the node owns
// the whole table again. Otherwise the view is computed when read, through
// the cluster's reads, so every node answers it over every tablet.

// viewCoverage tells whether this node's engine holds the whole of inst's
// table name (always, outside a cluster or for a table that is not a
// cluster table) and, in a cluster, the directory state it holds it at.
func (s *Server) viewCoverage(inst, name string) (coverage string, whole bool) {
	if s.cluster == nil || s.cluster.m == nil {
		return "", true
	}
	d, ok := s.cluster.m.Directory(tableRef{instance: inst, table: name}.name())
	if !ok {
		return "", true
	}
	for _, t := range d.Tablets {
		if t.Owner != s.cluster.opts.NodeID {
			return "", false
		}
	}
	return fmt.Sprintf("directory %d@%d", d.TableID, d.Revision), true
}

// viewCoverageChanged reports whether the coverage a maintenance index was
// built under changed: a maintained view's table is no longer wholly here
// or its directory moved on, or a view left out for want of the whole
// table now has it.
func (s *Server) viewCoverageChanged(index map[uint64][]*maintView, skipped []tableRef) bool {
	if s.cluster == nil {
		return false
	}
	for _, vs := range index {
		for _, mv := range vs {
			if cov, whole := s.viewCoverage(mv.inst, mv.meta.Name); !whole || cov != mv.coverage {
				return true
			}
		}
	}
	for _, r := range skipped {
		if _, whole := s.viewCoverage(r.instance, r.table); whole {
			return true
		}
	}
	return false
}

// unlogUnmaintained turns off the view log of tables no maintained view
// reads (their views dropped, or their tablets no longer all here), so no
// log grows that nothing consumes.
func (s *Server) unlogUnmaintained(index map[uint64][]*maintView) error {
	for _, m := range s.engine.Tables("") {
		if !s.engine.ViewLogged(m.ID) || len(index[m.ID]) != 0 {
			continue
		}
		l := s.mviews.tableLock(m.ID)
		l.Lock()
		// Again under the table's lock: a view maintained meanwhile keeps
		// its log.
		now, err := s.maintIndex()
		if err == nil && len(now[m.ID]) == 0 {
			err = s.engine.SetViewLogged(m.ID, false)
		}
		l.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}
