package server

import (
	"math"
	"net/http"
	"time"

	"github.com/ebbtable/ebbtable/console"
	"github.com/ebbtable/ebbtable/table"
)

// mountConsole serves the web console (package console) at the root of the
// HTTP port, beside /metrics, and starts its metric history.
func (s *Server) mountConsole(mux *http.ServeMux) error {
	if s.opts.ConsoleOff {
		return nil
	}
	var changes console.ChangeTail
	if s.cluster != nil {
		changes = s.consoleChanges // every tablet's records, not only this node's
	}
	c, err := console.New(console.Options{
		Engine: s.engine, Collector: s.collector, RowTTL: s.ttl, Backups: s.backups,
		Replication: s.consoleReplication, Gatherer: s.opts.Registry,
		Clock: s.opts.Clock, Logger: s.log, Cluster: s.opts.ClusterID, Writes: s.opts.ConsoleWrites,
		SQL: consoleSQL{d: &dataServer{s: s}}, Changes: changes,
	})
	if err != nil {
		return err
	}
	mux.Handle("/", c)
	s.console = c
	c.Start()
	return nil
}

// consoleReplication reports replication to the console: this cluster, its
// peers and, for table m, how far each peer's changes have been applied.
func (s *Server) consoleReplication(m *table.Meta) console.ReplicationState {
	st := console.ReplicationState{Cluster: s.opts.ClusterID, Closed: time.UnixMicro(s.engine.ClosedTimestamp()).UTC()}
	for _, p := range s.peers.list() {
		cp := console.Peer{ID: p.ID, Addr: p.Addr, Ready: p.Ready, Healthy: s.peers.healthy(p.ID), Paused: s.repl.Paused(p.ID)}
		cp.MaxDelay, cp.HasDelay = s.repl.MaxDelay(p.ID)
		if m != nil {
			if pos, ok, err := s.replCheckpoint(m, p.ID); err == nil && ok && pos.Commit > 0 && pos.Commit < math.MaxInt64 {
				cp.Applied = time.UnixMicro(pos.Commit).UTC()
			}
		}
		st.Peers = append(st.Peers, cp)
	}
	return st
}
