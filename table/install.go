package table

import "fmt"

// InstallTable adds a table with schema m as it stands, the table's and
// its families' ids included: a node joining a cluster takes the tables
// the other nodes have, whose cells (moved to it later) carry those ids.
// A name or id in use fails (ErrTableExists, ErrPrecondition).
func (e *Engine) InstallTable(m *Meta) (*Meta, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	if err := validTableName(m.Name); err != nil {
		return nil, err
	}
	if m.ID == 0 {
		return nil, fmt.Errorf("%w: table %s to install has no id", ErrInvalid, m.Name)
	}
	for _, f := range m.Families {
		if f.ID == 0 || f.ID > m.NextFamilyID {
			return nil, fmt.Errorf("%w: table %s to install: family %q has id %d (next %d)", ErrInvalid, m.Name, f.Name, f.ID, m.NextFamilyID)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.insertTableLocked(m); err != nil {
		return nil, err
	}
	return m, nil
}
