//go:build unix

package robustness

// Crash tests of single-server features: SIGKILL while a backup or a
// restore is under way, and while writers write to a table with a change
// stream.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// bigTable fills table "big" with about mb MiB of incompressible values, so
// backing it up and restoring it take long enough to be interrupted.
func bigTable(t *testing.T, addr string, mb int) map[string]bigtable.Row {
	t.Helper()
	client, admin := officialClients(t, addr)
	ctx := context.Background()
	if err := admin.CreateTable(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "big", "cf"); err != nil {
		t.Fatal(err)
	}
	tbl := client.Open("big")
	const valueSize = 16 << 10
	rows := mb << 20 / valueSize
	for start := 0; start < rows; start += 256 {
		var keys []string
		var muts []*bigtable.Mutation
		for i := start; i < min(start+256, rows); i++ {
			v := make([]byte, valueSize)
			rand.Read(v)
			m := bigtable.NewMutation()
			m.Set("cf", "c", baseTS, v)
			keys, muts = append(keys, fmt.Sprintf("row%06d", i)), append(muts, m)
		}
		errs, err := tbl.ApplyBulk(ctx, keys, muts)
		if err != nil || errs != nil {
			t.Fatalf("ApplyBulk: %v %v", err, errs)
		}
	}
	return readRowsOf(t, client, "big")
}

func readRowsOf(t *testing.T, client *bigtable.Client, name string) map[string]bigtable.Row {
	t.Helper()
	out := map[string]bigtable.Row{}
	err := client.Open(name).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		key := r.Key()
		for _, items := range r {
			for i := range items {
				items[i].Row = ""
			}
		}
		out[key] = r
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// killWhenWorking starts a client command, kills the server with SIGKILL as
// soon as a working directory whose name starts with prefix appears under
// the backups directory, and returns whether it caught the work under way.
func killWhenWorking(t *testing.T, srv *serverProc, dataDir, prefix string, args ...string) bool {
	t.Helper()
	cmd := exec.Command(ebbtableBin, append(args, "--addr", srv.addr, "--project", testProject, "--instance", testInstance)...)
	cmd.Env = cleanHome()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	root := filepath.Join(dataDir, "backups")
	deadline := time.Now().Add(processTimeout)
	caught := false
	for !caught && time.Now().Before(deadline) {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				caught = true
			}
		}
		select {
		case <-exited:
			if !caught {
				t.Logf("%v finished before it could be interrupted", args)
				srv.kill(t)
				return false
			}
			exited <- nil
		default:
		}
	}
	srv.kill(t)
	select {
	case <-exited:
	case <-time.After(processTimeout):
		t.Fatalf("%v did not exit after the server died", args)
	}
	return caught
}

// TestBackupAndRestoreSurviveKill9 kills the server with SIGKILL while a
// backup's files are being written and while a restore is under way, then
// restarts it: no half-made backup or table is visible, and both can be
// done again.
func TestBackupAndRestoreSurviveKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServer(t, dir)
	want := bigTable(t, srv.addr, 48)

	if caught := killWhenWorking(t, srv, dir, ".tmp-backup-", "backup", "create", "big", "b1", "--expire", "7d"); !caught {
		t.Log("backup was not caught under way; checking the invariants anyway")
	}
	// The official clients below use testProject and testInstance.
	at := func(addr string) []string {
		return []string{"--addr", addr, "--project", testProject, "--instance", testInstance}
	}
	srv = startServer(t, dir)
	r := ebbtable(t, append([]string{"backup", "list"}, at(srv.addr)...)...).MustSucceed(t, "backup list after the crash")
	if strings.Contains(r.Stdout, "b1") && !regexp.MustCompile(`(?m)^b1\s+big\s+READY\s`).MatchString(r.Stdout) {
		t.Errorf("a backup cut short is visible:\n%s", r.Stdout)
	}
	leftovers(t, dir)
	ebbtable(t, append([]string{"backup", "delete", "b1"}, at(srv.addr)...)...) // if the kill came after the rename
	ebbtable(t, append([]string{"backup", "create", "big", "b1", "--expire", "7d"}, at(srv.addr)...)...).MustSucceed(t, "backup create after the crash")

	if caught := killWhenWorking(t, srv, dir, ".tmp-restore-", "restore", "b1", "copy"); !caught {
		t.Log("restore was not caught under way; checking the invariants anyway")
	}
	srv = startServer(t, dir)
	tables := ebbtable(t, append([]string{"ls"}, at(srv.addr)...)...).MustSucceed(t, "ls after the crash").Stdout
	client, _ := officialClients(t, srv.addr)
	if strings.Contains(tables, "copy") {
		// The kill came after the commit: then the table must be whole.
		if got := readRowsOf(t, client, "copy"); !reflect.DeepEqual(got, want) {
			t.Fatalf("a restored table is visible but not whole: %d rows, want %d", len(got), len(want))
		}
		ebbtable(t, append([]string{"restore", "b1", "copy2"}, at(srv.addr)...)...).MustSucceed(t, "restore after the crash")
		return
	}
	leftovers(t, dir)
	ebbtable(t, append([]string{"restore", "b1", "copy"}, at(srv.addr)...)...).MustSucceed(t, "restore after the crash")
	if got := readRowsOf(t, client, "copy"); !reflect.DeepEqual(got, want) {
		t.Errorf("restore after the crash: %d rows, want %d", len(got), len(want))
	}
}

// leftovers fails if unfinished backup work is still on disk after a start.
func leftovers(t *testing.T, dataDir string) {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(dataDir, "backups"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("unfinished work left after restart: %s", e.Name())
		}
	}
}

// watchLines runs `ebbtable watch` from the oldest record until now and
// decodes its lines.
func watchLines(t *testing.T, addr, table string, extra ...string) []map[string]any {
	t.Helper()
	args := append([]string{"watch", table, "--addr", addr, "--project", testProject, "--instance", testInstance,
		"--since", "oldest", "--until", time.Now().UTC().Format(time.RFC3339Nano)}, extra...)
	r := ebbtable(t, args...).MustSucceed(t, "watch")
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("watch printed %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestChangeStreamSurvivesKill9 kills the server while a writer writes, and
// checks after a restart that every acknowledged write has exactly one
// record and that every record's change is there (and no change is there
// without its record).
func TestChangeStreamSurvivesKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServer(t, dir)
	client, admin := officialClients(t, srv.addr)
	ctx := context.Background()
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "crash", ChangeStreamRetention: 24 * time.Hour,
		ColumnFamilies: map[string]bigtable.Family{"cf": {}}}); err != nil {
		t.Fatal(err)
	}
	tbl := client.Open("crash")
	var (
		mu      sync.Mutex
		acked   []string
		wg      sync.WaitGroup
		killing atomic.Bool
	)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				row := fmt.Sprintf("w%d-%06d", w, i)
				m := bigtable.NewMutation()
				m.Set("cf", "q", baseTS, []byte(row))
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err := tbl.Apply(cctx, row, m)
				cancel()
				if err != nil {
					if killing.Load() {
						return
					}
					// A write held past 2 s on a loaded machine: not
					// acknowledged, maybe applied. Only the kill ends a
					// worker (had all four returned, the wait for 200
					// acknowledged writes below would never end).
					continue
				}
				mu.Lock()
				acked = append(acked, row)
				mu.Unlock()
			}
		}()
	}
	for deadline := time.Now().Add(time.Minute); ; {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 200 {
			break
		}
		if time.Now().After(deadline) {
			killing.Store(true) // the workers end with the test's server
			t.Fatalf("only %d writes acknowledged in a minute, want 200 before the kill", n)
		}
	}
	killing.Store(true)
	srv.kill(t)
	wg.Wait()

	srv = startServer(t, dir)
	client, _ = officialClients(t, srv.addr)
	rows := map[string]bool{}
	err := client.Open("crash").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		rows[r.Key()] = true
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	records := map[string]int{}
	for _, r := range watchLines(t, srv.addr, "crash") {
		records[r["row_key"].(string)]++
	}
	for _, row := range acked {
		if !rows[row] {
			t.Errorf("acknowledged write %s lost", row)
		}
	}
	for row := range rows {
		if records[row] != 1 {
			t.Errorf("row %s has %d records, want 1", row, records[row])
		}
	}
	for row := range records {
		if !rows[row] {
			t.Errorf("record of %s without its change", row)
		}
	}
	t.Logf("%d writes acknowledged before the kill, %d rows and %d records after it", len(acked), len(rows), len(records))
}
