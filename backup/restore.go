package backup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/progress"
	"github.com/ebbtable/ebbtable/table"
)

// Restore starts restoring backup name into a new table tableID of
// instance, with the backup's families, GC rules and splits, and the row
// deletion policy treated as retention says. A name that is taken fails
// with table.ErrTableExists at once, changing nothing.
//
// The job rewrites the backup's SSTables under the new table's id, ingests
// them and only then writes the table's schema; if anything fails, or the
// process dies, no part of the table is visible (the engine removes the
// cells of an unfinished restore when it next opens).
func (m *Manager) Restore(name Name, instance, tableID string, retention table.Retention) (*Manifest, *Job[*table.Meta], error) {
	if _, err := table.ParseRetention(string(retention)); err != nil {
		return nil, nil, err
	}
	if retention == "" {
		retention = table.RetentionDrop
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mf, err := m.acquireLocked(name)
	if err != nil {
		return nil, nil, err
	}
	r, err := m.eng.BeginRestore(instance, tableID)
	if err != nil {
		m.releaseLocked(name)
		return nil, nil, err
	}
	job := newJob[*table.Meta]()
	if err := m.goJobLocked(func(ctx context.Context) {
		job.progress.Phase("restore "+name.ID+" to "+tableID, "cells", mf.Cells)
		meta, err := m.restore(progress.NewContext(ctx, job.progress), mf, r, retention)
		m.release(name)
		if err != nil {
			if aerr := r.Abort(); aerr != nil {
				err = errors.Join(err, aerr)
			}
			m.log.Error("restore failed", "backup", name.String(), "table", tableID, "err", err)
		}
		m.m.done("restore", err)
		job.finish(meta, err)
	}); err != nil {
		r.Abort()
		m.releaseLocked(name)
		return nil, nil, err
	}
	return mf, job, nil
}

func (m *Manager) restore(ctx context.Context, mf *Manifest, r *table.Restoring, retention table.Retention) (*table.Meta, error) {
	tmp, err := m.tempDir("restore")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	files, err := m.rewrite(ctx, mf, tmp, r.TableID())
	if err != nil {
		return nil, fmt.Errorf("ebbtable: restore %s: %w", mf.Name, err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, filepath.Join(tmp, f.Name))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := r.Ingest(ctx, paths); err != nil {
		return nil, err
	}
	return r.Commit(mf.Schema, table.Restored{
		Backup:        mf.Name,
		SourceTable:   mf.SourceTable,
		SourceBackup:  mf.SourceBackup,
		StartMicros:   clock.Micros(mf.StartTime),
		EndMicros:     clock.Micros(mf.EndTime),
		VersionMicros: clock.Micros(mf.VersionTime),
		Retention:     retention,
	})
}

// rewrite copies a backup's cells into SSTables in dir with the keys moved
// to table id, ready to ingest.
func (m *Manager) rewrite(ctx context.Context, mf *Manifest, dir string, id uint64) ([]FileInfo, error) {
	if len(mf.Files) == 0 {
		return nil, nil
	}
	src := filepath.Join(m.root, mf.name.relDir())
	it, err := openSSTs(m.eng, src, mf.Files)
	if err != nil {
		return nil, err
	}
	w := newSSTWriter(dir, m.eng, m.opts.FileBytes)
	n, err := copyCells(ctx, it, w, id, nil)
	if err = errors.Join(err, it.Close()); err != nil {
		w.abort()
		return nil, err
	}
	if n != mf.Cells {
		w.abort()
		return nil, fmt.Errorf("ebbtable: backup %s holds %d cells, its manifest says %d", mf.Name, n, mf.Cells)
	}
	return w.finish()
}
