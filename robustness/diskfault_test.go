//go:build unix

package robustness

// Disk faults under a running server: `ebbtable serve` keeps its data on a
// small loop-mounted ext4 that fills up, dies (EIO) or stalls, and the
// official client checks the fail-stop contract (docs/reliability.md):
//
//   - reads return only durable writes: no read on the live server returns
//     a write that returned an error, and what a read returned survives a
//     restart; a write that failed without being told its outcome is
//     unknown (a failed WAL write rather than a failed fsync) is not there
//     after a restart either;
//   - on the first fatal storage error the server stops serving at once
//     (gRPC health stops saying SERVING), logs one ERROR line containing
//     "fatal storage error" and the cause, and exits non-zero within 5 s;
//   - every acknowledged write is there after a restart;
//   - start-up on a full disk exits non-zero within 10 s, naming the
//     ballast file to delete; once it is deleted the server starts.
//
// They live here, not in a package of their own, to share this package's
// binary (built once in TestMain) and its subprocess harness. They need
// root (to mount); elsewhere they skip, saying why. Each has its own
// filesystem and server, so they run in parallel.

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

const (
	dfImageSize = 32 << 20 // the loop filesystem for the disk-full tests (about 26 MB usable)
	// dfBigImage leaves room for Pebble's WAL preallocation (110% of the
	// 64 MiB memtable, storage.Open, for each of the first few WALs while
	// the memtable grows), where the disk must not fill.
	dfBigImage  = 512 << 20
	dfValueSize = 64 << 10 // each write: one cell, unique and incompressible
	dfWorkers   = 4
	dfBallast   = 8 << 20 // --ballast-size the disk-full tests pass
	dfBallastFl = "8MiB"
	// dfRoom is what the server may write before the disk is full: the
	// filler leaves the ballast and this much free.
	dfRoom = 6 << 20

	failStopWithin = 5 * time.Second  // contract: exit after a fatal storage error
	startupWithin  = 10 * time.Second // contract: start-up refuses (or starts) within
	// notServingWithin is how soon after the first failed write health
	// must stop saying SERVING ("at once"; the slack is for a loaded
	// two-core machine).
	notServingWithin = time.Second
)

// dfArgs is the serve command line for dataDir.
func dfArgs(dataDir string, extra ...string) []string {
	return append([]string{"serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dataDir}, extra...)
}

// ballastArgs returns --ballast-size when serve has it, and otherwise
// fails the test (the contract's way back from a full disk) and returns
// none, so the rest of the test still runs.
func ballastArgs(t *testing.T) []string {
	t.Helper()
	if !serveHasFlag(t, "ballast-size") {
		t.Errorf("serve has no --ballast-size flag (the contract's ballast file, DATA/EMERGENCY_BALLAST)")
		return nil
	}
	return []string{"--ballast-size", dfBallastFl}
}

// dfStart starts a server and creates table "df" with family "f".
func dfStart(t *testing.T, args []string) (*faultProc, *bigtable.Client) {
	t.Helper()
	srv, ready, took := startServeWithin(t, startupWithin, args...)
	if !ready {
		t.Fatalf("serve not ready after %v (%v); stderr:\n%s", took.Round(time.Millisecond), srv.cmd.ProcessState, tail(srv.stderr.String(), 15))
	}
	client, admin := officialClients(t, srv.addr)
	conf := &bigtable.TableConf{TableID: "df", ColumnFamilies: map[string]bigtable.Family{"f": {}}}
	if err := admin.CreateTableFromConf(context.Background(), conf); err != nil {
		t.Fatal(err)
	}
	return srv, client
}

// dfRestart starts a server on a data directory that has data already, and
// fails the test unless it is ready within the start-up limit.
func dfRestart(t *testing.T, args []string) (*faultProc, *bigtable.Client) {
	t.Helper()
	srv, ready, took := startServeWithin(t, startupWithin, args...)
	if !ready {
		t.Fatalf("restart: serve not ready within %v (took %v, %v); stderr:\n%s", startupWithin, took.Round(time.Millisecond), srv.cmd.ProcessState, tail(srv.stderr.String(), 15))
	}
	t.Logf("restart: ready in %v", took.Round(time.Millisecond))
	client, _ := officialClients(t, srv.addr)
	return srv, client
}

// checkUsable writes and reads one more row on a restarted server, then
// stops it gracefully.
func checkUsable(t *testing.T, srv *faultProc, client *bigtable.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m := bigtable.NewMutation()
	m.Set("f", "c", bigtable.ServerTime, []byte("after"))
	if err := client.Open("df").Apply(ctx, "zz-after-restart", m); err != nil {
		t.Errorf("a write after the restart: %v", err)
	} else if row, err := client.Open("df").ReadRow(ctx, "zz-after-restart"); err != nil || len(row["f"]) != 1 || string(row["f"][0].Value) != "after" {
		t.Errorf("reading it back: %v, %v", row, err)
	}
	if code := srv.terminate(t); code != 0 {
		t.Errorf("SIGTERM after the restart: exit status %d; stderr:\n%s", code, srv.stderr.String())
	}
}

// checkFailStop checks the fail-stop contract after the first failed write
// (or the fault, for a stall) at t0: health stops saying SERVING within
// notServingWithin and never says it again; the process exits non-zero
// within failStopWithin; stderr has exactly one ERROR line with "fatal
// storage error" matching cause, and no panic. A server still running is
// killed.
func checkFailStop(t *testing.T, srv *faultProc, hw *healthWatch, t0 time.Time, cause string) {
	t.Helper()
	if srv.exitedWithin(time.Until(t0.Add(failStopWithin))) {
		code := srv.cmd.ProcessState.ExitCode()
		t.Logf("fail-stop: the process exited with status %d, %v after t0", code, srv.exitedAt.Sub(t0).Round(time.Millisecond))
		if code == 0 {
			t.Errorf("the server exited with status 0 after a fatal storage error, want non-zero")
		}
	} else {
		t.Errorf("the server still runs %v after t0 (want it to exit non-zero within %v); killing it", time.Since(t0).Round(time.Millisecond), failStopWithin)
		srv.kill9()
	}
	hw.waitPollAfter(t0, notServingWithin)
	hw.stop()
	first, answer, again := hw.notServingAfter(t0)
	switch {
	case first.IsZero():
		t.Errorf("gRPC health said SERVING on every check after t0")
	case first.Sub(t0) > notServingWithin:
		t.Errorf("gRPC health first stopped saying SERVING (%s) %v after t0, want within %v", answer, first.Sub(t0).Round(time.Millisecond), notServingWithin)
	default:
		t.Logf("fail-stop: health first answered %s %v after t0", answer, first.Sub(t0).Round(time.Millisecond))
	}
	if again != nil {
		t.Errorf("gRPC health said SERVING again %v after t0", again.sent.Sub(t0).Round(time.Millisecond))
	}
	checkFatalLine(t, srv.stderr.String(), cause)
}

// checkFatalLine wants exactly one ERROR line with "fatal storage error"
// whose text matches cause, and no panic.
func checkFatalLine(t *testing.T, stderr, cause string) {
	t.Helper()
	lines := fatalLines(stderr)
	switch {
	case len(lines) != 1:
		t.Errorf("stderr has %d lines containing \"fatal storage error\", want 1; stderr (tail):\n%s", len(lines), tail(stderr, 15))
	case !strings.Contains(lines[0], "level=ERROR"):
		t.Errorf("the fatal storage error line is not at ERROR level: %s", lines[0])
	case !regexp.MustCompile(`(?i)` + cause).MatchString(lines[0]):
		t.Errorf("the fatal storage error line does not name the cause (want /%s/): %s", cause, lines[0])
	default:
		t.Logf("fail-stop: %s", lines[0])
	}
	if strings.Contains(stderr, "panic") {
		t.Errorf("stderr mentions a panic (a fatal storage error must not go through a recovered panic):\n%s", grepLines(stderr, "panic"))
	}
}

// grepLines returns the lines of s that contain substr.
func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"…"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// diskFull is a server whose disk filled up.
type diskFull struct {
	fs     *loopFS
	data   string
	filler string
	args   []string
	srv    *faultProc
	client *bigtable.Client
	load   *diskLoad
	hw     *healthWatch
	t0     time.Time // when the first write failed
}

// fillDisk starts a server on a loop filesystem that a filler file leaves
// the ballast and dfRoom free, and writes until a write fails.
func fillDisk(t *testing.T) *diskFull {
	t.Helper()
	d := &diskFull{fs: newLoopFS(t, dfImageSize)}
	d.data = filepath.Join(d.fs.dir, "data")
	d.filler = d.fs.fillTo(t, dfBallast+dfRoom)
	d.args = dfArgs(d.data, ballastArgs(t)...)
	d.srv, d.client = dfStart(t, d.args)
	d.hw = watchHealth(t, d.srv.addr)
	d.load = startDiskLoad(d.client.Open("df"), dfWorkers, dfValueSize)
	d.t0 = d.load.waitFirstError(t, 20*time.Second)
	n, bytes := d.load.counts()
	t.Logf("disk full: first write failed %v after the load started, %d writes (%.1f MiB) acknowledged; free now %d bytes; errors: %q",
		d.t0.Sub(d.load.started).Round(time.Millisecond), n[acked], float64(bytes)/(1<<20), d.fs.free(t), d.load.errorSample())
	return d
}

// TestDiskFullFailStop fills the disk under a serving server: the failed
// write is never read, the server fails stop, and after space is freed a
// restart has every acknowledged write.
func TestDiskFullFailStop(t *testing.T) {
	t.Parallel()
	d := fillDisk(t)
	if !d.srv.exitedWithin(0) {
		d.load.readBack(t, d.client, "a read on the live server after the failure")
	}
	d.load.stop(t, 10*time.Second)
	checkFailStop(t, d.srv, d.hw, d.t0, "no space left on device")

	if err := os.Remove(d.filler); err != nil {
		t.Fatal(err)
	}
	srv, client := dfRestart(t, d.args)
	d.load.verifyRestarted(t, client)
	d.load.checkReads(t)
	checkUsable(t, srv, client)
}

// TestDiskFullStartupNeedsBallastDeleted restarts a server whose disk
// filled up: start-up refuses within 10 s and names the ballast file; once
// the operator deletes it the server starts with every acknowledged write.
func TestDiskFullStartupNeedsBallastDeleted(t *testing.T) {
	t.Parallel()
	d := fillDisk(t)
	d.load.stop(t, 10*time.Second)
	if !d.srv.exitedWithin(time.Until(d.t0.Add(failStopWithin))) {
		d.srv.kill9() // TestDiskFullFailStop reports this
	}
	ballast := filepath.Join(d.data, "EMERGENCY_BALLAST")
	if _, err := os.Stat(ballast); err != nil {
		t.Errorf("no ballast file: %v", err)
	}

	srv, ready, took := startServeWithin(t, startupWithin, d.args...)
	out := srv.stderr.String() + strings.Join(srv.StdoutLines(), "\n")
	switch {
	case ready:
		t.Errorf("serve started on a full disk (%d bytes free)", d.fs.free(t))
		srv.kill9()
	case srv.cmd.ProcessState == nil || !srv.cmd.ProcessState.Exited():
		t.Errorf("serve on a full disk neither started nor exited within %v; killed. Output (tail):\n%s", startupWithin, tail(out, 10))
	case srv.cmd.ProcessState.ExitCode() == 0:
		t.Errorf("serve on a full disk exited with status 0; output:\n%s", out)
	default:
		t.Logf("start-up on a full disk: exit status %d after %v:\n%s", srv.cmd.ProcessState.ExitCode(), took.Round(time.Millisecond), tail(out, 3))
		for _, want := range []string{`(?i)full|no space|free space`, regexp.QuoteMeta(ballast), `(?i)delet|remov`} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("start-up on a full disk: output does not match /%s/ (it must say the disk is full and name the ballast file to delete):\n%s", want, out)
			}
		}
	}

	if err := os.Remove(ballast); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	t.Logf("ballast deleted: %d bytes free", d.fs.free(t))
	srv, client := dfRestart(t, d.args)
	d.load.verifyRestarted(t, client)
	d.load.checkReads(t)
	checkUsable(t, srv, client)
}

// TestDiskEIOFailStop kills the disk (ext4's shutdown ioctl: every write,
// fsync and create fails with EIO) while writes run: the server fails
// stop, no failed write is ever read, and after a remount a restart has
// every acknowledged write.
func TestDiskEIOFailStop(t *testing.T) {
	t.Parallel()
	lfs := newLoopFS(t, dfBigImage)
	args := dfArgs(filepath.Join(lfs.dir, "data"))
	srv, client := dfStart(t, args)
	hw := watchHealth(t, srv.addr)
	load := startDiskLoad(client.Open("df"), dfWorkers, dfValueSize)
	load.waitAcks(t, 40, srv)
	shut := time.Now()
	load.mu.Lock()
	load.faultAt = shut
	load.raceAtFault = true
	load.mu.Unlock()
	lfs.shutdown(t)
	t0 := load.waitFirstError(t, 10*time.Second)
	n, _ := load.counts()
	t.Logf("EIO: first write failed %v after the shutdown; %d acknowledged; errors: %q", t0.Sub(shut).Round(time.Millisecond), n[acked], load.errorSample())
	if !srv.exitedWithin(0) {
		load.readBack(t, client, "a read on the live server after the failure")
	}
	load.stop(t, 10*time.Second)
	checkFailStop(t, srv, hw, t0, "input/output error|EIO")

	lfs.remount(t)
	files := listDir(filepath.Join(lfs.dir, "data"))
	defer func() {
		if t.Failed() {
			t.Logf("the data directory after the remount, before the restart:\n%s", files)
		}
	}()
	srv, client = dfRestart(t, args)
	load.verifyRestarted(t, client)
	load.checkReads(t)
	checkUsable(t, srv, client)
}

// TestDiskStallFailStop stalls the disk (cgroup v1 blkio throttle to 1 KiB/s
// on the loop device) for longer than --max-sync-duration: the server logs
// the stall as a fatal storage error and stops serving. A process blocked
// in fsync on a stalled device cannot exit, not even on SIGKILL, until the
// I/O completes, so the exit is checked once the disk recovers (the
// throttle lifted): within 5 s, non-zero.
func TestDiskStallFailStop(t *testing.T) {
	t.Parallel()
	// Small, to keep the test short; a healthy fsync on the loop device
	// takes milliseconds.
	const maxSync = time.Second
	if !serveHasFlag(t, "max-sync-duration") {
		t.Fatalf("serve has no --max-sync-duration flag")
	}
	lfs := newLoopFS(t, dfBigImage)
	if _, err := os.Stat(blkioWriteBPS); err != nil {
		t.Skipf("no cgroup v1 blkio throttle here (%v); cannot stall a disk", err)
	}
	args := dfArgs(filepath.Join(lfs.dir, "data"), "--max-sync-duration", maxSync.String())
	srv, client := dfStart(t, args)
	hw := watchHealth(t, srv.addr)
	load := startDiskLoad(client.Open("df"), dfWorkers, dfValueSize)
	load.waitAcks(t, 20, srv) // a slow host disk could trip the 1 s limit here: the stderr shows it

	// Registered after the server, so it runs before the server is killed:
	// a process in a stalled fsync dies only once the I/O completes.
	lifted := false
	lift := func() {
		if !lifted {
			lfs.throttle(t, 0)
			lifted = true
		}
	}
	t.Cleanup(lift)
	stall := time.Now()
	load.mu.Lock()
	load.faultAt = stall
	load.mu.Unlock()
	lfs.throttle(t, 1024)

	// Detection takes the limit plus the disk-health checker's polling;
	// CockroachDB's stall test allows twice the limit.
	detectWithin := 2*maxSync + 2*time.Second
	var fatalAt time.Time
	for deadline := stall.Add(detectWithin); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if len(fatalLines(srv.stderr.String())) > 0 {
			fatalAt = time.Now()
			break
		}
	}
	if fatalAt.IsZero() {
		longest := load.longestSince(stall)
		lift()
		if longest < maxSync {
			t.Skipf("the kernel did not stall the disk: under a 1 KiB/s throttle the longest write took %v (< --max-sync-duration %v)", longest.Round(time.Millisecond), maxSync)
		}
		t.Errorf("the disk stalled (a write waited %v, --max-sync-duration %v) but the server logged no fatal storage error within %v",
			longest.Round(time.Millisecond), maxSync, detectWithin)
	} else {
		t.Logf("stall: fatal storage error logged %v after the throttle (--max-sync-duration %v)", fatalAt.Sub(stall).Round(time.Millisecond), maxSync)
		// Still stalled: the server must stop serving at once.
		var first time.Time
		var answer string
		for deadline := fatalAt.Add(notServingWithin); first.IsZero() && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			first, answer, _ = hw.notServingAfter(fatalAt)
		}
		if first.IsZero() || first.Sub(fatalAt) > notServingWithin {
			t.Errorf("health still said SERVING %v after the fatal storage error line, the disk still stalled", notServingWithin)
		} else {
			t.Logf("stall: health answered %s %v after the fatal line", answer, first.Sub(fatalAt).Round(time.Millisecond))
		}
		lift()
	}
	recovered := time.Now()
	load.stop(t, 10*time.Second)
	if srv.exitedWithin(time.Until(recovered.Add(failStopWithin))) {
		code := srv.cmd.ProcessState.ExitCode()
		t.Logf("stall: the process exited with status %d, %v after the disk recovered", code, srv.exitedAt.Sub(recovered).Round(time.Millisecond))
		if code == 0 {
			t.Errorf("the server exited with status 0 after a disk stall, want non-zero")
		}
	} else {
		t.Errorf("the server still runs %v after the disk recovered from a stall (want exit non-zero within %v); killing it", time.Since(recovered).Round(time.Millisecond), failStopWithin)
		srv.kill9()
	}
	hw.stop()
	checkFatalLine(t, srv.stderr.String(), "stall")

	srv, client = dfRestart(t, args)
	load.verifyRestarted(t, client)
	load.checkReads(t)
	checkUsable(t, srv, client)
}
