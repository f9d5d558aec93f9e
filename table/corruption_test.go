package table_test

// The corruption campaign (issue 15): a stopped data directory written by
// the engine (several SSTables, unflushed writes in the WAL, a backup) has
// bytes flipped or is truncated, one file at a time, at seeded random
// offsets. Then
//
//   - storage.Verify and backup.Verify must report the damaged file, except
//     where the format cannot tell damage from what a crash leaves (the end
//     of the newest WAL) or has no checksum (the backup's JSON manifest,
//     OPTIONS);
//   - the engine, opened on the directory, must return for every cell the
//     value written or an error: never a wrong value, never a panic. Opening
//     may fail with an error. Cells that are silently missing are allowed
//     only where verify reported the directory (a lost WAL tail, a MANIFEST
//     cut back to an older version);
//   - a read that fails on a corrupt SSTable fails with table.ErrDataLoss
//     and names the file;
//   - restoring the backup gives every cell right or fails.
//
// Short mode runs a few trials of each kind; -corrupt.seeds=N runs N.
// Every trial prints its seed and a replay command.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"
	"github.com/ebbtable/ebbtable/backup"
	"github.com/ebbtable/ebbtable/cell"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
)

var (
	corruptSeeds = flag.Int("corrupt.seeds", 0, "TestCorruption: number of trials (0: the short default)")
	corruptSeed  = flag.Uint64("corrupt.seed", 0, "TestCorruption: seed of the first trial (0: from the clock)")
	corruptKinds = flag.String("corrupt.kinds", "", "TestCorruption: comma-separated kinds of file to damage (default all: "+strings.Join(allCorruptKinds, ",")+")")
	corruptKeep  = flag.Bool("corrupt.keep", false, "TestCorruption: keep each trial's directory and print its path")
)

const (
	corruptInst  = "projects/p/instances/i"
	corruptTable = "t"
	restoredName = "restored"
)

var corruptBackup = backup.Name{Instance: corruptInst, Cluster: "c1", ID: "b1"}

// corruptFixture is the pristine directory and what it holds.
type corruptFixture struct {
	dir string
	// cells: row/qualifier -> value, for the table and for the backup.
	all, backedUp map[string]string
	// files by kind, relative to dir.
	files map[string][]string
	// records: for each WAL, the offsets where its records begin and,
	// last, the offset where the last one ends.
	records   map[string][]int64
	newestWAL string
}

func cellID(row, q string) string { return row + "/" + q }

func cellValue(row, q string) string {
	// Unique per cell, long enough to fill blocks.
	return fmt.Sprintf("value of %s/%s %s", row, q, strings.Repeat("x", 24))
}

// buildCorruptFixture writes the pristine directory: rows in four batches,
// three flushed into SSTables, a backup after the third, the fourth left in
// the WAL.
func buildCorruptFixture(t *testing.T) *corruptFixture {
	t.Helper()
	dir := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e, err := table.Open(table.Options{Dir: dir, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.CreateTable(corruptInst, corruptTable, table.TableSpec{Families: []table.FamilySpec{{Name: "cf", GC: gcrule.MustParse("never")}}}); err != nil {
		t.Fatal(err)
	}
	f := &corruptFixture{dir: dir, all: map[string]string{}, files: map[string][]string{}, records: map[string][]int64{}}
	row := 0
	write := func(rows int) {
		for i := 0; i < rows; i += 100 {
			var muts []table.RowMutation
			for j := 0; j < 100 && i+j < rows; j++ {
				r := fmt.Sprintf("row%05d", row)
				row++
				var ms []table.Mutation
				for q := 0; q < 3; q++ {
					qs := fmt.Sprintf("q%d", q)
					v := cellValue(r, qs)
					ms = append(ms, table.Mutation{Kind: table.SetCell, Family: "cf", Qualifier: []byte(qs), Timestamp: 1000, Value: []byte(v)})
					f.all[cellID(r, qs)] = v
				}
				muts = append(muts, table.RowMutation{Row: []byte(r), Mutations: ms})
			}
			errs, err := e.MutateRows(corruptInst, corruptTable, muts)
			if err != nil {
				t.Fatal(err)
			}
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for i := 0; i < 3; i++ {
		write(400)
		if err := e.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	mgr, err := backup.New(backup.Options{DataDir: dir, Engine: e, FileBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	_, job, err := mgr.Create(corruptBackup, corruptTable, clk.Now().Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := job.Result(); err != nil {
		t.Fatal(err)
	}
	mgr.Stop()
	f.backedUp = map[string]string{}
	for k, v := range f.all {
		f.backedUp[k] = v
	}
	write(200) // stays in the WAL
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		name := filepath.Base(p)
		kind := ""
		switch {
		case strings.HasPrefix(rel, "backups"+string(filepath.Separator)):
			kind = "backup sstable"
			if name == "MANIFEST.json" {
				kind = "backup manifest"
			}
		case strings.HasSuffix(name, ".sst"):
			kind = "sstable"
		case strings.HasSuffix(name, ".log"):
			kind = "wal"
		case strings.HasPrefix(name, "MANIFEST-"):
			kind = "manifest"
		case strings.HasPrefix(name, "OPTIONS-"):
			kind = "options"
		}
		if kind != "" && info.Size() > 0 {
			f.files[kind] = append(f.files[kind], rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"sstable", "wal", "manifest", "backup sstable", "backup manifest"} {
		if len(f.files[k]) == 0 {
			t.Fatalf("fixture has no %s: %v", k, f.files)
		}
	}
	if len(f.files["sstable"]) < 2 || len(f.files["backup sstable"]) < 2 {
		t.Fatalf("fixture has too few SSTables: %v", f.files)
	}
	logs, err := wal.Scan(wal.Dir{FS: vfs.Default, Dirname: dir})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(logs, func(i, j int) bool { return logs[i].Num < logs[j].Num })
	for _, ll := range logs {
		_, p := ll.SegmentLocation(0)
		rel, _ := filepath.Rel(dir, p)
		f.records[rel] = walRecords(t, ll)
		f.newestWAL = rel
	}
	return f
}

// walRecords returns the offsets of a WAL's records and, last, the offset
// where the last record ends (the file may go on with a recycled log's
// bytes, which no reader looks at).
func walRecords(t *testing.T, ll wal.LogicalLog) []int64 {
	t.Helper()
	r := ll.OpenForRead()
	defer r.Close()
	var offs []int64
	for {
		rec, off, err := r.NextRecord()
		if err != nil {
			break
		}
		io.Copy(io.Discard, rec)
		offs = append(offs, off.Physical)
	}
	_, p := ll.SegmentLocation(0)
	return append(offs, recordsEnd(t, p, offs))
}

// recordsEnd finds where the last record ends, walking its chunks: each
// header says its length.
func recordsEnd(t *testing.T, path string, offs []int64) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(offs) == 0 {
		return 0
	}
	// Walk the chunks of the last record: each header is 7 (legacy), 11
	// (recyclable) or 19 (WAL sync) bytes, then the length it records.
	p := int(offs[len(offs)-1])
	for p+7 <= len(b) {
		typ := b[p+6]
		hdr := 7
		switch {
		case typ >= 5 && typ <= 8:
			hdr = 11
		case typ >= 9 && typ <= 12:
			hdr = 19
		}
		p += hdr + (int(b[p+4]) | int(b[p+5])<<8)
		pos := (typ - 1) % 4 // 0 full, 1 first, 2 middle, 3 last
		if pos == 0 || pos == 3 {
			return int64(p)
		}
		if rem := 32<<10 - p%(32<<10); rem < hdr {
			p += rem
		}
	}
	return int64(len(b))
}

// corruptTrial is one damaged copy of the fixture.
type corruptTrial struct {
	seed   uint64
	kind   string
	file   string // relative
	action string // "flip" or "truncate"
	offs   []int64
	size   int64
}

func (c corruptTrial) String() string {
	return fmt.Sprintf("seed %d: %s %s (%s, %d bytes) at %v", c.seed, c.action, c.file, c.kind, c.size, c.offs)
}

// allCorruptKinds are the kinds a trial picks from, in turn.
var allCorruptKinds = []string{"sstable", "wal", "manifest", "backup sstable", "backup manifest", "options"}

func trialKinds() []string {
	if *corruptKinds == "" {
		return allCorruptKinds
	}
	return strings.Split(*corruptKinds, ",")
}

func pickTrial(f *corruptFixture, seed uint64) corruptTrial {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	kinds := trialKinds()
	kind := kinds[seed%uint64(len(kinds))]
	files := f.files[kind]
	file := files[rng.IntN(len(files))]
	if kind == "wal" && rng.IntN(2) == 0 {
		file = f.newestWAL // the WAL with the unflushed writes
	}
	st, _ := os.Stat(filepath.Join(f.dir, file))
	tr := corruptTrial{seed: seed, kind: kind, file: file, size: st.Size(), action: "flip"}
	if rng.IntN(3) == 0 {
		tr.action = "truncate"
		tr.offs = []int64{rng.Int64N(tr.size)}
		return tr
	}
	limit := tr.size
	if ends := f.records[file]; kind == "wal" && len(ends) > 0 && rng.IntN(4) != 0 {
		limit = ends[len(ends)-1] // mostly inside the records
		if limit == 0 {
			limit = tr.size
		}
	}
	for n := 1 + rng.IntN(3); n > 0; n-- {
		tr.offs = append(tr.offs, rng.Int64N(limit))
	}
	sort.Slice(tr.offs, func(i, j int) bool { return tr.offs[i] < tr.offs[j] })
	return tr
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (c corruptTrial) apply(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, c.file)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.action == "truncate" {
		b = b[:c.offs[0]]
	} else {
		rng := rand.New(rand.NewPCG(c.seed, 1))
		for _, o := range c.offs {
			b[o] ^= byte(1 + rng.IntN(255)) // never 0: the byte changes
		}
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// mustReport says whether verify must name the file, and whether a note
// (rather than damage) is enough.
func (c corruptTrial) mustReport(f *corruptFixture) (must, noteEnough bool) {
	first := c.offs[0]
	switch c.kind {
	case "sstable", "backup sstable":
		return true, false
	case "backup manifest":
		// JSON without a checksum: only a cut is certain to show.
		if c.action == "truncate" {
			b, _ := os.ReadFile(filepath.Join(f.dir, c.file))
			return first < int64(len(strings.TrimRight(string(b), "\n \t"))), false
		}
		return false, false
	case "options":
		return false, false
	case "manifest":
		if c.action == "truncate" {
			// A cut between records leaves a valid, shorter MANIFEST.
			return false, true
		}
		return true, true // a flip in the last record's length looks like a tear
	case "wal":
		recs := f.records[c.file]
		end := recs[len(recs)-1]
		if first >= end {
			return false, false // past the last record: bytes no reader uses
		}
		onBoundary := false
		for _, o := range recs {
			onBoundary = onBoundary || o == first
		}
		if c.action == "truncate" {
			if onBoundary {
				return false, false // a shorter log, equally valid
			}
			return true, c.file == f.newestWAL // a torn tail, if newest
		}
		if c.file != f.newestWAL {
			return true, false
		}
		// In the newest WAL, damage shows as such only when an intact
		// record follows the first damaged one; otherwise it looks like
		// the tear a crash leaves.
		hit := map[int]bool{}
		for _, o := range c.offs {
			if o < end {
				hit[recordIndex(recs, o)] = true
			}
		}
		for i := recordIndex(recs, first) + 1; i < len(recs)-1; i++ {
			if !hit[i] {
				return true, false
			}
		}
		return true, true
	}
	return false, false
}

// recordIndex is the index of the record holding offset o; recs are the
// records' offsets and, last, where the last one ends.
func recordIndex(recs []int64, o int64) int {
	i := sort.Search(len(recs), func(i int) bool { return recs[i] > o })
	return i - 1
}

// trialResult is what one trial saw.
type trialResult struct {
	reported, damaged bool
	panicked          bool
	verifyLines       []string
	openErr           error
	correct, errored  int
	missing, wrong    int
	readErrs          []error
	restoreErr        error
	restoreWrong      int
	restoreMissing    int
}

func TestCorruption(t *testing.T) {
	t.Parallel()
	start := time.Now()
	f := buildCorruptFixture(t)
	n := *corruptSeeds
	base := *corruptSeed
	switch {
	case n == 0 && base == 0:
		// The short default: fixed seeds, two trials of each kind.
		n, base = 2*len(trialKinds()), 1
	case n == 0:
		n = 1
	case base == 0:
		base = uint64(time.Now().UnixNano()) % 1_000_000_000
	}
	t.Logf("corruption campaign: %d trials from seed %d; replay one: go test ./table -run 'TestCorruption$' -corrupt.seed=SEED -corrupt.seeds=1", n, base)
	type tally struct{ trials, reported, damaged, openFailed, readFailed, missing, restoreFailed int }
	tallies := map[string]*tally{}
	var wrong, panics int
	// The trials are independent (each on its own copy of the fixture):
	// they run in parallel, and are tallied in seed order after.
	trials, results := make([]corruptTrial, n), make([]trialResult, n)
	t.Run("trials", func(t *testing.T) {
		for i := range n {
			trials[i] = pickTrial(f, base+uint64(i))
			t.Run(fmt.Sprint(trials[i].seed), func(t *testing.T) {
				t.Parallel()
				results[i] = runTrial(t, f, trials[i])
			})
		}
	})
	for i := range n {
		tr, res := trials[i], results[i]
		key := tr.kind + " " + tr.action
		ta := tallies[key]
		if ta == nil {
			ta = &tally{}
			tallies[key] = ta
		}
		ta.trials++
		wrong += res.wrong + res.restoreWrong
		if res.panicked {
			panics++
		}
		if res.reported {
			ta.reported++
		}
		if res.damaged {
			ta.damaged++
		}
		if res.openErr != nil {
			ta.openFailed++
		}
		if res.errored > 0 {
			ta.readFailed++
		}
		if res.missing > 0 {
			ta.missing++
		}
		if res.restoreErr != nil {
			ta.restoreFailed++
		}
	}
	var keys []string
	for k := range tallies {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t.Logf("%-26s %6s %8s %7s %10s %10s %12s %14s", "target", "trials", "reported", "damaged", "open fails", "read fails", "cells missing", "restore fails")
	for _, k := range keys {
		ta := tallies[k]
		t.Logf("%-26s %6d %8d %7d %10d %10d %12d %14d", k, ta.trials, ta.reported, ta.damaged, ta.openFailed, ta.readFailed, ta.missing, ta.restoreFailed)
	}
	t.Logf("%d trials in %v: %d wrong values, %d panics", n, time.Since(start).Round(time.Millisecond), wrong, panics)
}

func runTrial(t *testing.T, f *corruptFixture, tr corruptTrial) (res trialResult) {
	t.Helper()
	replay := fmt.Sprintf("replay: go test ./table -run 'TestCorruption$' -corrupt.seed=%d -corrupt.seeds=1 -v", tr.seed)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s: %s\n%s\nverify said: %q", tr, fmt.Sprintf(format, args...), replay, res.verifyLines)
	}
	dir := filepath.Join(t.TempDir(), "data")
	if *corruptKeep {
		var err error
		if dir, err = os.MkdirTemp("", "corrupt-trial-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: directory %s", tr, dir)
	}
	copyDir(t, f.dir, dir)
	tr.apply(t, dir)
	target := filepath.Join(dir, tr.file)

	// (a) verify.
	rep, err := storage.Verify(dir)
	if err != nil {
		fail("verify could not check the directory: %v", err)
		return res
	}
	brep, err := backup.Verify(dir)
	if err != nil {
		fail("backup verify: %v", err)
		return res
	}
	rep.Merge(brep)
	for _, fd := range rep.Findings {
		res.verifyLines = append(res.verifyLines, fd.String())
		if fd.Path == target {
			res.reported = true
			res.damaged = res.damaged || fd.Damaged
		}
	}
	for _, d := range rep.DamagedFiles() {
		if d != target {
			fail("verify calls %s damaged, which the trial did not touch", d)
		}
	}
	if must, noteEnough := tr.mustReport(f); must {
		if !res.reported || (!noteEnough && !res.damaged) {
			fail("verify did not report the damage")
		}
	}

	// (b) the engine: every cell right or an error, never wrong, no panic.
	func() {
		defer func() {
			if p := recover(); p != nil {
				res.panicked = true
				fail("panic: %v", p)
			}
		}()
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		e, err := table.Open(table.Options{Dir: dir, Logger: quiet, Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
		if err != nil {
			res.openErr = err
			return
		}
		defer e.Close()
		readChecked(t, e, corruptTable, f.all, &res.correct, &res.errored, &res.missing, &res.wrong, &res.readErrs)
		if res.wrong > 0 {
			fail("%d cells read back wrong", res.wrong)
		}
		for _, err := range res.readErrs {
			if tr.kind == "sstable" && !errors.Is(err, table.ErrDataLoss) && !errors.Is(err, table.ErrStorageFailed) {
				fail("read of a corrupt SSTable failed with %v, want table.ErrDataLoss", err)
			}
			if tr.kind == "sstable" && errors.Is(err, table.ErrDataLoss) && !strings.Contains(err.Error(), strings.TrimSuffix(filepath.Base(tr.file), ".sst")) {
				fail("DataLoss error %q does not name %s", err, tr.file)
			}
		}
		if res.missing > 0 && len(rep.Findings) == 0 {
			fail("%d cells silently missing and verify found nothing", res.missing)
		}

		// The backup: restore it, then every cell right or the restore fails.
		mgr, err := backup.New(backup.Options{DataDir: dir, Engine: e, Logger: quiet})
		if err != nil {
			res.restoreErr = err
			return
		}
		defer mgr.Stop()
		_, job, err := mgr.Restore(corruptBackup, corruptInst, restoredName, "")
		if err == nil {
			_, err = job.Result()
		}
		if err != nil {
			res.restoreErr = err
			return
		}
		var correct, errored int
		var errs []error
		readChecked(t, e, restoredName, f.backedUp, &correct, &errored, &res.restoreMissing, &res.restoreWrong, &errs)
		if res.restoreWrong > 0 {
			fail("%d restored cells wrong", res.restoreWrong)
		}
		// The backup's JSON manifest has no checksum: a flip in it can
		// leave a valid manifest that restores less (a family id changed).
		if res.restoreMissing > 0 && errored == 0 && !res.reported && tr.kind != "backup manifest" {
			fail("restore lost %d cells silently and verify did not report the backup", res.restoreMissing)
		}
	}()
	if testing.Verbose() {
		t.Logf("%s: reported=%v damaged=%v open=%v cells ok=%d errored=%d missing=%d restore=%v",
			tr, res.reported, res.damaged, res.openErr, res.correct, res.errored, res.missing, res.restoreErr)
	}
	return res
}

// readChecked reads a table whole and then, if that fails, row by row, and
// counts each expected cell as correct, errored (its row's read failed) or
// missing, and each cell read with another value, or not expected, as
// wrong.
func readChecked(t *testing.T, e *table.Engine, tbl string, want map[string]string, correct, errored, missing, wrong *int, errs *[]error) {
	t.Helper()
	seen := map[string]bool{}
	check := func(r cell.Row) error {
		for _, c := range r.Cells {
			id := cellID(string(r.Key), string(c.Qualifier))
			if w, ok := want[id]; !ok || w != string(c.Value) || seen[id] {
				if *wrong < 3 {
					t.Logf("wrong cell in %s: %s = %q (want %q, known %v, seen %v)", tbl, id, c.Value, w, ok, seen[id])
				}
				*wrong++
				continue
			}
			seen[id] = true
		}
		return nil
	}
	ctx := context.Background()
	err := e.ReadRows(ctx, corruptInst, tbl, table.ReadRequest{}, check)
	failedRows := map[string]bool{}
	if err != nil {
		*errs = append(*errs, err)
		rows := map[string]bool{}
		for id := range want {
			rows[id[:strings.IndexByte(id, '/')]] = true
		}
		for row := range rows {
			err := e.ReadRows(ctx, corruptInst, tbl, table.ReadRequest{Keys: [][]byte{[]byte(row)}}, func(r cell.Row) error {
				for _, c := range r.Cells {
					id := cellID(string(r.Key), string(c.Qualifier))
					if w, ok := want[id]; !ok || w != string(c.Value) {
						*wrong++
						continue
					}
					seen[id] = true
				}
				return nil
			})
			if err != nil {
				failedRows[row] = true
				if len(*errs) < 4 {
					*errs = append(*errs, err)
				}
			}
		}
	}
	for id := range want {
		switch {
		case seen[id]:
			*correct++
		case failedRows[id[:strings.IndexByte(id, '/')]] || (err != nil && errors.Is(err, table.ErrTableNotFound)):
			*errored++
		default:
			*missing++
		}
	}
}
