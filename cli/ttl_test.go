package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// TestCellTTLCommands drives set --ttl / --expire-at, read --show-expiry and
// family guard as subprocesses against a server on the real clock (the
// shared one, in an instance of its own).
func TestCellTTLCommands(t *testing.T) {
	t.Parallel()
	addr, inst := sharedServer(t)
	at := func(args ...string) []string { return append(args, "--addr", addr, "--instance", inst) }

	// Table t: cf without a GC rule, exp for the one-second pattern.
	ctx := context.Background()
	cf := connFlags{addr: addr, project: "ebbtable", instance: inst}
	admin, err := cf.adminClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	conf := &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{
		"cf":  {},
		"exp": {GCPolicy: bigtable.MaxAgePolicy(time.Second)},
	}}
	if err := admin.CreateTableFromConf(ctx, conf); err != nil {
		t.Fatal(err)
	}

	// A cell line of read --show-expiry: column, timestamp, expiry.
	cellLine := regexp.MustCompile(`(?m)^  (\S+)\s+@ (\S+)(?:  expires (\S+))?$`)
	type shown struct{ ts, exp string }
	readCells := func(args ...string) map[string]shown {
		t.Helper()
		r := ebbtable(t, at(append([]string{"read", "t"}, args...)...)...).mustSucceed(t, "read")
		if strings.Contains(r.stdout, "ebbtable-expires-at") {
			t.Errorf("read printed the raw expiry label:\n%s", r.stdout)
		}
		out := map[string]shown{}
		for _, m := range cellLine.FindAllStringSubmatch(r.stdout, -1) {
			out[m[1]] = shown{m[2], m[3]}
		}
		return out
	}
	parse := func(s string) time.Time {
		t.Helper()
		layout := expiryLayout
		if strings.Contains(s, "/") {
			layout = cbtTimestampLayout // a timestamp, in UTC (TZ=UTC)
		}
		v, err := time.Parse(layout, s)
		if err != nil {
			t.Fatalf("read printed %q: %v", s, err)
		}
		return v
	}

	t.Run("ttl, show-expiry and expiry", func(t *testing.T) {
		// cf:ttl lives an hour: each command is a process, and under
		// load the few between its set and the read took over a second,
		// so a one-second cell was already gone ("cf:ttl {ts: exp:}").
		// The expiry itself is checked on cf:short below.
		ebbtable(t, at("set", "t", "r", "cf:ttl=v", "--ttl", "1h")...).mustSucceed(t, "set --ttl 1h")
		ebbtable(t, at("set", "t", "r", "cf:plain=v")...).mustSucceed(t, "set without ttl")
		soon := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
		ebbtable(t, at("set", "t", "r", "cf:at=v", "--expire-at", soon.Format(time.RFC3339Nano))...).mustSucceed(t, "set --expire-at")

		cells := readCells("--show-expiry")
		ttl, ok := cells["cf:ttl"]
		if !ok || ttl.exp == "" {
			t.Fatalf("read --show-expiry: cf:ttl %+v, want a cell with an expiry", ttl)
		}
		// The TTL counts from the write time, the cell's timestamp.
		if d := parse(ttl.exp).Sub(parse(ttl.ts)); d != time.Hour {
			t.Errorf("cf:ttl expires %v after its timestamp, want 1h", d)
		}
		if got := cells["cf:at"].exp; got != soon.Format(expiryLayout) {
			t.Errorf("cf:at expires %q, want %q", got, soon.Format(expiryLayout))
		}
		if c := cells["cf:plain"]; c.ts == "" || c.exp != "" {
			t.Errorf("cf:plain %+v, want a cell without expiry", c)
		}
		// Without --show-expiry, no expiries.
		for col, c := range readCells() {
			if c.exp != "" {
				t.Errorf("read without --show-expiry printed an expiry for %s", col)
			}
		}

		// Once the real clock passes the expiry, read no longer returns
		// it. The cell's timestamp (milliseconds) is at least written's.
		written := time.Now().Truncate(time.Millisecond)
		ebbtable(t, at("set", "t", "r", "cf:short=v", "--ttl", "1s")...).mustSucceed(t, "set --ttl 1s")
		exp := written.Add(time.Second) // or later
		deadline := time.Now().Add(10 * time.Second)
		for {
			cells := readCells()
			if _, ok := cells["cf:short"]; !ok {
				if now := time.Now(); now.Before(exp) {
					t.Errorf("cf:short gone at %v, before its expiry (%v at the earliest)", now, exp)
				}
				if _, ok := cells["cf:plain"]; !ok {
					t.Error("cf:plain (no TTL) is gone too")
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cf:short (expiry about %v) still readable at %v", exp, time.Now())
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("bad expiry flags", func(t *testing.T) {
		set := func(flags ...string) result {
			return ebbtable(t, at(append([]string{"set", "t", "r", "cf:q=v"}, flags...)...)...)
		}
		wantFailure(t, "--ttl=-1s", set("--ttl=-1s"), 2, `--ttl "-1s"`, "at least 1ms")
		wantFailure(t, "--ttl 0s", set("--ttl", "0s"), 2, `--ttl "0s"`, "at least 1ms")
		wantFailure(t, "--ttl abc", set("--ttl", "abc"), 2, `--ttl "abc"`, "not a duration (90s, 36h, 2d)")
		wantFailure(t, "--ttl=-2d", set("--ttl=-2d"), 2, `--ttl "-2d"`, "whole non-negative number")
		wantFailure(t, "--expire-at tomorrow", set("--expire-at", "tomorrow"), 2, `--expire-at "tomorrow"`, "RFC 3339")
		wantFailure(t, "--ttl and --expire-at", set("--ttl", "1h", "--expire-at", "2030-01-01T00:00:00Z"), 2, "--ttl or --expire-at, not both")
		// What depends on the server's clock is checked there.
		wantFailure(t, "--ttl past 9999", set("--ttl", "3000000d"), 1, "past year 9999", "InvalidArgument")
		if _, ok := readCells()["cf:q"]; ok {
			t.Error("a refused set wrote a cell")
		}
	})

	t.Run("family guard", func(t *testing.T) {
		ebbtable(t, at("set", "t", "g", "exp:q=v")...).mustSucceed(t, "set at server time before the guard")
		r := ebbtable(t, at("family", "guard", "t", "exp", "--expiry-timestamps=true")...).mustSucceed(t, "family guard on")
		wantOutput(t, "family guard on", r.stdout, "t:exp expiry-timestamp guard on: writes at server time are refused\n")
		wantFailure(t, "set at server time on a guarded family", ebbtable(t, at("set", "t", "g", "exp:q=v")...), 1,
			"FailedPrecondition", `family "exp" holds expiry timestamps`)
		wantFailure(t, "set --ttl on a guarded family", ebbtable(t, at("set", "t", "g", "exp:q=v", "--ttl", "1h")...), 1, "FailedPrecondition")
		// Other families of the table are not guarded.
		ebbtable(t, at("set", "t", "g", "cf:q=v")...).mustSucceed(t, "set on an unguarded family")

		r = ebbtable(t, at("family", "guard", "t", "exp", "--expiry-timestamps=false")...).mustSucceed(t, "family guard off")
		wantOutput(t, "family guard off", r.stdout, "t:exp expiry-timestamp guard off: writes at server time are accepted\n")
		ebbtable(t, at("set", "t", "g", "exp:q=v")...).mustSucceed(t, "set at server time after the guard is off")

		wantFailure(t, "guard without the flag", ebbtable(t, at("family", "guard", "t", "exp")...), 2, "--expiry-timestamps=true or --expiry-timestamps=false is required")
		wantFailure(t, "guard without a family", ebbtable(t, at("family", "guard", "t", "--expiry-timestamps")...), 2, "guard takes a table and a family")
		wantFailure(t, "guard missing table", ebbtable(t, at("family", "guard", "missing", "exp", "--expiry-timestamps")...), 1, "NotFound", "missing")
		wantFailure(t, "guard missing family", ebbtable(t, at("family", "guard", "t", "nofam", "--expiry-timestamps")...), 1, "NotFound", "nofam")
	})
}

// expiryLayout is how read --show-expiry prints an expiry (the server's
// label): RFC 3339, UTC, milliseconds.
const expiryLayout = "2006-01-02T15:04:05.000Z07:00"
