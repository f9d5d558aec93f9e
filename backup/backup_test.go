package backup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/internal/testkit/poll"
	"github.com/ebbtable/ebbtable/table"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const inst = "projects/p/instances/i"

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type fixture struct {
	dir string
	clk clock.Clock
	eng *table.Engine
	mgr *Manager
}

func open(t *testing.T, dir string, clk clock.Clock) *fixture {
	t.Helper()
	eng, err := table.Open(table.Options{Dir: dir, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	// Small files, so backups of test tables span several SSTables.
	mgr, err := New(Options{DataDir: dir, Engine: eng, FileBytes: 32 << 10})
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	f := &fixture{dir: dir, clk: clk, eng: eng, mgr: mgr}
	t.Cleanup(f.close)
	return f
}

func (f *fixture) close() {
	if f.mgr != nil {
		f.mgr.Stop()
		f.mgr = nil
	}
	if f.eng != nil {
		f.eng.Close()
		f.eng = nil
	}
}

func bname(id string) Name { return Name{Instance: inst, Cluster: "c1", ID: id} }

func set(t *testing.T, e *table.Engine, tbl, row, fam, q string, ts int64, v string) {
	t.Helper()
	err := e.MutateRow(inst, tbl, []byte(row), []table.Mutation{{Kind: table.SetCell, Family: fam, Qualifier: []byte(q), Timestamp: ts, Value: []byte(v)}})
	if err != nil {
		t.Fatal(err)
	}
}

// readAll returns a table's rows as row -> family:qualifier@ts -> value.
func readAll(t *testing.T, e *table.Engine, tbl string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	err := e.ReadRows(context.Background(), inst, tbl, table.ReadRequest{}, func(r cell.Row) error {
		m := map[string]string{}
		for _, c := range r.Cells {
			m[fmt.Sprintf("%s:%s@%d", c.Family, c.Qualifier, c.Timestamp)] = string(c.Value)
		}
		out[string(r.Key)] = m
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustCreate(t *testing.T, m *Manager, name Name, tbl string, expire time.Time) *Manifest {
	t.Helper()
	_, job, err := m.Create(name, tbl, expire)
	if err != nil {
		t.Fatal(err)
	}
	mf, err := job.Result()
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

func mustRestore(t *testing.T, m *Manager, name Name, tbl string, ret table.Retention) *table.Meta {
	t.Helper()
	_, job, err := m.Restore(name, inst, tbl, ret)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := job.Result()
	if err != nil {
		t.Fatal(err)
	}
	return meta
}

func createTable(t *testing.T, e *table.Engine, name string) {
	t.Helper()
	_, err := e.CreateTable(inst, name, table.TableSpec{Families: []table.FamilySpec{
		{Name: "a"},
		{Name: "b", GC: gcrule.MaxVersions(2)},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBackupDuringWritesIsTheImageAtVersionTime writes, takes a backup,
// keeps writing (overwrites, deletes, new rows, a dropped range) while the
// backup's files are written, and checks that the restored table equals
// the source as read at the backup.
func TestBackupDuringWritesIsTheImageAtVersionTime(t *testing.T) {
	t.Parallel()
	f := open(t, t.TempDir(), clock.Real{})
	e := f.eng
	createTable(t, e, "src")
	for i := range 2000 {
		row := fmt.Sprintf("r%05d", i)
		set(t, e, "src", row, "a", "q", 1000, fmt.Sprintf("v%d-%0200d", i, 0))
		if i%3 == 0 {
			for v := range 3 {
				set(t, e, "src", row, "b", "x\x00y", int64(v+1)*1000, fmt.Sprint("b", v))
			}
		}
	}
	want := readAll(t, e, "src")

	// The image is taken inside Create; writers start as soon as it
	// returns and run while the backup's files are written.
	// (TestBackupWithConcurrentWritersIsAPrefix has writers running
	// across Create itself.)
	var stop atomic.Bool
	var wg sync.WaitGroup
	_, job, err := f.mgr.Create(bname("b1"), "src", f.clk.Now().Add(7*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load() || i < 200; i++ {
				row := fmt.Sprintf("r%05d", (i*7+w)%2500)
				var err error
				if i%5 == 0 {
					err = e.MutateRow(inst, "src", []byte(row), []table.Mutation{{Kind: table.DeleteFromRow}})
				} else {
					err = e.MutateRow(inst, "src", []byte(row), []table.Mutation{{Kind: table.SetCell, Family: "a", Qualifier: []byte("q"), Timestamp: 1000, Value: []byte(fmt.Sprint("after", w, i))}})
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	if err := e.DropRowRange(inst, "src", []byte("r000"), false); err != nil {
		t.Fatal(err)
	}
	mf, err := job.Result()
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(mf.Files) < 2 || mf.SizeBytes == 0 || mf.Cells == 0 {
		t.Errorf("manifest: %d files, %d bytes, %d cells; want several files", len(mf.Files), mf.SizeBytes, mf.Cells)
	}
	if reflect.DeepEqual(readAll(t, e, "src"), want) {
		t.Fatal("the writers changed nothing; the test proves nothing")
	}
	meta := mustRestore(t, f.mgr, bname("b1"), "dst", "")
	if got := readAll(t, e, "dst"); !reflect.DeepEqual(got, want) {
		t.Errorf("restored table differs from the source at the backup: %d rows, want %d", len(got), len(want))
	}
	src, _ := e.Table(inst, "src")
	if meta.ID == src.ID || !reflect.DeepEqual(meta.Families, src.Families) {
		t.Errorf("restored schema: id %d (source %d), families %+v, want the source's families", meta.ID, src.ID, meta.Families)
	}
	if meta.Restored == nil || meta.Restored.Retention != table.RetentionDrop || meta.Restored.Backup != bname("b1").String() {
		t.Errorf("restored record = %+v, want backup %s, retention drop", meta.Restored, bname("b1"))
	}
	// Restored tables take writes of their own.
	set(t, e, "dst", "new", "a", "q", 1000, "x")
	if _, ok := readAll(t, e, "src")["new"]; ok {
		t.Error("a write to the restored table shows in the source")
	}
}

// TestBackupWithConcurrentWritersIsAPrefix runs writers that each write
// their own rows in sequence while the backup is taken: the image must
// hold, for each writer, exactly a prefix of its writes, including every
// write acknowledged before the backup was requested.
func TestBackupWithConcurrentWritersIsAPrefix(t *testing.T) {
	f := open(t, t.TempDir(), clock.Real{})
	e := f.eng
	createTable(t, e, "src")
	const writers = 4
	var acked [writers]atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(0); !stop.Load(); i++ {
				set(t, e, "src", fmt.Sprintf("w%d-%08d", w, i), "a", "q", 1000, "v")
				acked[w].Store(i + 1)
			}
		}()
	}
	for acked[0].Load() < 200 {
		time.Sleep(time.Millisecond)
	}
	var before [writers]int64
	for w := range writers {
		before[w] = acked[w].Load()
	}
	mf := mustCreate(t, f.mgr, bname("b"), "src", f.clk.Now().Add(7*24*time.Hour))
	stop.Store(true)
	wg.Wait()
	mustRestore(t, f.mgr, bname("b"), "dst", table.RetentionPause)
	got := readAll(t, e, "dst")
	for w := range writers {
		n := int64(0)
		for ; ; n++ {
			if _, ok := got[fmt.Sprintf("w%d-%08d", w, n)]; !ok {
				break
			}
		}
		for k := range got {
			var ww int
			var i int64
			fmt.Sscanf(k, "w%d-%d", &ww, &i)
			if ww == w && i >= n {
				t.Errorf("writer %d: row %d is in the backup but row %d is not", w, i, n)
			}
		}
		if n < before[w] {
			t.Errorf("writer %d: backup holds %d writes, %d were acknowledged before it was requested", w, n, before[w])
		}
	}
	if int64(len(got)) != mf.Cells {
		t.Errorf("restored %d rows, manifest says %d cells (one each)", len(got), mf.Cells)
	}
}

func TestRestoreRefusesExistingNameAndChangesNothing(t *testing.T) {
	f := open(t, t.TempDir(), clock.Real{})
	e := f.eng
	createTable(t, e, "src")
	set(t, e, "src", "r", "a", "q", 1000, "v")
	createTable(t, e, "taken")
	set(t, e, "taken", "mine", "a", "q", 1000, "keep")
	mustCreate(t, f.mgr, bname("b"), "src", f.clk.Now().Add(7*24*time.Hour))
	before := readAll(t, e, "taken")
	_, _, err := f.mgr.Restore(bname("b"), inst, "taken", "")
	if !errors.Is(err, table.ErrTableExists) {
		t.Fatalf("restore onto an existing table: %v, want ErrTableExists", err)
	}
	if got := readAll(t, e, "taken"); !reflect.DeepEqual(got, before) {
		t.Errorf("table changed by a refused restore: %v", got)
	}
	// A name being restored is taken too.
	r, err := e.BeginRestore(inst, "pending")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateTable(inst, "pending", table.TableSpec{}); !errors.Is(err, table.ErrTableExists) {
		t.Errorf("CreateTable over a restore in progress: %v, want ErrTableExists", err)
	}
	if _, _, err := f.mgr.Restore(bname("b"), inst, "pending", ""); !errors.Is(err, table.ErrTableExists) {
		t.Errorf("restore over a restore in progress: %v, want ErrTableExists", err)
	}
	if err := r.Abort(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.mgr.Restore(bname("nope"), inst, "x", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("restore of a missing backup: %v, want ErrNotFound", err)
	}
	if _, _, err := f.mgr.Restore(bname("b"), inst, "x", "keep"); !errors.Is(err, table.ErrInvalid) {
		t.Errorf("restore with retention keep: %v, want ErrInvalid", err)
	}
	if _, _, err := f.mgr.Create(bname("b"), "src", f.clk.Now().Add(7*24*time.Hour)); !errors.Is(err, ErrExists) {
		t.Errorf("second backup with the same id: %v, want ErrExists", err)
	}
	if _, _, err := f.mgr.Create(Name{Instance: inst, Cluster: "-", ID: "x"}, "src", f.clk.Now().Add(7*24*time.Hour)); !errors.Is(err, table.ErrInvalid) {
		t.Errorf("backup in cluster \"-\": %v, want ErrInvalid", err)
	}
	if _, _, err := f.mgr.Create(bname("c"), "missing", f.clk.Now().Add(7*24*time.Hour)); !errors.Is(err, table.ErrTableNotFound) {
		t.Errorf("backup of a missing table: %v, want ErrTableNotFound", err)
	}
}

func TestExpireTimeWindow(t *testing.T) {
	clk := clock.NewFake(t0)
	f := open(t, t.TempDir(), clk)
	createTable(t, f.eng, "src")
	for _, d := range []time.Duration{0, time.Hour, 6*time.Hour - time.Second, 90*24*time.Hour + time.Second, -time.Hour} {
		exp := t0.Add(d)
		if d == 0 {
			exp = time.Time{}
		}
		if _, _, err := f.mgr.Create(bname("b"), "src", exp); !errors.Is(err, table.ErrInvalid) {
			t.Errorf("expire in %v: %v, want ErrInvalid", d, err)
		}
	}
	mustCreate(t, f.mgr, bname("b"), "src", t0.Add(6*time.Hour))
	mustCreate(t, f.mgr, bname("c"), "src", t0.Add(90*24*time.Hour))
	if _, err := f.mgr.UpdateExpiry(bname("b"), t0.Add(91*24*time.Hour)); !errors.Is(err, table.ErrInvalid) {
		t.Errorf("update past 90 days: %v, want ErrInvalid", err)
	}
	mf, err := f.mgr.UpdateExpiry(bname("b"), t0.Add(30*24*time.Hour))
	if err != nil || !mf.ExpireTime.Equal(t0.Add(30*24*time.Hour)) {
		t.Fatalf("update: %v, %v", mf, err)
	}
	// Copies expire within 30 days.
	if _, _, err := f.mgr.Copy(bname("b"), bname("cp"), t0.Add(31*24*time.Hour)); !errors.Is(err, table.ErrInvalid) {
		t.Errorf("copy expiring in 31 days: %v, want ErrInvalid", err)
	}
}

// TestExpiry moves a fake clock past expire times and watches the
// background loop delete the backups, and only those.
func TestExpiry(t *testing.T) {
	clk := clock.NewFake(t0)
	dir := t.TempDir()
	f := open(t, dir, clk)
	createTable(t, f.eng, "src")
	set(t, f.eng, "src", "r", "a", "q", 1000, "v")
	mustCreate(t, f.mgr, bname("short"), "src", t0.Add(7*time.Hour))
	mustCreate(t, f.mgr, bname("long"), "src", t0.Add(10*24*time.Hour))
	mustCreate(t, f.mgr, bname("extended"), "src", t0.Add(7*time.Hour))
	if _, err := f.mgr.UpdateExpiry(bname("extended"), t0.Add(20*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	f.mgr.Start()
	advance := func(d time.Duration) {
		t.Helper()
		waitFor(t, func() bool { return clk.Waiters() > 0 })
		clk.Advance(d)
		// The loop deletes, then parks on the clock again.
		waitFor(t, func() bool { return clk.Waiters() > 0 })
	}
	advance(6 * time.Hour)
	if got := names(f.mgr.List(inst, "-")); !reflect.DeepEqual(got, []string{"extended", "long", "short"}) {
		t.Fatalf("after 6h: %v", got)
	}
	advance(time.Hour)
	if got := names(f.mgr.List(inst, "-")); !reflect.DeepEqual(got, []string{"extended", "long"}) {
		t.Fatalf("after 7h: %v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "backups", bname("short").relDir())); !os.IsNotExist(err) {
		t.Errorf("expired backup's directory: %v, want gone", err)
	}
	advance(10 * 24 * time.Hour)
	if got := names(f.mgr.List(inst, "-")); !reflect.DeepEqual(got, []string{"extended"}) {
		t.Fatalf("after 10 days: %v", got)
	}
	if got := testutil.ToFloat64(f.mgr.m.expired); got != 2 {
		t.Errorf("ebbtable_backups_expired_total = %v, want 2", got)
	}
	if got := testutil.ToFloat64(f.mgr.m.ops.WithLabelValues("create", "ok")); got != 3 {
		t.Errorf("ebbtable_backup_operations_total{op=create,result=ok} = %v, want 3", got)
	}
	if n, b := f.mgr.totals(); n != 1 || b == 0 {
		t.Errorf("totals = %d backups, %d bytes; want 1 backup", n, b)
	}
	// The state survives a restart.
	f.close()
	f = open(t, dir, clk)
	if got := names(f.mgr.List(inst, "c1")); !reflect.DeepEqual(got, []string{"extended"}) {
		t.Fatalf("after restart: %v", got)
	}
}

func names(ms []*Manifest) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.BackupName().ID)
	}
	return out
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	poll.Eventually(t, "condition", 10*time.Second, func() (bool, string) { return cond(), "" })
}

func TestCopyListDeleteAndReopen(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir, clock.Real{})
	e := f.eng
	createTable(t, e, "src")
	for i := range 300 {
		set(t, e, "src", fmt.Sprint("r", i), "b", "q", 1000, fmt.Sprint(i))
	}
	want := readAll(t, e, "src")
	exp := time.Now().Add(24 * time.Hour)
	mustCreate(t, f.mgr, bname("orig"), "src", exp)
	other := Name{Instance: "projects/p/instances/other", Cluster: "c2", ID: "copy"}
	_, job, err := f.mgr.Copy(bname("orig"), other, exp)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := job.Result()
	if err != nil {
		t.Fatal(err)
	}
	if cp.SourceBackup != bname("orig").String() || cp.SourceTable != inst+"/tables/src" {
		t.Errorf("copy: source backup %q, source table %q", cp.SourceBackup, cp.SourceTable)
	}
	if err := f.mgr.Delete(bname("orig")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.mgr.Get(bname("orig")); !errors.Is(err, ErrNotFound) {
		t.Errorf("get after delete: %v", err)
	}
	if err := f.mgr.Delete(bname("orig")); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if got := f.mgr.List(inst, "-"); len(got) != 0 {
		t.Errorf("list after delete: %v", names(got))
	}
	f.close()
	f = open(t, dir, clock.Real{})
	if got := names(f.mgr.List("projects/p/instances/other", "-")); !reflect.DeepEqual(got, []string{"copy"}) {
		t.Fatalf("after reopen: %v", got)
	}
	_, rjob, err := f.mgr.Restore(other, inst, "fromcopy", table.RetentionApply)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rjob.Result(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, f.eng, "fromcopy"); !reflect.DeepEqual(got, want) {
		t.Errorf("restore of the copy differs: %d rows", len(got))
	}
	m, _ := f.eng.Table(inst, "fromcopy")
	if m.Restored == nil || m.Restored.Retention != table.RetentionApply || m.Restored.SourceBackup != bname("orig").String() {
		t.Errorf("restored record after restart: %+v", m.Restored)
	}
}

// TestUnfinishedWorkIsInvisibleAfterACrash leaves the traces a crash would:
// a half-written backup directory, and a restore whose cells were ingested
// but whose schema was never written. Reopening shows neither, and the
// restored table's name and cells are free again.
func TestUnfinishedWorkIsInvisibleAfterACrash(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir, clock.Real{})
	e := f.eng
	createTable(t, e, "src")
	for i := range 500 {
		set(t, e, "src", fmt.Sprint("r", i), "a", "q", 1000, fmt.Sprint(i))
	}
	mf := mustCreate(t, f.mgr, bname("b"), "src", time.Now().Add(24*time.Hour))
	// A backup cut short: files but no rename.
	tmp, err := f.mgr.tempDir("backup")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(tmp, "000001.sst"), []byte("partial"), 0o644)
	// A restore cut short after its ingest.
	r, err := e.BeginRestore(inst, "half")
	if err != nil {
		t.Fatal(err)
	}
	rdir := t.TempDir()
	files, err := f.mgr.rewrite(context.Background(), mf, rdir, r.TableID())
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, fi := range files {
		paths = append(paths, filepath.Join(rdir, fi.Name))
	}
	if err := r.Ingest(context.Background(), paths); err != nil {
		t.Fatal(err)
	}
	id := r.TableID()
	f.close() // no Commit, no Abort: as if the process died here

	f = open(t, dir, clock.Real{})
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("half-made backup directory still there: %v", err)
	}
	if got := names(f.mgr.List(inst, "-")); !reflect.DeepEqual(got, []string{"b"}) {
		t.Errorf("backups after the crash: %v", got)
	}
	if _, err := f.eng.Table(inst, "half"); !errors.Is(err, table.ErrTableNotFound) {
		t.Errorf("half-restored table: %v, want not found", err)
	}
	if _, ok := f.eng.TableByID(id); ok {
		t.Error("half-restored table id is in the catalog")
	}
	it, err := f.eng.RawIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lo := append([]byte{1}, make([]byte, 8)...)
	lo[8] = byte(id)
	if it.SeekGE(lo); it.Valid() && it.Key()[8] == byte(id) && it.Key()[0] == 1 {
		t.Errorf("cells of the half-restored table remain: %x", it.Key())
	}
	it.Close()
	mustRestore(t, f.mgr, bname("b"), "half", "")
	if got := len(readAll(t, f.eng, "half")); got != 500 {
		t.Errorf("restore after the crash: %d rows, want 500", got)
	}
}

func TestEmptyTable(t *testing.T) {
	f := open(t, t.TempDir(), clock.Real{})
	createTable(t, f.eng, "empty")
	mf := mustCreate(t, f.mgr, bname("b"), "empty", time.Now().Add(7*time.Hour))
	if len(mf.Files) != 0 || mf.Cells != 0 {
		t.Errorf("backup of an empty table: %+v", mf)
	}
	m := mustRestore(t, f.mgr, bname("b"), "copy", "")
	if len(m.Families) != 2 || len(readAll(t, f.eng, "copy")) != 0 {
		t.Errorf("restored empty table: %+v", m)
	}
}

func TestExpiredBackupIsNotRestored(t *testing.T) {
	clk := clock.NewFake(t0)
	f := open(t, t.TempDir(), clk)
	createTable(t, f.eng, "src")
	mustCreate(t, f.mgr, bname("b"), "src", t0.Add(7*time.Hour))
	clk.Advance(7 * time.Hour)
	if _, _, err := f.mgr.Restore(bname("b"), inst, "x", ""); !errors.Is(err, table.ErrPrecondition) {
		t.Errorf("restore of an expired backup: %v, want ErrPrecondition", err)
	}
	if _, err := f.eng.Table(inst, "x"); !errors.Is(err, table.ErrTableNotFound) {
		t.Errorf("refused restore left table x: %v", err)
	}
	if _, err := f.eng.CreateTable(inst, "x", table.TableSpec{}); err != nil {
		t.Errorf("the refused restore kept the name: %v", err)
	}
}

// TestStopCancelsJobs stops the manager while a backup is being written:
// the job fails, and neither the backup nor its working directory remains.
func TestStopCancelsJobs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := open(t, dir, clock.Real{})
	createTable(t, f.eng, "src")
	for i := range 3000 {
		set(t, f.eng, "src", fmt.Sprint("r", i), "a", "q", 1000, fmt.Sprintf("%01000d", i))
	}
	_, job, err := f.mgr.Create(bname("b"), "src", time.Now().Add(7*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	f.mgr.Stop()
	_, jerr := job.Result()
	entries, _ := os.ReadDir(filepath.Join(dir, "backups"))
	for _, e := range entries {
		if e.Name()[0] == '.' {
			t.Errorf("working directory left after Stop: %s", e.Name())
		}
	}
	if _, _, err := f.mgr.Create(bname("c"), "src", time.Now().Add(7*time.Hour)); !errors.Is(err, table.ErrClosed) {
		t.Errorf("Create after Stop: %v, want ErrClosed", err)
	}
	f.close()
	f = open(t, dir, clock.Real{})
	list := f.mgr.List(inst, "-")
	switch {
	case jerr != nil && len(list) != 0:
		t.Errorf("the cancelled backup is listed after a restart: %v", names(list))
	case jerr == nil && len(list) != 1:
		t.Errorf("the backup finished before Stop but is not listed: %v", names(list))
	}
}

// TestBusyBackupIsNotDeleted holds a backup as a restore or a copy does:
// deleting it, by hand or by expiry, waits until it is released.
func TestBusyBackupIsNotDeleted(t *testing.T) {
	clk := clock.NewFake(t0)
	f := open(t, t.TempDir(), clk)
	createTable(t, f.eng, "src")
	mustCreate(t, f.mgr, bname("b"), "src", t0.Add(7*time.Hour))
	f.mgr.mu.Lock()
	if _, err := f.mgr.acquireLocked(bname("b")); err != nil {
		t.Fatal(err)
	}
	f.mgr.mu.Unlock()
	if err := f.mgr.Delete(bname("b")); !errors.Is(err, table.ErrPrecondition) {
		t.Errorf("delete of a backup in use: %v, want ErrPrecondition", err)
	}
	clk.Advance(8 * time.Hour)
	if gone := f.mgr.DeleteExpired(); len(gone) != 0 {
		t.Errorf("expiry deleted a backup in use: %v", gone)
	}
	f.mgr.release(bname("b"))
	if gone := f.mgr.DeleteExpired(); len(gone) != 1 {
		t.Errorf("expiry after release deleted %v, want the backup", gone)
	}
}
