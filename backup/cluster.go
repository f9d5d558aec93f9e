package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

// Backups of a scale-out cluster (docs/scale-out.md, "Backups"). A table's
// tablets live on several nodes, so a cluster backup is made of parts: each
// tablet's owner writes the cells of its tablet from its own snapshot
// (WriteRows) and the server puts the files in the shared object store;
// the backup's record (Record: the manifest with its parts and its state)
// lives in etcd, where every node reads it. A restore runs on every node,
// each restoring the rows of the tablets it owns (RestoreRows). The
// coordination is the server's; this file holds what knows the format.

// Part is one tablet's share of a cluster backup: rows [Start, End) (an
// empty End is the table's end) and the SSTables with their cells, named
// relative to the manifest's Objects prefix.
type Part struct {
	Start []byte     `json:"start,omitempty"`
	End   []byte     `json:"end,omitempty"`
	Files []FileInfo `json:"files"`
	// Node is the owner that wrote it; VersionTime is when that owner
	// took its snapshot of the tablet.
	Node        string    `json:"node"`
	VersionTime time.Time `json:"version_time"`
}

// ParseName parses projects/P/instances/I/clusters/C/backups/ID.
func ParseName(s string) (Name, error) {
	i := strings.Index(s, "/clusters/")
	j := strings.Index(s, "/backups/")
	if i < 0 || j < i {
		return Name{}, fmt.Errorf("%w: %q is not a backup name", table.ErrInvalid, s)
	}
	n := Name{Instance: s[:i], Cluster: s[i+len("/clusters/") : j], ID: s[j+len("/backups/"):]}
	if err := n.validate(); err != nil {
		return Name{}, err
	}
	return n, nil
}

// ObjectPrefix is the prefix of a backup's file names in a shared object
// store: backup.PROJECT.INSTANCE.CLUSTER.ID.ATTEMPT. with every part
// escaped (dots included), flat because a shared directory store makes
// no subdirectories; the attempt keeps the files of an abandoned attempt
// apart from a later backup of the same name.
func (n Name) ObjectPrefix(attempt string) string {
	p := strings.Split(n.Instance, "/")
	return "backup." + escape(p[1]) + "." + escape(p[3]) + "." + escape(n.Cluster) + "." + escape(n.ID) + "." + escape(attempt) + "."
}

// NewClusterManifest checks a cluster backup's request and returns its
// manifest in state Creating; Complete finishes it.
func NewClusterManifest(name Name, sourceTable string, schema *table.Meta, objects string, start, expire time.Time, opt CreateOptions) (*Manifest, error) {
	if err := name.validate(); err != nil {
		return nil, err
	}
	if err := checkExpiry(expire, start, MaxExpiry); err != nil {
		return nil, err
	}
	mf := &Manifest{
		Format:      formatVersion,
		Name:        name.String(),
		SourceTable: name.Instance + "/tables/" + sourceTable,
		Schema:      schema,
		VersionTime: start,
		StartTime:   start,
		ExpireTime:  expire,
		State:       Creating,
		name:        name,
		Hot:         opt.Hot || !opt.HotToStandard.IsZero(),
		Automated:   opt.Automated,
		Objects:     objects,
	}
	if !opt.HotToStandard.IsZero() {
		if !opt.HotToStandard.After(start) {
			return nil, fmt.Errorf("%w: hot_to_standard_time %s is not in the future", table.ErrInvalid, opt.HotToStandard.Format(time.RFC3339))
		}
		hts := opt.HotToStandard
		mf.HotToStandard = &hts
	}
	return mf, nil
}

// Complete returns the manifest made Ready with its parts (in key order):
// its version time is the earliest snapshot of a part, so every write
// acknowledged before it is in the backup.
func (m *Manifest) Complete(parts []Part, end time.Time) *Manifest {
	c := m.clone()
	c.Parts = append([]Part(nil), parts...)
	c.Cells, c.SizeBytes = 0, 0
	for i, p := range parts {
		if i == 0 || p.VersionTime.Before(c.VersionTime) {
			c.VersionTime = p.VersionTime
		}
		for _, f := range p.Files {
			c.Cells += f.Cells
			c.SizeBytes += f.Bytes
		}
	}
	c.EndTime, c.State = end, Ready
	return c
}

// CopyAs is the manifest of a copy of this backup named dst, its files
// named under objects, in state Creating: it expires at expire, 6 hours
// to 30 days from now. Complete it with Copied.
func (m *Manifest) CopyAs(dst Name, objects string, now, expire time.Time) (*Manifest, error) {
	if err := dst.validate(); err != nil {
		return nil, err
	}
	if err := checkExpiry(expire, now, MaxCopyExpiry); err != nil {
		return nil, err
	}
	c := m.clone()
	c.Name, c.name = dst.String(), dst
	c.SourceBackup = m.Name
	c.StartTime, c.EndTime, c.ExpireTime = now, time.Time{}, expire
	c.Objects, c.State = objects, Creating
	return c, nil
}

// Copied is a copy's manifest made Ready.
func (m *Manifest) Copied(end time.Time) *Manifest {
	c := m.clone()
	c.EndTime, c.State = end, Ready
	return c
}

// AllFiles lists the files of every part, in key order.
func (m *Manifest) AllFiles() []FileInfo {
	out := append([]FileInfo(nil), m.Files...)
	for _, p := range m.Parts {
		out = append(out, p.Files...)
	}
	return out
}

// WithExpiry is the manifest with a new expire time, which must lie 6 hours
// to 90 days after its start time and after now.
func (m *Manifest) WithExpiry(expire, now time.Time) (*Manifest, error) {
	if err := checkExpiry(expire, m.StartTime, MaxExpiry); err != nil {
		return nil, err
	}
	if !expire.After(now) {
		return nil, fmt.Errorf("%w: expire_time %s is in the past", table.ErrInvalid, expire.UTC().Format(time.RFC3339))
	}
	next := m.clone()
	next.ExpireTime = expire
	return next, nil
}

// WithHotToStandard is the manifest of a hot backup with a new
// hot_to_standard_time (nil: never).
func (m *Manifest) WithHotToStandard(at *time.Time, now time.Time) (*Manifest, error) {
	if !m.Hot || (m.HotToStandard != nil && !now.Before(*m.HotToStandard)) {
		return nil, fmt.Errorf("%w: backup %s is a standard backup; only hot backups have a hot_to_standard_time", table.ErrPrecondition, m.Name)
	}
	if at != nil && !at.After(now) {
		return nil, fmt.Errorf("%w: hot_to_standard_time %s is not in the future", table.ErrInvalid, at.UTC().Format(time.RFC3339))
	}
	next := m.clone()
	next.HotToStandard = nil
	if at != nil {
		t := *at
		next.HotToStandard = &t
	}
	return next, nil
}

// Record is a cluster backup as etcd keeps it: the manifest (with its
// checksum), its state, and while it is being made the node making it.
type Record struct {
	State    State     `json:"state"`
	Node     string    `json:"node,omitempty"`
	Manifest *Manifest `json:"manifest"`
	// Restoring names the restores reading the backup's files (as the
	// server names makers), so it is not deleted under them.
	Restoring []string `json:"restoring,omitempty"`
}

// EncodeRecord encodes a cluster backup's record.
func EncodeRecord(mf *Manifest, node string, restoring ...string) ([]byte, error) {
	sum, err := mf.checksum()
	if err != nil {
		return nil, err
	}
	c := mf.clone()
	c.Checksum = sum
	return json.Marshal(Record{State: mf.State, Node: node, Manifest: c, Restoring: restoring})
}

// RecordRestoring is the Restoring list of an encoded record.
func RecordRestoring(b []byte) []string {
	var r struct {
		Restoring []string `json:"restoring"`
	}
	json.Unmarshal(b, &r)
	return r.Restoring
}

// DecodeRecord decodes and checks a record EncodeRecord made; it returns
// the manifest, in the record's state, and the node making it.
func DecodeRecord(b []byte) (*Manifest, string, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, "", fmt.Errorf("ebbtable: backup record: %w", err)
	}
	m := r.Manifest
	if m == nil || m.Schema == nil {
		return nil, "", fmt.Errorf("ebbtable: backup record has no manifest or schema")
	}
	if err := m.verifyChecksum(); err != nil {
		return nil, "", fmt.Errorf("ebbtable: backup record %s: %w", m.Name, err)
	}
	if m.Format != formatVersion {
		return nil, "", fmt.Errorf("ebbtable: backup record %s: format %d, this version reads %d", m.Name, m.Format, formatVersion)
	}
	name, err := ParseName(m.Name)
	if err != nil {
		return nil, "", err
	}
	if err := m.check(); err != nil {
		return nil, "", fmt.Errorf("ebbtable: backup record %s: %w", m.Name, err)
	}
	if r.State != Creating && r.State != Ready {
		return nil, "", fmt.Errorf("ebbtable: backup record %s: unknown state %d", m.Name, r.State)
	}
	m.name, m.State, m.Checksum = name, r.State, ""
	return m, r.Node, nil
}

// WriteRows writes the cells of rows [start, end) of a table snapshot into
// SSTables in dir (keys under the backup's table id, cells of dropped
// families left out), named prefix + a number, of about fileBytes each.
func WriteRows(ctx context.Context, eng SSTs, snap *table.TableSnapshot, start, end []byte, dir, prefix string, fileBytes int64) ([]FileInfo, error) {
	it, err := snap.IterRows(start, end)
	if err != nil {
		return nil, err
	}
	keep := func(k []byte) (bool, error) {
		fam, err := storage.CellFamilyID(k)
		if err != nil {
			return false, err
		}
		_, ok := snap.Meta.FamilyByID(fam)
		return ok, nil
	}
	if fileBytes <= 0 {
		fileBytes = 64 << 20
	}
	w := newSSTWriter(dir, eng, fileBytes)
	w.prefix = prefix
	_, err = copyCells(ctx, it, w, backupTableID, keep)
	if err = errors.Join(err, it.Close()); err != nil {
		w.abort()
		return nil, err
	}
	return w.finish()
}

// RowSpan is rows [Start, End); an empty End is the table's end.
type RowSpan struct{ Start, End []byte }

func (s RowSpan) holds(k []byte) bool {
	return bytes.Compare(k, storage.RowBound(backupTableID, s.Start)) >= 0 &&
		(len(s.End) == 0 || bytes.Compare(k, storage.RowBound(backupTableID, s.End)) < 0)
}

func (s RowSpan) overlaps(start, end []byte) bool {
	return (len(end) == 0 || bytes.Compare(s.Start, end) < 0) && (len(s.End) == 0 || bytes.Compare(start, s.End) < 0)
}

// PartsIn lists the files of the parts that overlap any of spans.
func (m *Manifest) PartsIn(spans []RowSpan) []FileInfo {
	var out []FileInfo
	for _, p := range m.Parts {
		for _, s := range spans {
			if s.overlaps(p.Start, p.End) {
				out = append(out, p.Files...)
				break
			}
		}
	}
	return out
}

// RestoreRows restores the cells of rows in spans from a cluster backup's
// files (already fetched into dir, as PartsIn lists them) into a restore
// begun on this node, then commits the table with the backup's schema
// (IngestRows, then CommitRestore). work is an empty scratch directory.
func RestoreRows(ctx context.Context, eng SSTs, mf *Manifest, dir string, files []FileInfo, spans []RowSpan, r *table.Restoring, retention table.Retention, work string, fileBytes int64) (*table.Meta, error) {
	if _, err := IngestRows(ctx, eng, dir, files, spans, r, work, fileBytes); err != nil {
		return nil, err
	}
	return CommitRestore(mf, r, retention)
}

// IngestRows ingests the cells of rows in spans from a cluster backup's
// files (already fetched into dir, as PartsIn lists them) into a restore
// begun on this node, without committing it: each owner of a cluster
// restore ingests its own tablets' rows so, as many times as it has
// tablets (ingesting the same rows again is harmless). It returns the
// cells ingested. work is an empty scratch directory.
func IngestRows(ctx context.Context, eng SSTs, dir string, files []FileInfo, spans []RowSpan, r *table.Restoring, work string, fileBytes int64) (int64, error) {
	if len(files) == 0 {
		return 0, nil
	}
	it, err := openSSTs(eng, dir, files)
	if err != nil {
		return 0, err
	}
	keep := func(k []byte) (bool, error) {
		for _, s := range spans {
			if s.holds(k) {
				return true, nil
			}
		}
		return false, nil
	}
	if fileBytes <= 0 {
		fileBytes = 64 << 20
	}
	w := newSSTWriter(work, eng, fileBytes)
	n, err := copyCells(ctx, it, w, r.TableID(), keep)
	if err = errors.Join(err, it.Close()); err != nil {
		w.abort()
		return 0, err
	}
	out, err := w.finish()
	if err != nil {
		return 0, err
	}
	var paths []string
	for _, f := range out {
		paths = append(paths, filepath.Join(work, f.Name))
	}
	defer func() {
		for _, p := range paths {
			os.Remove(p)
		}
	}()
	if err := r.Ingest(ctx, paths); err != nil {
		return 0, err
	}
	return n, nil
}

// CommitRestore makes a restore begun on this node visible with the
// backup's schema and restore record.
func CommitRestore(mf *Manifest, r *table.Restoring, retention table.Retention) (*table.Meta, error) {
	if retention == "" {
		retention = table.RetentionDrop
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

// Go runs f in the background as one of the manager's jobs: Stop cancels
// its context and waits for it. A cluster's backups and restores, which
// the server coordinates, run so. It fails with table.ErrClosed once the
// manager is stopping.
func (m *Manager) Go(f func(ctx context.Context)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.goJobLocked(f)
}

// OnExpiry adds f to what the expiry loop runs every ExpiryInterval,
// after deleting this manager's expired backups: a cluster's expired
// backups, whose records are in etcd, are deleted so.
func (m *Manager) OnExpiry(f func(ctx context.Context)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweeps = append(m.sweeps, f)
}

func (m *Manager) runSweeps() {
	m.mu.Lock()
	fs := append([]func(context.Context){}, m.sweeps...)
	m.mu.Unlock()
	for _, f := range fs {
		f(m.ctx)
	}
}
