package server

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/ebbtable/ebbtable/backup"
	"github.com/ebbtable/ebbtable/schedule"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
		list := s.backups.List(m.Instance, s.opts.ClusterID)
		if s.cluster != nil {
			// A cluster's backups: every tablet, from its owner
			// (clusterbackup.go).
			if list, err = s.cluster.listBackups(ctx, m.Instance, s.opts.ClusterID); err != nil {
				first = errors.Join(first, err)
				continue
			}
		}
		for _, mf := range list {
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
		at := now
		if s.cluster != nil {
			// Every node has the table's policy: nodes checking within
			// the same minute pick the same name, and one of them makes
			// it (the others see it exists); a later one sees it listed.
			at = now.Truncate(time.Minute)
		}
		id = strings.TrimRight(id, "-.") + "-" + at.UTC().Format("20060102-150405")
		name := backup.Name{Instance: m.Instance, Cluster: s.opts.ClusterID, ID: id}
		if s.cluster != nil {
			err = s.cluster.createBackupAndWait(ctx, name, ref, now.Add(p.GetRetentionPeriod().AsDuration()), backup.CreateOptions{Automated: true})
			if status.Code(err) == codes.AlreadyExists {
				continue
			}
		} else {
			var job *backup.Job[*backup.Manifest]
			if _, job, err = s.backups.CreateWith(name, m.Name, now.Add(p.GetRetentionPeriod().AsDuration()), backup.CreateOptions{Automated: true}); err == nil {
				_, err = job.Result()
			}
		}
		if err != nil {
			first = errors.Join(first, err)
			continue
		}
		s.log.Info("automated backup taken", "table", src, "backup", name.String(), "expires", now.Add(p.GetRetentionPeriod().AsDuration()).UTC().Format(time.RFC3339))
	}
	return first
}
