package backup

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/ebbtable/ebbtable/table"
)

// UpdateHotToStandard sets (nil: clears) when a hot backup turns standard.
// A standard backup has no such time (FailedPrecondition), and the time
// must be in the future.
func (m *Manager) UpdateHotToStandard(name Name, at *time.Time) (*Manifest, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mf, err := m.readyLocked(name)
	if err != nil {
		return nil, err
	}
	now := m.now()
	if !mf.Hot || (mf.HotToStandard != nil && !now.Before(*mf.HotToStandard)) {
		return nil, fmt.Errorf("%w: backup %s is a standard backup; only hot backups have a hot_to_standard_time", table.ErrPrecondition, name)
	}
	if at != nil && !at.After(now) {
		return nil, fmt.Errorf("%w: hot_to_standard_time %s is not in the future", table.ErrInvalid, at.UTC().Format(time.RFC3339))
	}
	next := mf.clone()
	next.HotToStandard = nil
	if at != nil {
		t := *at
		next.HotToStandard = &t
	}
	if err := writeManifest(filepath.Join(m.root, name.relDir()), next); err != nil {
		return nil, fmt.Errorf("ebbtable: update backup %s: %w", name, err)
	}
	m.backups[name] = next
	return next.clone(), nil
}
