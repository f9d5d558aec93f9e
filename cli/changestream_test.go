package cli

import (
	"context"
	"encoding/json"
	"strings"
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
