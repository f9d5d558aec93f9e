package backup

import (
	"fmt"
	"path/filepath"
	"time"
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
	next, err := mf.WithHotToStandard(at, m.now())
	if err != nil {
		return nil, err
	}
	if err := writeManifest(filepath.Join(m.root, name.relDir()), next); err != nil {
		return nil, fmt.Errorf("ebbtable: update backup %s: %w", name, err)
	}
	m.backups[name] = next
	return next.clone(), nil
}
