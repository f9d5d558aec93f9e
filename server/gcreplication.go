package server

// isGCLeader says whether this cluster collects versions-eligible cells
// (replication.Replicator.IsGCLeader: the smallest id among itself and its
// ready, healthy peers; a cluster that does not replicate always does).
func (s *Server) isGCLeader() bool { return s.repl.IsGCLeader() }
