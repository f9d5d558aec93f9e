package collector

import (
	"context"
	"fmt"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/table"
)

// Holds (docs/replication.md, "GC across clusters", coordinated raise): while a family's
// age sweeps are held, passes leave its age-eligible cells alone and its
// age cutoff where it is; CollectFamilyAt still collects it, at the instant
// the coordinator chose, so every cluster stops at the same cutoff.

type holdKey struct{ instance, table, family string }

// HoldAge holds (on) or releases a family's age sweeps.
func (c *Collector) HoldAge(instance, tableName, family string, on bool) {
	c.holdMu.Lock()
	defer c.holdMu.Unlock()
	k := holdKey{instance, tableName, family}
	if !on {
		delete(c.holds, k)
		return
	}
	if c.holds == nil {
		c.holds = map[holdKey]bool{}
	}
	c.holds[k] = true
}

// heldFamilies returns the ids of m's families whose age sweeps are held.
func (c *Collector) heldFamilies(m *table.Meta) map[uint32]bool {
	c.holdMu.Lock()
	defer c.holdMu.Unlock()
	var out map[uint32]bool
	for k := range c.holds {
		if k.instance != m.Instance || k.table != m.Name {
			continue
		}
		if f, ok := m.Family(k.family); ok {
			if out == nil {
				out = map[uint32]bool{}
			}
			out[f.ID] = true
		}
	}
	return out
}

// CollectFamilyAt sweeps one family of m, under its current rule, as a pass
// starting at instant at would (holds do not apply), and advances its age
// cutoff to match. Versions-eligible cells are left to the GC leader as in
// a pass.
func (c *Collector) CollectFamilyAt(ctx context.Context, m *table.Meta, family string, at time.Time) error {
	f, ok := m.Family(family)
	if !ok {
		return fmt.Errorf("%w: %q in table %s", table.ErrFamilyNotFound, family, m.Name)
	}
	c.passMu.Lock()
	defer c.passMu.Unlock()
	_, err := c.sweepTableAt(ctx, m, f.ID, sweepRules{skipVersions: !c.decidesVersions()}, clock.Micros(at))
	return err
}
