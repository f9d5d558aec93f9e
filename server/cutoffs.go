package server

import "github.com/ebbtable/ebbtable/table"

// ageCutoffs returns this cluster's age cutoff (micros) per family of a
// table, as its collector recorded them (README "GC across clusters").
func (s *Server) ageCutoffs(m *table.Meta) map[string]int64 {
	out := map[string]int64{}
	cuts, err := s.collector.AgeCutoffs(m.Instance)
	if err != nil {
		s.log.Warn("reading age cutoffs", "table", m.Name, "err", err)
		return out
	}
	for _, c := range cuts {
		if c.Table == m.Name {
			out[c.Family] = c.Cutoff
		}
	}
	return out
}
