package collector

import (
	"github.com/ebbtable/ebbtable/table"
)

// Age cutoffs (docs/replication.md, "GC across clusters"). Each cluster collects by age on
// its own, so after a max-age raise clusters may hold different cells. Each
// family's age cutoff says how far this cluster has collected: at every
// pass it becomes max(previous cutoff, pass time − the rule's shortest max
// age). It never goes back — what was collected below it is gone even if
// the rule is loosened — and it is kept in the engine's metadata, so a
// restart keeps it; dropping the family forgets it.

// AgeCutoff is one family's age cutoff.
type AgeCutoff struct {
	Instance, Table, Family string
	// Cutoff is in microseconds since the epoch.
	Cutoff int64
}

// decidesVersions says whether this cluster collects versions-eligible cells.
func (c *Collector) decidesVersions() bool {
	return c.opts.DecidesVersions == nil || c.opts.DecidesVersions()
}

// advanceAgeCutoffs records, after a sweep of m at now, the cutoff of each
// swept family with an age term.
func (c *Collector) advanceAgeCutoffs(m *table.Meta, now int64, onlyFamily uint32, held map[uint32]bool) error {
	// A pass and a schema hook's sweep may finish together.
	c.cutMu.Lock()
	defer c.cutMu.Unlock()
	for _, f := range m.Families {
		if (onlyFamily != sweepAll && f.ID != onlyFamily) || held[f.ID] {
			continue
		}
		a := f.GC.MinMaxAge()
		if a <= 0 {
			continue
		}
		cut := now - a.Microseconds()
		prev, ok, err := c.eng.AgeCutoff(m, f.ID)
		if err != nil {
			return err
		}
		if ok && prev >= cut {
			continue
		}
		if err := c.eng.SetAgeCutoff(m, f.ID, cut); err != nil {
			return err
		}
	}
	return nil
}

// AgeCutoffs lists the recorded age cutoffs of an instance's families ("":
// every instance's), in table order.
func (c *Collector) AgeCutoffs(instance string) ([]AgeCutoff, error) {
	var out []AgeCutoff
	for _, m := range c.eng.Tables(instance) {
		for _, f := range m.Families {
			cut, ok, err := c.eng.AgeCutoff(m, f.ID)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, AgeCutoff{Instance: m.Instance, Table: m.Name, Family: f.Name, Cutoff: cut})
			}
		}
	}
	return out, nil
}
