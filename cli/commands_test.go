package cli

import (
	"context"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// fixedTS is the timestamp of the cells TestClientCommands writes with the
// official client: 2024-03-01T12:00:00.123Z.
var fixedTS = bigtable.Time(time.Date(2024, 3, 1, 12, 0, 0, 123e6, time.UTC))

// writeFixed creates table "fixed" in instance (of project "ebbtable")
// through conn.go's clients and fills it with cells at known timestamps.
func writeFixed(t *testing.T, addr, instance string) {
	t.Helper()
	ctx := context.Background()
	cf := connFlags{addr: addr, project: "ebbtable", instance: instance}
	admin, err := cf.adminClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	client, err := cf.dataClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	conf := &bigtable.TableConf{TableID: "fixed", ColumnFamilies: map[string]bigtable.Family{"cf": {}, "zz": {}}}
	if err := admin.CreateTableFromConf(ctx, conf); err != nil {
		t.Fatal(err)
	}
	tbl := client.Open("fixed")
	apply := func(row string, set func(m *bigtable.Mutation)) {
		m := bigtable.NewMutation()
		set(m)
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatalf("Apply %q: %v", row, err)
		}
	}
	apply("admin", func(m *bigtable.Mutation) { m.Set("cf", "name", fixedTS, []byte("root")) })
	apply("user#\x00bin", func(m *bigtable.Mutation) { m.Set("cf", "name", fixedTS, []byte("bin")) })
	apply("user#1", func(m *bigtable.Mutation) {
		m.Set("zz", "x", fixedTS, []byte{0, 1})
		m.Set("cf", "name", fixedTS-1000, []byte("Ad"))
		m.Set("cf", "name", fixedTS, []byte("Ada"))
	})
	apply("user#10", func(m *bigtable.Mutation) { m.Set("cf", "name", fixedTS, []byte("Tim \"Ten\"")) })
	apply("user#2", func(m *bigtable.Mutation) { m.Set("cf", "name", fixedTS, []byte("Bob")) })
}

// wantOutput compares command output with want line by line.
func wantOutput(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s: output\n%s\nwant\n%s", what, got, want)
	}
}

// wantFailure checks a command failed with code and an error mentioning
// each of msgs.
func wantFailure(t *testing.T, what string, r result, code int, msgs ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("%s: exit code %d, want %d; stderr:\n%s", what, r.code, code, r.stderr)
	}
	for _, m := range msgs {
		if !strings.Contains(r.stderr, m) {
			t.Errorf("%s: stderr lacks %q:\n%s", what, m, r.stderr)
		}
	}
}

// TestClientCommands runs ls, createtable, set and read as subprocesses
// against a server subprocess.
func TestClientCommands(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	at := func(args ...string) []string { return append(args, "--addr", srv.addr) }
	writeFixed(t, srv.addr, "ebbtable")

	t.Run("createtable and ls", func(t *testing.T) {
		ebbtable(t, at("createtable", "users", "profile", "events")...).mustSucceed(t, "createtable users")
		ebbtable(t, at("createtable", "bare")...).mustSucceed(t, "createtable bare")
		r := ebbtable(t, at("ls")...).mustSucceed(t, "ls")
		wantOutput(t, "ls", r.stdout, "bare\nfixed\nusers\n")

		// BIGTABLE_EMULATOR_HOST stands in for --addr.
		r = run(t, []string{"BIGTABLE_EMULATOR_HOST=" + srv.addr}, ebbtableBin, "ls").mustSucceed(t, "ls via BIGTABLE_EMULATOR_HOST")
		wantOutput(t, "ls via BIGTABLE_EMULATOR_HOST", r.stdout, "bare\nfixed\nusers\n")
		// Tables belong to an instance.
		r = ebbtable(t, at("ls", "--instance", "other")...).mustSucceed(t, "ls --instance other")
		wantOutput(t, "ls --instance other", r.stdout, "")

		wantFailure(t, "createtable existing", ebbtable(t, at("createtable", "users")...), 1, "users")
		wantFailure(t, "createtable duplicate family", ebbtable(t, at("createtable", "dup", "f", "f")...), 2, `family "f" given twice`)
		wantFailure(t, "createtable without table", ebbtable(t, at("createtable")...), 2, "createtable takes a table name")
	})

	t.Run("read", func(t *testing.T) {
		r := ebbtable(t, at("read", "fixed", "--prefix", "user#")...).mustSucceed(t, "read --prefix")
		wantOutput(t, "read --prefix user#", r.stdout, `----------------------------------------
"user#\x00bin"
  cf:name                                  @ 2024/03/01-12:00:00.123000
    "bin"

----------------------------------------
user#1
  cf:name                                  @ 2024/03/01-12:00:00.123000
    "Ada"
  cf:name                                  @ 2024/03/01-12:00:00.122000
    "Ad"
  zz:x                                     @ 2024/03/01-12:00:00.123000
    "\x00\x01"

----------------------------------------
user#10
  cf:name                                  @ 2024/03/01-12:00:00.123000
    "Tim \"Ten\""

----------------------------------------
user#2
  cf:name                                  @ 2024/03/01-12:00:00.123000
    "Bob"

`)
		r = ebbtable(t, at("read", "fixed", "--limit", "1")...).mustSucceed(t, "read --limit")
		wantOutput(t, "read --limit 1", r.stdout, `----------------------------------------
admin
  cf:name                                  @ 2024/03/01-12:00:00.123000
    "root"

`)
		r = ebbtable(t, at("read", "fixed", "--prefix", "user#1", "--limit", "1")...).mustSucceed(t, "read --prefix --limit")
		if got := r.stdout; !strings.HasPrefix(got, "----------------------------------------\nuser#1\n") || strings.Contains(got, "user#10") {
			t.Errorf("read --prefix user#1 --limit 1:\n%s", got)
		}
		r = ebbtable(t, at("read", "fixed", "--prefix", "nobody")...).mustSucceed(t, "read empty prefix")
		wantOutput(t, "read --prefix nobody", r.stdout, "")

		wantFailure(t, "read missing table", ebbtable(t, at("read", "missing")...), 1, "not found")
		wantFailure(t, "read without table", ebbtable(t, at("read")...), 2, "read takes a table name")
		wantFailure(t, "read negative limit", ebbtable(t, at("read", "fixed", "--limit", "-1")...), 2, "negative")
	})

	t.Run("set", func(t *testing.T) {
		ebbtable(t, at("createtable", "notes", "n", "m")...).mustSucceed(t, "createtable notes")
		before := time.Now().Add(-time.Second)
		ebbtable(t, at("set", "notes", "k1", "n:title=Hello, world", "n:a:b=x=y", "m:=")...).mustSucceed(t, "set")
		after := time.Now().Add(time.Second)

		r := ebbtable(t, at("read", "notes")...).mustSucceed(t, "read notes")
		tsRE := regexp.MustCompile(`@ (\d{4}/\d\d/\d\d-\d\d:\d\d:\d\d\.\d{6})`)
		for _, m := range tsRE.FindAllStringSubmatch(r.stdout, -1) {
			ts, err := time.Parse(cbtTimestampLayout, m[1]) // TZ=UTC
			if err != nil || ts.Before(before) || ts.After(after) {
				t.Errorf("set wrote timestamp %s, want server time in [%v, %v]", m[1], before, after)
			}
		}
		wantOutput(t, "read after set", tsRE.ReplaceAllString(r.stdout, "@ TS"), `----------------------------------------
k1
  m:                                       @ TS
    ""
  n:a:b                                    @ TS
    "x=y"
  n:title                                  @ TS
    "Hello, world"

`)
		wantFailure(t, "set unknown family", ebbtable(t, at("set", "notes", "k1", "nofam:c=1")...), 1, "nofam")
		wantFailure(t, "set malformed cell", ebbtable(t, at("set", "notes", "k1", "n:c")...), 2, "FAMILY:QUALIFIER=VALUE")
		wantFailure(t, "set without cells", ebbtable(t, at("set", "notes", "k1")...), 2, "at least one")
	})

	t.Run("unreachable server", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := lis.Addr().String()
		lis.Close()
		wantFailure(t, "ls on a closed port", ebbtable(t, "ls", "--addr", dead), 1, "cannot connect to "+dead)
	})
}

// TestServeCommandLine covers serve's flags: aliases, validation and exit
// codes, and a second server on a data directory in use.
func TestServeCommandLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"unknown flag", []string{"serve", "--bogus"}, "unknown flag: --bogus"},
		{"bad visibility", []string{"serve", "--gc-visibility", "sometimes"}, `gc visibility "sometimes"`},
		{"bad addr", []string{"serve", "--addr", "nocolon"}, `--addr "nocolon"`},
		{"bad http addr", []string{"serve", "--http-addr", "on"}, `--http-addr "on"`},
		{"addr and host-port disagree", []string{"serve", "--addr", "127.0.0.1:0", "--host-port", "127.0.0.1:1"}, "disagree"},
		{"positional argument", []string{"serve", "extra"}, `unknown command "extra"`},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
	} {
		r := ebbtable(t, append(tc.args, "--data", dir)...)
		wantFailure(t, tc.name, r, 2, tc.msg, "--help")
	}

	r := ebbtable(t, "--help").mustSucceed(t, "--help")
	for _, cmd := range []string{"serve", "ls", "read", "set", "createtable"} {
		if !strings.Contains(r.stdout, "\n  "+cmd+" ") {
			t.Errorf("--help does not list %s:\n%s", cmd, r.stdout)
		}
	}
	r = ebbtable(t, "read", "--help").mustSucceed(t, "read --help")
	for _, flag := range []string{"--addr", "$BIGTABLE_EMULATOR_HOST", "--project", "--instance", "--prefix", "--limit"} {
		if !strings.Contains(r.stdout, flag) {
			t.Errorf("read --help lacks %s:\n%s", flag, r.stdout)
		}
	}

	// --host-port alone sets the listen address; --gc-visibility reaches the server.
	srv := startServe(t, "serve", "--host-port", "127.0.0.1:0", "--http-addr", "off", "--data", dir, "--gc-visibility", "until-collected")
	if host, _, err := net.SplitHostPort(srv.addr); err != nil || host != "127.0.0.1" {
		t.Errorf("serve --host-port 127.0.0.1:0 listens on %q", srv.addr)
	}

	// The data directory is locked while a server uses it.
	r = ebbtable(t, "serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dir)
	wantFailure(t, "second server on the same data", r, 1, dir)

	if code := srv.terminate(t); code != 0 {
		t.Errorf("serve exited %d after SIGTERM; stderr:\n%s", code, srv.stderr.String())
	}
	// The log is complete once the process is reaped.
	if log := srv.stderr.String(); !strings.Contains(log, "gc_visibility=until-collected") {
		t.Errorf("serve log lacks the visibility:\n%s", log)
	}
}
