package backup

import "time"

// expiryLoop deletes expired backups every ExpiryInterval on the injected
// clock until Stop.
func (m *Manager) expiryLoop() {
	defer m.wg.Done()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.opts.Clock.After(m.opts.ExpiryInterval):
		}
		m.DeleteExpired()
		m.runSweeps()
	}
}

// DeleteExpired deletes every backup whose expire time has passed and
// returns their names. A backup being restored or copied is left for the
// next round.
func (m *Manager) DeleteExpired() []Name {
	now := m.now()
	m.mu.Lock()
	var gone []Name
	trash := map[Name]string{}
	for name, mf := range m.backups {
		if mf.ExpireTime.After(now) || m.busy[name] > 0 {
			continue
		}
		dir, err := m.deleteLocked(name)
		if err != nil {
			m.log.Error("deleting an expired backup failed; will retry", "backup", name.String(), "err", err)
			continue
		}
		m.log.Info("deleted expired backup", "backup", name.String(), "expired", mf.ExpireTime.UTC().Format(time.RFC3339))
		gone = append(gone, name)
		trash[name] = dir
		m.m.expired.Inc()
	}
	m.mu.Unlock()
	for name, dir := range trash {
		m.removeTrash(name, dir)
	}
	return gone
}
