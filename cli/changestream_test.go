package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// watchLines runs `ebbtable watch` from the oldest record until now and
// decodes its lines.
func watchLines(t *testing.T, addr, table string, extra ...string) []map[string]any {
	t.Helper()
	args := append([]string{"watch", table, "--addr", addr, "--project", testProject, "--instance", testInstance,
		"--since", "oldest", "--until", time.Now().UTC().Format(time.RFC3339Nano)}, extra...)
	r := ebbtable(t, args...).mustSucceed(t, "watch")
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
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

func TestWatchAndChangeStreamCommands(t *testing.T) {
	t.Parallel()
	srv := startServe(t, "serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", t.TempDir(), "--gc-interval", "100ms")
	client, admin := officialClients(t, srv.addr)
	ctx := context.Background()
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "audit", ColumnFamilies: map[string]bigtable.Family{
		"cf": {GCPolicy: bigtable.MaxVersionsPolicy(1)}}}); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--addr", srv.addr, "--project", testProject, "--instance", testInstance}
	if r := ebbtable(t, append([]string{"watch", "audit"}, conn...)...); r.code != 1 || !strings.Contains(r.stderr, "no change stream") {
		t.Errorf("watch without a stream: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := ebbtable(t, append([]string{"changestream", "enable", "audit", "--retention", "1h"}, conn...)...); r.code != 2 {
		t.Errorf("one-hour retention: exit %d", r.code)
	}
	ebbtable(t, append([]string{"changestream", "enable", "audit", "--retention", "48h"}, conn...)...).mustSucceed(t, "enable")
	if info, err := admin.TableInfo(ctx, "audit"); err != nil || info.ChangeStreamRetention != 48*time.Hour {
		t.Fatalf("after enable: %+v %v", info, err)
	}
	tbl := client.Open("audit")
	for i, v := range []string{"v1", "v2"} {
		m := bigtable.NewMutation()
		m.Set("cf", "q", bigtable.Timestamp(int64(baseTS)+int64(i)*1000), []byte(v))
		if err := tbl.Apply(ctx, "row\xff", m); err != nil {
			t.Fatal(err)
		}
	}
	// Wait for the collector to remove the older version.
	var all []map[string]any
	deadline := time.Now().Add(processTimeout)
	for len(all) < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		all = watchLines(t, srv.addr, "audit")
	}
	if len(all) != 3 {
		t.Fatalf("watch printed %d records, want 2 writes and 1 collection: %v", len(all), all)
	}
	for _, r := range all[:2] {
		if r["type"] != "USER" || r["reason"] != "user" || r["transaction_tag"] != "" || r["is_system_transaction"] != false || r["row_key_base64"] != true {
			t.Errorf("user record %v", r)
		}
	}
	gc := all[2]
	if gc["type"] != "GARBAGE_COLLECTION" || gc["reason"] != "gc-versions" || gc["transaction_tag"] != "GarbageCollection" || gc["is_system_transaction"] != true {
		t.Errorf("gc record %v", gc)
	}
	if user := watchLines(t, srv.addr, "audit", "--exclude-system"); len(user) != 2 {
		t.Errorf("--exclude-system printed %d records, want 2", len(user))
	}
	// Resume after the first record.
	r := ebbtable(t, append([]string{"watch", "audit", "--token", all[0]["token"].(string), "--until", time.Now().UTC().Format(time.RFC3339Nano)}, conn...)...).mustSucceed(t, "watch --token")
	if n := strings.Count(r.stdout, "\n"); n != 2 {
		t.Errorf("resumed watch printed %d lines, want 2:\n%s", n, r.stdout)
	}
	ebbtable(t, append([]string{"changestream", "disable", "audit"}, conn...)...).mustSucceed(t, "disable")
	if info, _ := admin.TableInfo(ctx, "audit"); info.ChangeStreamRetention != nil {
		t.Errorf("retention after disable: %v", info.ChangeStreamRetention)
	}
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
		mu    sync.Mutex
		acked []string
		wg    sync.WaitGroup
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
					return
				}
				mu.Lock()
				acked = append(acked, row)
				mu.Unlock()
			}
		}()
	}
	for {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 200 {
			break
		}
	}
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
