package table

import "fmt"

// CheckFamilies checks a schema that comes from outside the engine (a
// backup manifest, a peer's join snapshot) before the engine adopts it:
// family names valid and unique; ids non-zero, unique and at most
// NextFamilyID (so a family created later never takes an id whose cells
// exist); dropped ids likewise and not live; GC rules valid; aggregators
// known. Errors wrap ErrInvalid.
func (m *Meta) CheckFamilies() error {
	names := map[string]bool{}
	ids := map[uint32]bool{}
	for _, f := range m.Families {
		if err := validFamilyName(f.Name); err != nil {
			return err
		}
		if names[f.Name] {
			return fmt.Errorf("%w: column family %q declared twice", ErrInvalid, f.Name)
		}
		names[f.Name] = true
		if f.ID == 0 || f.ID > m.NextFamilyID || ids[f.ID] {
			return fmt.Errorf("%w: column family %q has id %d (next id %d, ids must be unique)", ErrInvalid, f.Name, f.ID, m.NextFamilyID)
		}
		ids[f.ID] = true
		if err := validRule(f.Name, f.GC); err != nil {
			return err
		}
		switch f.Aggregate {
		case NotAggregate, AggSum, AggMin, AggMax, AggHLL:
		default:
			return fmt.Errorf("%w: column family %q has unknown aggregator %q", ErrInvalid, f.Name, f.Aggregate)
		}
	}
	for _, id := range m.DroppedFamilies {
		if id == 0 || id > m.NextFamilyID || ids[id] {
			return fmt.Errorf("%w: dropped family id %d is live, zero or beyond the next id %d", ErrInvalid, id, m.NextFamilyID)
		}
	}
	return nil
}
