package server

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/ebbtable/ebbtable/backup"
	"github.com/ebbtable/ebbtable/schedule"
)

// Automated backups: every table with an automated backup policy (see
// tableext.go) gets a backup on this process's cluster once per frequency
// (24 hours), kept for the policy's retention (its expire time; the backup
// expiry loop deletes it then). The check runs every
// autoBackupCheckInterval on the injected clock; a backup is due when the
// table's newest automated backup started a frequency or more ago, or it
// has none. Turning the policy off keeps the backups already taken until
// they expire, as Cloud Bigtable does.

const autoBackupCheckInterval = time.Minute

// startAutoBackups starts the loop; Server.Close stops it.
func (s *Server) startAutoBackups() *schedule.Loop {
	return schedule.Start(schedule.Options{Name: "automated backups", Interval: autoBackupCheckInterval,
		MaxBackoff: time.Hour, Clock: s.opts.Clock, Logger: s.log}, s.takeAutoBackups)
}

// takeAutoBackups starts the backups that are due and returns the first
// error met (the others are still tried).
func (s *Server) takeAutoBackups(ctx context.Context) error {
	var first error
	for _, m := range s.engine.Tables("") {
		if ctx.Err() != nil {
			return nil
		}
		ref := tableRef{instance: m.Instance, table: m.Name}
		ext, err := s.tableExt(ref)
		if err != nil {
			first = errors.Join(first, err)
			continue
		}
		p := ext.GetAutomatedBackupPolicy()
		if p == nil {
			continue
		}
		now := s.opts.Clock.Now()
		src := ref.name()
		var newest time.Time
		for _, mf := range s.backups.List(m.Instance, s.opts.ClusterID) {
			if mf.Automated && mf.SourceTable == src && mf.StartTime.After(newest) {
				newest = mf.StartTime
			}
		}
		if !newest.IsZero() && now.Sub(newest) < p.GetFrequency().AsDuration() {
			continue
		}
		id := m.Name
		if len(id) > 30 {
			id = id[:30]
		}
		id = strings.TrimRight(id, "-.") + "-" + now.UTC().Format("20060102-150405")
		name := backup.Name{Instance: m.Instance, Cluster: s.opts.ClusterID, ID: id}
		_, job, err := s.backups.CreateWith(name, m.Name, now.Add(p.GetRetentionPeriod().AsDuration()), backup.CreateOptions{Automated: true})
		if err != nil {
			first = errors.Join(first, err)
			continue
		}
		if _, err := job.Result(); err != nil {
			first = errors.Join(first, err)
			continue
		}
		s.log.Info("automated backup taken", "table", src, "backup", name.String(), "expires", now.Add(p.GetRetentionPeriod().AsDuration()).UTC().Format(time.RFC3339))
	}
	return first
}
