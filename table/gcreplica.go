package table

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
)

// Garbage collection across clusters, the engine's half (docs/replication.md, "GC across
// clusters"). Age-based collection runs in each cluster on its own clock, so
// raising a family's max age on a replicated table is bounded: a cluster that
// already collected under the old age cannot get those cells back, while a
// cluster that had not yet collected them keeps them under the new one.

// MaxReplicatedAgeRaise is how far one local change may raise a family's
// max age while the engine replicates.
const MaxReplicatedAgeRaise = 90 * 24 * time.Hour

// checkAgeRaise refuses, while replicating, a local rule change that raises
// the family's longest max age by more than MaxReplicatedAgeRaise. Removing
// every age term of a rule that had one is an unbounded raise.
func (e *Engine) checkAgeRaise(tableName string, f Family, next gcrule.Rule) error {
	if _, ok := e.Replicating(); !ok {
		return nil
	}
	before := f.GC.MaxMaxAge()
	if before == 0 {
		return nil // no age term before: nothing was collected by age
	}
	after := next.MaxMaxAge()
	if after != 0 && after-before <= MaxReplicatedAgeRaise {
		return nil
	}
	return fmt.Errorf("%w: table %s is replicated: family %q's max age may be raised by at most 90 days at a time (from %s to %s); raise it in steps of at most 90 days",
		ErrPrecondition, tableName, f.Name, fmtAge(before), fmtAge(after))
}

// fmtAge writes a max age in days when it is whole days; 0 is no max age.
func fmtAge(d time.Duration) string {
	switch {
	case d == 0:
		return "no max age"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// metaKindAgeCutoff keys the collector's age cutoffs: tableID | familyID →
// cutoff (micros, big endian).
const metaKindAgeCutoff = "gccut"

func ageCutoffPrefix(tableID uint64) []byte {
	return storage.MetaKey(metaKindAgeCutoff, string(binary.BigEndian.AppendUint64(nil, tableID)))
}

func ageCutoffKey(tableID uint64, familyID uint32) []byte {
	return binary.BigEndian.AppendUint32(ageCutoffPrefix(tableID), familyID)
}

// AgeCutoff returns the age cutoff the collector recorded for a family: the
// time below which it has collected the cells its age terms make eligible.
func (e *Engine) AgeCutoff(m *Meta, familyID uint32) (int64, bool, error) {
	if err := e.checkOpen(); err != nil {
		return 0, false, err
	}
	v, closer, err := e.store.Get(ageCutoffKey(m.ID, familyID))
	if err == pebble.ErrNotFound {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, false, fmt.Errorf("%w: age cutoff %x", storage.ErrCorruptKey, v)
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

// SetAgeCutoff records a family's age cutoff. Not synced: a cutoff lost in a
// crash is recorded again by the next pass. (It runs inside schema changes,
// through the schema hook, so it does not enter the engine again.)
func (e *Engine) SetAgeCutoff(m *Meta, familyID uint32, cutoff int64) error {
	if err := e.checkOpen(); err != nil {
		return err
	}
	return e.store.Set(ageCutoffKey(m.ID, familyID), binary.BigEndian.AppendUint64(nil, uint64(cutoff)), pebble.NoSync)
}

// clearAgeCutoffs forgets a dropped family's cutoff.
func (e *Engine) clearAgeCutoffs(tableID uint64, familyID uint32) error {
	return e.store.Delete(ageCutoffKey(tableID, familyID), pebble.NoSync)
}
