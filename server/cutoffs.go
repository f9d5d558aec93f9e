package server

import "github.com/ebbtable/ebbtable/table"

// ageCutoffs returns this cluster's age cutoff (micros) per family of a
// table, as its collector recorded them (docs/replication.md, "GC across clusters").
// It reads only the table's own families: pulls and scrapes call it for
// every table.
func (s *Server) ageCutoffs(m *table.Meta) map[string]int64 {
	out := map[string]int64{}
	for _, f := range m.Families {
		c, ok, err := s.engine.AgeCutoff(m, f.ID)
		if err != nil {
			s.log.Warn("reading an age cutoff", "table", m.Name, "family", f.Name, "err", err)
			continue
		}
		if ok {
			out[f.Name] = c
		}
	}
	return out
}
