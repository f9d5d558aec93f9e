package backup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/internal/durable"
	"github.com/ebbtable/ebbtable/progress"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

// Expiry windows, as the Admin API sets them: a backup's expire time lies
// between MinExpiry and MaxExpiry after its start time; a copy's between
// MinExpiry and MaxCopyExpiry after the copy request.
const (
	MinExpiry     = 6 * time.Hour
	MaxExpiry     = 90 * 24 * time.Hour
	MaxCopyExpiry = 30 * 24 * time.Hour
)

// Options configures a Manager.
type Options struct {
	// DataDir is the server's data directory; backups live in
	// DataDir/backups. Required.
	DataDir string
	// Engine is the table engine backups are taken from and restored into.
	// Required.
	Engine Engine
	// ExpiryInterval is how often the background loop deletes expired
	// backups. Default 1m.
	ExpiryInterval time.Duration
	// FileBytes is the target size of one backup SSTable. Default 64 MiB.
	FileBytes int64
	// Clock; nil means the engine's clock.
	Clock  clock.Clock
	Logger *slog.Logger
	// Registerer receives the metrics; nil means they are not exported.
	Registerer prometheus.Registerer
}

// EnsureDefaults fills unset options.
func (o *Options) EnsureDefaults() {
	if o.ExpiryInterval == 0 {
		o.ExpiryInterval = time.Minute
	}
	if o.FileBytes == 0 {
		o.FileBytes = 64 << 20
	}
	if o.Clock == nil && o.Engine != nil {
		o.Clock = o.Engine.Clock()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	if o.DataDir == "" || o.Engine == nil {
		return fmt.Errorf("%w: backups need a data directory and an engine", table.ErrInvalid)
	}
	if o.ExpiryInterval < 0 || o.FileBytes < 0 {
		return fmt.Errorf("%w: backup expiry interval and file size must not be negative", table.ErrInvalid)
	}
	return nil
}

// Manager creates, lists, updates, deletes, copies and restores backups,
// and deletes expired ones in the background.
//
// On disk a backup is DataDir/backups/PROJECT/INSTANCE/CLUSTER/ID/ holding
// MANIFEST.json and its SSTables. It is written in DataDir/backups/.tmp-*
// and renamed into place once complete and synced, and deleted by renaming
// it to DataDir/backups/.del-* first, so a crash never leaves a half-made
// or half-deleted backup visible; New removes the leftovers.
type Manager struct {
	opts Options
	eng  Engine
	root string
	log  *slog.Logger
	m    *metrics
	// report, when set, replaces the gauges' totals (metrics.go).
	report atomic.Pointer[Totals]

	mu       sync.Mutex
	backups  map[Name]*Manifest // ready
	creating map[Name]*Manifest
	busy     map[Name]int            // restores and copies reading a backup
	sweeps   []func(context.Context) // OnExpiry
	closed   bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // jobs and the expiry loop
	loop   bool
}

// New opens the backups of a data directory, removing what a crash left
// half-made or half-deleted.
func New(opts Options) (*Manager, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	m := &Manager{
		opts:     opts,
		eng:      opts.Engine,
		root:     filepath.Join(opts.DataDir, "backups"),
		log:      opts.Logger,
		backups:  map[Name]*Manifest{},
		creating: map[Name]*Manifest{},
		busy:     map[Name]int{},
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if err := m.load(); err != nil {
		return nil, err
	}
	m.m = newMetrics(opts.Registerer, m)
	return m, nil
}

// load removes leftovers at the root and reads every manifest.
func (m *Manager) load() error {
	entries, err := os.ReadDir(m.root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ebbtable: read backups: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			if err := os.RemoveAll(filepath.Join(m.root, e.Name())); err != nil {
				return fmt.Errorf("ebbtable: remove unfinished backup work %s: %w", e.Name(), err)
			}
			m.log.Info("removed unfinished backup work", "path", e.Name())
		}
	}
	// PROJECT/INSTANCE/CLUSTER/ID/MANIFEST.json
	paths, err := filepath.Glob(filepath.Join(m.root, "*", "*", "*", "*", manifestFile))
	if err != nil {
		return err
	}
	for _, p := range paths {
		dir := filepath.Dir(p)
		rel, _ := filepath.Rel(m.root, dir)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if strings.HasPrefix(parts[0], ".") {
			continue
		}
		project, err1 := unescape(parts[0])
		instance, err2 := unescape(parts[1])
		cluster, err3 := unescape(parts[2])
		if err := errors.Join(err1, err2, err3); err != nil {
			m.log.Warn("skipping a backup directory with a bad name", "path", dir, "err", err)
			continue
		}
		name := Name{Instance: "projects/" + project + "/instances/" + instance, Cluster: cluster, ID: parts[3]}
		// A manifest update cut short leaves its temporary file.
		os.Remove(filepath.Join(dir, manifestFile+".tmp"))
		mf, err := readManifest(dir, name)
		if err != nil {
			m.log.Warn("skipping an unreadable backup", "path", dir, "err", err)
			continue
		}
		m.backups[name] = mf
	}
	return nil
}

func unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("bad escape in %q", s)
		}
		v, err := hex.DecodeString(s[i+1 : i+3])
		if err != nil {
			return "", fmt.Errorf("bad escape in %q", s)
		}
		b.Write(v)
		i += 2
	}
	return b.String(), nil
}

// Start runs the expiry loop in the background until Stop.
func (m *Manager) Start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.loop || m.closed {
		return
	}
	m.loop = true
	m.wg.Add(1)
	go m.expiryLoop()
}

// Stop cancels running jobs and the expiry loop and waits for them. Call it
// before closing the engine. Jobs cut short clean up after themselves.
func (m *Manager) Stop() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
}

// Job is a backup operation running in the background.
type Job[T any] struct {
	done     chan struct{}
	res      T
	err      error
	progress *progress.Op
}

func newJob[T any]() *Job[T] { return &Job[T]{done: make(chan struct{}), progress: progress.NewOp()} }

// Progress reports how far the job has come.
func (j *Job[T]) Progress() *progress.Op { return j.progress }

func (j *Job[T]) finish(res T, err error) {
	j.progress.Finish()
	j.res, j.err = res, err
	close(j.done)
}

// Done is closed when the job has finished.
func (j *Job[T]) Done() <-chan struct{} { return j.done }

// Result is the job's outcome; call it after Done is closed.
func (j *Job[T]) Result() (T, error) {
	<-j.done
	return j.res, j.err
}

// goJob runs f as a tracked job unless the manager is stopping.
func (m *Manager) goJobLocked(f func(ctx context.Context)) error {
	if m.closed {
		return table.ErrClosed
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f(m.ctx)
	}()
	return nil
}

func (m *Manager) now() time.Time { return m.opts.Clock.Now() }

func checkExpiry(expire, from time.Time, max time.Duration) error {
	if expire.IsZero() {
		return fmt.Errorf("%w: expire_time is required", table.ErrInvalid)
	}
	if expire.Before(from.Add(MinExpiry)) || expire.After(from.Add(max)) {
		return fmt.Errorf("%w: expire_time %s must be between %s and %s (6 hours to %d days after %s)",
			table.ErrInvalid, expire.UTC().Format(time.RFC3339), from.Add(MinExpiry).UTC().Format(time.RFC3339),
			from.Add(max).UTC().Format(time.RFC3339), int(max.Hours()/24), from.UTC().Format(time.RFC3339))
	}
	return nil
}

// tempDir makes a fresh working directory at the backups root.
func (m *Manager) tempDir(kind string) (string, error) {
	if err := mkdirSynced(m.root); err != nil {
		return "", err
	}
	var r [8]byte
	rand.Read(r[:])
	dir := filepath.Join(m.root, ".tmp-"+kind+"-"+hex.EncodeToString(r[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// publish renames a complete, synced temporary directory to the backup's
// place and syncs the parent, making it visible atomically.
func (m *Manager) publish(tmp string, name Name) error {
	dst := filepath.Join(m.root, name.relDir())
	if err := mkdirSynced(filepath.Dir(dst)); err != nil {
		return err
	}
	if err := durable.SyncDir(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	return errors.Join(durable.SyncDir(filepath.Dir(dst)), durable.SyncDir(m.root))
}

// Create starts a backup of table sourceTable (a table id in name's
// instance) that expires at expire. The table's image is taken now, before
// Create returns; the SSTables are written by the returned job. Errors
// about the request (bad names or expiry, no such table, backup exists)
// are returned at once.
func (m *Manager) Create(name Name, sourceTable string, expire time.Time) (*Manifest, *Job[*Manifest], error) {
	return m.CreateWith(name, sourceTable, expire, CreateOptions{})
}

// CreateOptions are a backup's optional settings.
type CreateOptions struct {
	// Hot makes a hot backup; HotToStandard (zero: never) is when it
	// turns standard.
	Hot           bool
	HotToStandard time.Time
	// Automated marks a backup taken by an automated backup policy.
	Automated bool
}

// CreateWith is Create with options.
func (m *Manager) CreateWith(name Name, sourceTable string, expire time.Time, opt CreateOptions) (*Manifest, *Job[*Manifest], error) {
	if err := name.validate(); err != nil {
		return nil, nil, err
	}
	start := m.now()
	if err := checkExpiry(expire, start, MaxExpiry); err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.backups[name] != nil || m.creating[name] != nil {
		return nil, nil, fmt.Errorf("%w: %s", ErrExists, name)
	}
	snap, err := m.eng.SnapshotTable(name.Instance, sourceTable)
	if err != nil {
		return nil, nil, err
	}
	mf := &Manifest{
		Format:      formatVersion,
		Name:        name.String(),
		SourceTable: name.Instance + "/tables/" + sourceTable,
		Schema:      snap.Meta,
		VersionTime: snap.Time,
		StartTime:   start,
		ExpireTime:  expire,
		State:       Creating,
		name:        name,
		Hot:         opt.Hot || !opt.HotToStandard.IsZero(),
		Automated:   opt.Automated,
	}
	if !opt.HotToStandard.IsZero() {
		if !opt.HotToStandard.After(start) {
			snap.Close()
			return nil, nil, fmt.Errorf("%w: hot_to_standard_time %s is not in the future", table.ErrInvalid, opt.HotToStandard.Format(time.RFC3339))
		}
		hts := opt.HotToStandard
		mf.HotToStandard = &hts
	}
	job := newJob[*Manifest]()
	if err := m.goJobLocked(func(ctx context.Context) {
		job.progress.Phase("backup "+name.ID, "cells", -1)
		done, err := m.write(progress.NewContext(ctx, job.progress), mf.clone(), snap)
		m.mu.Lock()
		delete(m.creating, name)
		if err == nil {
			m.backups[name] = done
		}
		m.mu.Unlock()
		if err != nil {
			m.log.Error("backup failed", "backup", name.String(), "err", err)
		}
		m.m.done("create", err)
		job.finish(done, err)
	}); err != nil {
		snap.Close()
		return nil, nil, err
	}
	m.creating[name] = mf
	return mf.clone(), job, nil
}

// write copies a snapshot's cells into SSTables and publishes the backup.
func (m *Manager) write(ctx context.Context, mf *Manifest, snap *table.TableSnapshot) (_ *Manifest, err error) {
	defer snap.Close()
	tmp, err := m.tempDir("backup")
	if err != nil {
		return nil, fmt.Errorf("ebbtable: backup %s: %w", mf.Name, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	it, err := snap.Iter()
	if err != nil {
		return nil, err
	}
	// Cells of dropped families are invisible and stay behind.
	keep := func(k []byte) (bool, error) {
		fam, err := storage.CellFamilyID(k)
		if err != nil {
			return false, err
		}
		_, ok := snap.Meta.FamilyByID(fam)
		return ok, nil
	}
	w := newSSTWriter(tmp, m.eng, m.opts.FileBytes)
	cells, err := copyCells(ctx, it, w, backupTableID, keep)
	err = errors.Join(err, it.Close())
	if err != nil {
		w.abort()
		return nil, fmt.Errorf("ebbtable: backup %s: %w", mf.Name, err)
	}
	files, err := w.finish()
	if err != nil {
		return nil, fmt.Errorf("ebbtable: backup %s: %w", mf.Name, err)
	}
	mf.Files, mf.Cells = files, cells
	for _, f := range files {
		mf.SizeBytes += f.Bytes
	}
	mf.EndTime = m.now()
	mf.State = Ready
	if err := writeManifest(tmp, mf); err != nil {
		return nil, fmt.Errorf("ebbtable: backup %s: %w", mf.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := m.publish(tmp, mf.name); err != nil {
		return nil, fmt.Errorf("ebbtable: backup %s: %w", mf.Name, err)
	}
	return mf.clone(), nil
}

// Get returns a backup's manifest (state Creating while it is written).
func (m *Manager) Get(name Name) (*Manifest, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mf := m.backups[name]; mf != nil {
		return mf.clone(), nil
	}
	if mf := m.creating[name]; mf != nil {
		return mf.clone(), nil
	}
	return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
}

// List returns the backups of an instance, in one cluster or in all
// ("" or "-"), ordered by name.
func (m *Manager) List(instance, cluster string) []*Manifest {
	m.mu.Lock()
	var out []*Manifest
	for _, set := range []map[Name]*Manifest{m.backups, m.creating} {
		for n, mf := range set {
			if n.Instance == instance && (cluster == "" || cluster == "-" || cluster == n.Cluster) {
				out = append(out, mf.clone())
			}
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// UpdateExpiry changes a backup's expire time, which must lie 6 hours to 90
// days after the backup's start time and after now.
func (m *Manager) UpdateExpiry(name Name, expire time.Time) (*Manifest, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mf, err := m.readyLocked(name)
	if err != nil {
		return nil, err
	}
	next, err := mf.WithExpiry(expire, m.now())
	if err != nil {
		return nil, err
	}
	if err := writeManifest(filepath.Join(m.root, name.relDir()), next); err != nil {
		return nil, fmt.Errorf("ebbtable: update backup %s: %w", name, err)
	}
	m.backups[name] = next
	return next.clone(), nil
}

// Delete removes a backup. A backup being created, restored or copied
// cannot be deleted (FailedPrecondition).
func (m *Manager) Delete(name Name) error {
	m.mu.Lock()
	trash, err := m.deleteLocked(name)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	m.removeTrash(name, trash)
	return nil
}

// readyLocked is the manifest of a finished backup: NotFound when there is
// none, FailedPrecondition while it is still being created. m.mu is held.
func (m *Manager) readyLocked(name Name) (*Manifest, error) {
	if mf := m.backups[name]; mf != nil {
		return mf, nil
	}
	if m.creating[name] != nil {
		return nil, fmt.Errorf("%w: backup %s is still being created", table.ErrPrecondition, name)
	}
	return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
}

// deleteLocked makes a backup disappear: its directory is renamed out of
// the way (durably) and forgotten. The caller removes the returned trash
// directory after releasing m.mu.
func (m *Manager) deleteLocked(name Name) (trash string, err error) {
	if _, err := m.readyLocked(name); err != nil {
		return "", err
	}
	if m.busy[name] > 0 {
		return "", fmt.Errorf("%w: backup %s is being restored or copied", table.ErrPrecondition, name)
	}
	dir := filepath.Join(m.root, name.relDir())
	var r [8]byte
	rand.Read(r[:])
	trash = filepath.Join(m.root, ".del-"+hex.EncodeToString(r[:]))
	if err := os.Rename(dir, trash); err != nil {
		return "", fmt.Errorf("ebbtable: delete backup %s: %w", name, err)
	}
	if err := errors.Join(durable.SyncDir(filepath.Dir(dir)), durable.SyncDir(m.root)); err != nil {
		return "", fmt.Errorf("ebbtable: delete backup %s: %w", name, err)
	}
	delete(m.backups, name)
	return trash, nil
}

// removeTrash deletes the files of a deleted backup; leftovers are removed
// at the next start.
func (m *Manager) removeTrash(name Name, trash string) {
	if err := os.RemoveAll(trash); err != nil {
		m.log.Warn("backup deleted but its files remain until the next start", "backup", name.String(), "path", trash, "err", err)
	}
}

// acquire marks a ready backup as being read, so it is not deleted under
// a restore or a copy.
func (m *Manager) acquireLocked(name Name) (*Manifest, error) {
	mf, err := m.readyLocked(name)
	if err != nil {
		return nil, err
	}
	if !mf.ExpireTime.After(m.now()) {
		return nil, fmt.Errorf("%w: backup %s expired at %s and is about to be deleted", table.ErrPrecondition, name, mf.ExpireTime.UTC().Format(time.RFC3339))
	}
	m.busy[name]++
	return mf.clone(), nil
}

func (m *Manager) release(name Name) {
	m.mu.Lock()
	m.releaseLocked(name)
	m.mu.Unlock()
}

func (m *Manager) releaseLocked(name Name) {
	if m.busy[name]--; m.busy[name] <= 0 {
		delete(m.busy, name)
	}
}

// Copy starts copying backup src to dst, which expires at expire (6 hours
// to 30 days from now). The copy shares nothing with the source: its files
// are hard links (or copies), so deleting one leaves the other whole.
func (m *Manager) Copy(src, dst Name, expire time.Time) (*Manifest, *Job[*Manifest], error) {
	if err := dst.validate(); err != nil {
		return nil, nil, err
	}
	start := m.now()
	if err := checkExpiry(expire, start, MaxCopyExpiry); err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.backups[dst] != nil || m.creating[dst] != nil {
		return nil, nil, fmt.Errorf("%w: %s", ErrExists, dst)
	}
	orig, err := m.acquireLocked(src)
	if err != nil {
		return nil, nil, err
	}
	mf := orig.clone()
	mf.Name, mf.name = dst.String(), dst
	mf.SourceBackup = src.String()
	mf.StartTime, mf.EndTime, mf.ExpireTime = start, time.Time{}, expire
	mf.State = Creating
	job := newJob[*Manifest]()
	if err := m.goJobLocked(func(ctx context.Context) {
		done, err := m.copyFiles(ctx, orig, mf.clone())
		m.release(src)
		m.mu.Lock()
		delete(m.creating, dst)
		if err == nil {
			m.backups[dst] = done
		}
		m.mu.Unlock()
		m.m.done("copy", err)
		job.finish(done, err)
	}); err != nil {
		m.releaseLocked(src)
		return nil, nil, err
	}
	m.creating[dst] = mf
	return mf.clone(), job, nil
}

func (m *Manager) copyFiles(ctx context.Context, src, mf *Manifest) (_ *Manifest, err error) {
	tmp, err := m.tempDir("copy")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	from := filepath.Join(m.root, src.name.relDir())
	for _, f := range src.Files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := linkOrCopy(filepath.Join(from, f.Name), filepath.Join(tmp, f.Name)); err != nil {
			return nil, fmt.Errorf("ebbtable: copy backup %s: %w", src.Name, err)
		}
	}
	mf.EndTime = m.now()
	mf.State = Ready
	if err := writeManifest(tmp, mf); err != nil {
		return nil, err
	}
	if err := m.publish(tmp, mf.name); err != nil {
		return nil, err
	}
	return mf.clone(), nil
}

// linkOrCopy hard-links src to dst, or copies it (synced) where links fail.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return durable.WriteFile(dst, b)
}
