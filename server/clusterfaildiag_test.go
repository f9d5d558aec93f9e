package server

import (
	"fmt"
	"sort"
	"strings"
	"time"

	tablets "github.com/ebbtable/ebbtable/cluster"
)

// failoverState describes, for a wait on a take-over that does not come,
// where each node's take-over loop is: whether it holds its lease, which
// nodes it sees live, the plan it computes, its failed take-overs, its
// schema-log position and the step its loop is in (and for how long).
func failoverState(nodes ...*scaleNode) string {
	var out []string
	for _, n := range nodes {
		c := n.srv.cluster
		f := c.fail
		var live []string
		for _, nd := range c.m.Nodes() {
			live = append(live, nd.ID)
		}
		sort.Strings(live)
		dirs := c.m.Directories()
		plan, err := tablets.PlanTakeOvers(c.m.Nodes(), dirs, f.blockedTakers(dirs))
		var planned []string
		for _, g := range plan {
			planned = append(planned, fmt.Sprintf("%s's %s→%s", g.Dead, g.Table[strings.LastIndex(g.Table, "/")+1:], g.To))
		}
		f.failMu.Lock()
		var failed []string
		for k, at := range f.failures {
			failed = append(failed, fmt.Sprintf("%q %s ago", k, time.Since(at).Round(time.Millisecond)))
		}
		f.failMu.Unlock()
		step := "waiting"
		if s := f.step.Load(); s != nil {
			step = fmt.Sprintf("%s for %s", s.what, time.Since(s.since).Round(time.Millisecond))
		}
		out = append(out, fmt.Sprintf("%s: live=%v sees=%v plan=%v (%v) failed=%v applied=%d/%d paused=%v loop: %s",
			n.id, c.m.Live(), live, planned, err, failed, c.appliedSeq(), c.m.SchemaSeq(), f.takeOversPaused.Load(), step))
	}
	return strings.Join(out, "; ")
}
