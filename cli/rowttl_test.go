package cli

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// TestRowDeletionPolicyEndToEnd: the official client writes rows, the CLI
// adds a policy with INTERVAL 0 DAY, and the background job (a short
// --ttl-interval) deletes the expired rows. The server runs in
// until-collected mode, so the rows disappear only when the job deletes them.
func TestRowDeletionPolicyEndToEnd(t *testing.T) {
	t.Parallel()
	srv := startServe(t, "serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", t.TempDir(),
		"--gc-visibility", "until-collected", "--ttl-interval", "300ms", "--ttl-batch-size", "2")
	at := func(args ...string) []string { return append(args, "--addr", srv.addr) }
	ctx := context.Background()
	client, admin := gcClients(t, srv.addr)
	if err := admin.CreateTable(ctx, "events"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"meta", "d"} {
		if err := admin.CreateColumnFamily(ctx, "events", f); err != nil {
			t.Fatal(err)
		}
	}
	tbl := client.Open("events")
	now := time.Now()
	be := func(t time.Time) []byte {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(t.UnixMicro()))
		return b[:]
	}
	rows := map[string][]byte{
		"old-binary": be(now.Add(-time.Hour)),
		"old-text":   []byte(now.Add(-time.Minute).UTC().Format(time.RFC3339Nano)),
		"future":     be(now.Add(24 * time.Hour)),
		"null":       nil,
		"bad":        []byte("not a time"),
		"old-2":      be(now.Add(-48 * time.Hour)),
	}
	for k, ts := range rows {
		m := bigtable.NewMutation()
		m.Set("d", "v", bigtable.Now(), []byte("x"))
		if ts != nil {
			m.Set("meta", "created_at", bigtable.Now(), ts)
		}
		if err := tbl.Apply(ctx, k, m); err != nil {
			t.Fatal(err)
		}
	}
	read := func() string {
		var keys []string
		if err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
			keys = append(keys, r.Key())
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return strings.Join(keys, " ")
	}

	policy := "OLDER_THAN(`meta:created_at`, INTERVAL 0 DAY)"
	r := ebbtable(t, at("ttl", "plan", "events", policy)...).mustSucceed(t, "ttl plan")
	wantMatch(t, "ttl plan", r.stdout, `(?m)^would delete\s+3 rows$`)
	wantMatch(t, "ttl plan", r.stdout, `(?m)^no timestamp \(kept\)\s+1 row$`)
	wantMatch(t, "ttl plan", r.stdout, `(?m)^undeletable\s+1 row$`)

	r = ebbtable(t, at("ddl", "ALTER TABLE events ADD ROW DELETION POLICY ("+policy+")")...).mustSucceed(t, "ddl add")
	wantMatch(t, "ddl add", r.stdout, "^events: added row deletion policy OLDER_THAN\\(`meta:created_at`, INTERVAL 0 DAY\\)\n$")
	r = ebbtable(t, at("ddl", `ALTER TABLE events ADD TTL INTERVAL '0 days' ON "meta:created_at"`)...)
	if r.code != 1 || !strings.Contains(r.stderr, "already has a row deletion policy; replace it or drop it first (FailedPrecondition)") {
		t.Fatalf("second ADD: exit %d, stderr %q", r.code, r.stderr)
	}
	r = ebbtable(t, at("ddl", `ALTER TABLE events ADD TTL INTERVAL '4 DAYS 3 MINUTES' ON "meta:created_at"`)...)
	if r.code != 2 || !strings.Contains(r.stderr, "whole number of days") {
		t.Fatalf("bad interval: exit %d, stderr %q", r.code, r.stderr)
	}

	deadline := time.Now().Add(processTimeout)
	for {
		got := read()
		if got == "bad future null" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows still there: %q", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r = ebbtable(t, at("ttl", "status")...).mustSucceed(t, "ttl status")
	wantMatch(t, "ttl status", r.stdout, "(?m)^events\\s+OLDER_THAN\\(`meta:created_at`, INTERVAL 0 DAY\\)\\s+-\\s+\\d{4}-\\d\\d-\\d\\dT\\S+Z\\s+\\S+\\s+\\d+\\s+1\\s+-$")
	r = ebbtable(t, at("ttl", "run", "--table", "events")...).mustSucceed(t, "ttl run")
	wantMatch(t, "ttl run", r.stdout, `^1 table: scanned 3 rows, deleted 0 rows \(0 interleaved\), 1 undeletable, 0 batches in \S+\n$`)
	ebbtable(t, at("ddl", "ALTER TABLE events DROP ROW DELETION POLICY")...).mustSucceed(t, "ddl drop")
	r = ebbtable(t, at("ttl", "status")...).mustSucceed(t, "ttl status")
	wantMatch(t, "ttl status after drop", r.stdout, `no table has a row deletion policy`)
}

// TestTTLUsageErrors: statements, policies and flags that cannot work are
// usage errors (exit 2), found before any connection.
func TestTTLUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ddl", "DROP TABLE events"}, "unsupported statement"},
		{[]string{"ddl", `ALTER TABLE events ADD TTL INTERVAL '-3 days' ON "m:c"`}, "negative intervals are not allowed"},
		{[]string{"ddl"}, "ddl takes one DDL statement"},
		{[]string{"ttl", "plan", "events", "OLDER_THAN(`m:c`, INTERVAL x DAY)"}, "DDL"},
		{[]string{"ttl", "plan", "events"}, "plan takes a table and a policy"},
		{[]string{"ttl", "run", "--table", ""}, "--table must not be empty"},
		{[]string{"serve", "--ttl-interval", "0s"}, "--ttl-interval 0s must be positive"},
		{[]string{"serve", "--ttl-batch-size", "0"}, "--ttl-batch-size 0 must be between 1"},
	} {
		r := ebbtable(t, append(tc.args, "--addr", "127.0.0.1:1")...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("ebbtable %q: exit %d, stderr %q; want exit 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
