package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/storage"
)

// dataDirBytes is the size of the files in a data directory, the emergency
// ballast aside.
func dataDirBytes(t *testing.T, dir string) (int64, string) {
	t.Helper()
	var n int64
	var big string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || fi.Name() == storage.BallastName {
			return err
		}
		n += fi.Size()
		if fi.Size() >= 1<<20 {
			big += fmt.Sprintf(" %s (%d MiB)", fi.Name(), fi.Size()>>20)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, big
}

// TestGCRunGivesSpaceBack is the first thing a user tries: write 30 MiB,
// make it all expire, run a pass — the data directory must shrink, even
// though every deleted cell still lived in the memtable and its WAL.
func TestGCRunGivesSpaceBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := testkit.StartServe(t, ebbtableBin, testkit.CleanEnv(home), "serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dir, "--gc-interval", "1h")
	ctx := context.Background()
	client, admin := testkit.Clients(t, srv.Addr, "ebbtable", "ebbtable", "") // the gc commands' defaults
	if err := admin.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "t", "cf"); err != nil {
		t.Fatal(err)
	}
	tbl := client.Open("t")
	// The rows go in bulk calls of 32 rows (2 MiB): a call per row cost
	// most of the test's CPU under -race.
	apply := func(mut func(row string) *bigtable.Mutation) {
		t.Helper()
		for from := 0; from < 480; from += 32 {
			var rows []string
			var muts []*bigtable.Mutation
			for i := from; i < from+32; i++ {
				rows = append(rows, fmt.Sprintf("row%04d", i))
				muts = append(muts, mut(rows[len(rows)-1]))
			}
			errs, err := tbl.ApplyBulk(ctx, rows, muts)
			if err == nil && errs != nil {
				err = errors.Join(errs...)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for round := 0; round < 2; round++ {
		apply(func(row string) *bigtable.Mutation {
			val := make([]byte, 64<<10)
			copy(val, row)
			m := bigtable.NewMutation()
			m.Set("cf", "q", bigtable.ServerTime, val)
			return m
		})
		if round == 0 {
			apply(func(string) *bigtable.Mutation { m := bigtable.NewMutation(); m.DeleteRow(); return m })
			b, big := dataDirBytes(t, dir)
			t.Logf("after round 0: %d MiB:%s", b>>20, big)
		}
	}
	before, big := dataDirBytes(t, dir)
	if before < 30<<20 {
		t.Fatalf("the data directory holds %d bytes after writing 30 MiB", before)
	}
	t.Logf("after writing: %d MiB:%s", before>>20, big)
	if err := admin.SetGCPolicy(ctx, "t", "cf", bigtable.MaxAgePolicy(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // every cell older than 1 ms
	out := testkit.Run(t, testkit.CleanEnv(home), ebbtableBin, "gc", "run", "--table", "t", "--wait", "--addr", srv.Addr)
	if out.Code != 0 {
		t.Fatalf("gc run: exit %d: %s%s", out.Code, out.Stdout, out.Stderr)
	}
	t.Logf("gc run: %s", out.Stdout)
	wantMatch(t, "gc run", out.Stdout, `collected 480 cells \(30\.0 MiB\).*\nsweep .* examined/s, .* collected/s\); reclaim .*, [0-9.]+ MiB of disk freed(; [0-9.]+ \S+ more freed when the reads still holding its old files end)?\n`)
	// The figure is what came back: the directory has already fallen by it
	// when gc run returns (the flushed WAL deleted), give or take a tenth.
	now, big := dataDirBytes(t, dir)
	if m := regexp.MustCompile(`([0-9.]+) MiB of disk freed`).FindStringSubmatch(out.Stdout); m != nil {
		freed, _ := strconv.ParseFloat(m[1], 64)
		fell := float64(before-now) / (1 << 20)
		if freed < fell*0.9 || freed > fell*1.1+1 {
			t.Errorf("gc run reports %.1f MiB freed; the data directory fell by %.1f MiB (from %d to %d MiB:%s)", freed, fell, before>>20, now>>20, big)
		}
	}
	st := testkit.Run(t, testkit.CleanEnv(home), ebbtableBin, "gc", "status", "--addr", srv.Addr)
	wantMatch(t, "gc status", st.Stdout, `(?m)^t\s.*\s[0-9.]+ MiB freed(, [0-9.]+ \S+ when reads end)?\s+whole\s+0 now, 0 later\s+0$`)
	deadline := time.Now().Add(15 * time.Second)
	for {
		after, big := dataDirBytes(t, dir)
		if after < before/2 {
			t.Logf("the data directory fell from %d MiB to %d MiB", before>>20, after>>20)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("15 s after gc run --wait the data directory still holds %d of %d MiB:%s", after>>20, before>>20, big)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// wantMatch checks that output matches the multi-line regular expression re.
func wantMatch(t *testing.T, what, output, re string) {
	t.Helper()
	if !regexp.MustCompile(re).MatchString(output) {
		t.Errorf("%s: output does not match %s:\n%s", what, re, output)
	}
}
