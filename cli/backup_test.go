package cli

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestBackupCommands creates, lists, updates, restores and deletes backups
// with the CLI against a server subprocess (the shared one, in an instance
// of its own).
func TestBackupCommands(t *testing.T) {
	t.Parallel()
	addr, inst := sharedServer(t)
	cli := func(args ...string) result {
		t.Helper()
		return ebbtable(t, append(args, "--addr", addr, "--instance", inst)...)
	}
	cli("createtable", "events", "cf").mustSucceed(t, "createtable")
	for i := range 5 {
		cli("set", "events", fmt.Sprint("r", i), "cf:c=v"+fmt.Sprint(i)).mustSucceed(t, "set")
	}
	r := cli("backup", "create", "events", "b1", "--expire", "7d").mustSucceed(t, "backup create")
	if !regexp.MustCompile(`^backup b1 of table events ready: \d+(\.\d+)? [KMG]?i?B, version time \S+, expires \S+\n$`).MatchString(r.stdout) {
		t.Errorf("backup create printed %q", r.stdout)
	}
	cli("set", "events", "late", "cf:c=after").mustSucceed(t, "set after backup")

	if r := cli("backup", "create", "events", "b2"); r.code != exitUsage || !strings.Contains(r.stderr, "--expire is required") {
		t.Errorf("create without --expire: code %d, stderr %q", r.code, r.stderr)
	}
	if r := cli("backup", "create", "events", "b2", "--expire", "1h"); r.code != exitError || !strings.Contains(r.stderr, "InvalidArgument") {
		t.Errorf("create expiring in 1h: code %d, stderr %q", r.code, r.stderr)
	}
	r = cli("backup", "list").mustSucceed(t, "backup list")
	if !regexp.MustCompile(`(?m)^BACKUP\s+TABLE\s+STATE\s+SIZE\s+STARTED\s+EXPIRES\n^b1\s+events\s+READY\s`).MatchString(r.stdout) {
		t.Errorf("backup list printed:\n%s", r.stdout)
	}
	cli("backup", "update", "b1", "--expire", "30d").mustSucceed(t, "backup update")

	r = cli("restore", "b1", "copy", "--retention", "pause").mustSucceed(t, "restore")
	if !strings.Contains(r.stdout, "into table copy") || !strings.Contains(r.stdout, "retention pause:") {
		t.Errorf("restore printed %q", r.stdout)
	}
	got := cli("read", "copy").mustSucceed(t, "read copy").stdout
	want := cli("read", "events").mustSucceed(t, "read events").stdout
	if strings.Contains(got, "late") || !strings.Contains(want, "late") {
		t.Errorf("restored table holds the write made after the backup:\n%s", got)
	}
	if r := cli("restore", "b1", "events"); r.code != exitError || !strings.Contains(r.stderr, "AlreadyExists") {
		t.Errorf("restore onto an existing table: code %d, stderr %q", r.code, r.stderr)
	}
	if r := cli("restore", "b1", "x", "--retention", "keep"); r.code != exitUsage {
		t.Errorf("restore --retention keep: code %d, stderr %q", r.code, r.stderr)
	}
	cli("backup", "delete", "b1").mustSucceed(t, "backup delete")
	if r := cli("backup", "delete", "b1"); r.code != exitError || !strings.Contains(r.stderr, "NotFound") {
		t.Errorf("second delete: code %d, stderr %q", r.code, r.stderr)
	}
	if r := cli("backup", "list").mustSucceed(t, "backup list"); strings.Contains(r.stdout, "b1") {
		t.Errorf("deleted backup still listed:\n%s", r.stdout)
	}
}

// TestCbtBackups runs cbt's backup commands, when the cbt on the PATH has
// them (older and trimmed builds do not).
func TestCbtBackups(t *testing.T) {
	t.Parallel()
	cbtPath, err := exec.LookPath("cbt")
	if err != nil {
		t.Skip("cbt is not on the PATH")
	}
	if out, _ := exec.Command(cbtPath, "help", "createbackup").CombinedOutput(); strings.Contains(string(out), "Don't know command") {
		t.Skip("this cbt has no createbackup command")
	}
	t.Parallel()
	srv := startServer(t, t.TempDir())
	env := []string{"BIGTABLE_EMULATOR_HOST=" + srv.addr, "TZ=UTC", "PATH=" + t.TempDir()}
	cbt := func(args ...string) result {
		t.Helper()
		return run(t, env, cbtPath, append([]string{"-project", "p", "-instance", "i"}, args...)...).mustSucceed(t, "cbt "+args[0])
	}
	cbt("createtable", "t", "families=cf")
	cbt("set", "t", "r1", "cf:c=v@1000000")
	cbt("createbackup", "t", "b", "c1", "7d")
	if r := cbt("listbackups"); !strings.Contains(r.stdout, "b") {
		t.Errorf("cbt listbackups:\n%s", r.stdout)
	}
	cbt("restore", "t2", "projects/p/instances/i/clusters/c1/backups/b")
	if r := cbt("read", "t2"); !strings.Contains(r.stdout, `"v"`) {
		t.Errorf("cbt read of the restored table:\n%s", r.stdout)
	}
}
