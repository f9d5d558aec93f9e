package cli

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/creack/pty"
	"github.com/ebbtable/ebbtable/server"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"google.golang.org/grpc/metadata"
)

// progressCells is how many cells fillForProgress writes: at the 2,000
// cells a GC batch examines and a --gc-pause of 100ms, a pass over them
// takes about a second, long enough for several polls.
const progressCells = 20000

// slowGCServer starts a server whose passes are slow (a long pause between
// batches) and whose background collector waits an hour.
func slowGCServer(t *testing.T) *serverProc {
	t.Helper()
	return startServe(t, "serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", t.TempDir(),
		"--gc-interval", "1h", "--gc-pause", "100ms")
}

// fillForProgress creates table t with progressCells cells.
func fillForProgress(t *testing.T, addr string) {
	t.Helper()
	ctx := context.Background()
	cf := connFlags{addr: addr, project: "ebbtable", instance: "ebbtable"}
	admin, err := cf.adminClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{"cf": {}}}); err != nil {
		t.Fatal(err)
	}
	client, err := cf.dataClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	const perRow = 10
	var keys []string
	var muts []*bigtable.Mutation
	for r := range progressCells / perRow {
		m := bigtable.NewMutation()
		for c := range perRow {
			m.Set("cf", fmt.Sprint("c", c), bigtable.Timestamp(1000*(c+1)), []byte("v"))
		}
		keys, muts = append(keys, fmt.Sprintf("row%06d", r)), append(muts, m)
	}
	errs, err := client.Open("t").ApplyBulk(ctx, keys, muts)
	if err != nil || errs != nil {
		t.Fatalf("ApplyBulk: %v %v", err, errs)
	}
}

// TestProgressPlain runs gc run with its output on pipes: progress comes
// as plain lines on stderr, the result alone on stdout.
func TestProgressPlain(t *testing.T) {
	t.Parallel()
	srv := slowGCServer(t)
	fillForProgress(t, srv.addr)
	at := func(args ...string) []string { return append(args, "--addr", srv.addr) }

	r := ebbtable(t, at("gc", "run", "--table", "t", "--progress-interval", "50ms")...).mustSucceed(t, "gc run")
	line := regexp.MustCompile(`(?m)^gc run: table t \(1/1\): (\d+) cells$`)
	var counts []int
	for _, m := range line.FindAllStringSubmatch(r.stderr, -1) {
		n, _ := strconv.Atoi(m[1])
		counts = append(counts, n)
	}
	if len(counts) < 2 {
		t.Fatalf("gc run printed %d progress lines, want several; stderr:\n%s", len(counts), r.stderr)
	}
	for i := 1; i < len(counts); i++ {
		if counts[i] <= counts[i-1] {
			t.Errorf("progress went from %d to %d cells (lines print only on change)", counts[i-1], counts[i])
		}
	}
	if last := counts[len(counts)-1]; last <= 0 || last > progressCells {
		t.Errorf("last progress line says %d cells, want 1..%d", last, progressCells)
	}
	if strings.Contains(r.stdout, "gc run:") || !strings.Contains(r.stdout, fmt.Sprintf("examined %d cells", progressCells)) {
		t.Errorf("stdout should hold the result only:\n%s", r.stdout)
	}
	if strings.Contains(r.stderr, "\r") || strings.Contains(r.stderr, "\x1b[") {
		t.Errorf("plain progress has terminal control characters:\n%q", r.stderr)
	}

	// The next pass visits only the rows the GC agenda names (none: nothing
	// was written since), so whatever it shows counts rows against their
	// known total.
	r = ebbtable(t, at("gc", "run", "--table", "t", "--progress", "plain", "--progress-interval", "50ms")...).mustSucceed(t, "second gc run")
	if r.stderr != "" && !regexp.MustCompile(`(?m)^gc run: table t \(1/1\): \d+ of \d+ rows`).MatchString(r.stderr) {
		t.Errorf("the second, incremental gc run shows something else than rows of a total:\n%s", r.stderr)
	}

	// --progress off: nothing on stderr.
	r = ebbtable(t, at("gc", "run", "--table", "t", "--progress", "off", "--progress-interval", "50ms")...).mustSucceed(t, "gc run --progress off")
	if r.stderr != "" {
		t.Errorf("gc run --progress off printed on stderr:\n%s", r.stderr)
	}
	wantFailure(t, "bad --progress", ebbtable(t, at("gc", "run", "--progress", "loud")...), 2, `--progress "loud"`)
}

// TestProgressBar runs gc run on a pseudo-terminal: stderr is a terminal,
// so progress is a progressbar spinner (the total is not known) redrawn in
// place, cleared before the result prints.
func TestProgressBar(t *testing.T) {
	t.Parallel()
	srv := slowGCServer(t)
	fillForProgress(t, srv.addr)
	cmd := exec.Command(ebbtableBin, "gc", "run", "--table", "t", "--addr", srv.addr)
	cmd.Env = cleanEnv("TERM=xterm")
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out syncBuffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gc run: %v\n%q", err, out.String())
	}
	<-copied
	got := out.String()
	// The bar: the phase and a running count of cells (of an unknown
	// total), redrawn with carriage returns.
	bar := regexp.MustCompile(`table t \(1/1\), cells \(\d+/-\)`)
	if n := len(bar.FindAllString(got, -1)); n < 2 || !strings.Contains(got, "\r") {
		t.Errorf("the terminal shows %d bar redraws, want several:\n%q", n, got)
	}
	if strings.Contains(got, "gc run: table") {
		t.Errorf("plain progress lines on a terminal:\n%q", got)
	}
	// The result comes last, on a line of its own.
	lines := strings.Split(strings.TrimRight(got, "\r\n"), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, fmt.Sprintf("examined %d cells", progressCells)) {
		t.Errorf("the last line is %q, want the result", last)
	}
}

// TestProgressReported checks the server side of progress for the long
// calls that finish too fast here to be watched: a backup, a restore and a
// row deletion run named with a progress id report, once finished, the
// cells or rows they handled.
func TestProgressReported(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	fillForProgress(t, srv.addr)
	ctx := context.Background()
	cf := connFlags{addr: srv.addr, project: "ebbtable", instance: "ebbtable"}
	admin, err := cf.adminClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	withID := func(id string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, server.MetaProgressID, id)
	}
	progressOf := func(ctx context.Context, id string) (*ebbadminpb.ProgressResponse, error) {
		return callEbbAdmin(ctx, &cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.ProgressResponse, error) {
			return c.Progress(ctx, &ebbadminpb.ProgressRequest{Id: id})
		})
	}
	check := func(id, phase, unit string, done, total int64) {
		t.Helper()
		f, err := progressOf(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprintf("%v %q %q %d %d %v", f.GetFound(), f.GetPhase(), f.GetUnit(), f.GetDone(), f.GetTotal(), f.GetFinished())
		if want := fmt.Sprintf("true %q %q %d %d true", phase, unit, done, total); got != want {
			t.Errorf("progress of %s: %s, want %s", id, got, want)
		}
	}
	exp := time.Now().Add(24 * time.Hour)
	if err := admin.CreateBackup(withID("backup-1"), "t", defaultCluster, "b1", exp); err != nil {
		t.Fatal(err)
	}
	check("backup-1", "backup b1", "cells", progressCells, -1)
	if err := admin.RestoreTable(withID("restore-1"), "t2", defaultCluster, "b1"); err != nil {
		t.Fatal(err)
	}
	check("restore-1", "restore b1 to t2", "cells", progressCells, progressCells)

	if _, err := callEbbAdmin(ctx, &cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.DdlResponse, error) {
		return c.Ddl(ctx, &ebbadminpb.DdlRequest{Project: cf.project, Instance: cf.instance, Statement: "ALTER TABLE t ADD ROW DELETION POLICY (OLDER_THAN(`cf:c0`, INTERVAL 1 DAY))"})
	}); err != nil {
		t.Fatal(err)
	}
	// As for GC: the second run's total is the first's count.
	for _, id := range []string{"ttl-1", "ttl-2"} {
		if _, err := callEbbAdmin(withID(id), &cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.TtlRunResponse, error) {
			return c.TtlRun(ctx, &ebbadminpb.TtlRunRequest{Project: cf.project, Instance: cf.instance, Table: "t"})
		}); err != nil {
			t.Fatal(err)
		}
	}
	check("ttl-2", "table t", "rows", progressCells/10, progressCells/10)

	// The first pass over t2 (restored: an import makes the next pass sweep
	// whole) counts cells, with no estimate of its size yet; the next visits
	// only the rows the GC agenda names, none here, and counts rows.
	for _, id := range []string{"gc-1", "gc-2"} {
		if _, err := callEbbAdmin(withID(id), &cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.GcRunResponse, error) {
			return c.GcRun(ctx, &ebbadminpb.GcRunRequest{Project: cf.project, Instance: cf.instance, Table: "t2"})
		}); err != nil {
			t.Fatal(err)
		}
	}
	check("gc-1", "table t2 (1/1)", "cells", progressCells, -1)
	check("gc-2", "table t2 (1/1)", "rows", 0, 0)

	resp, err := progressOf(ctx, "never-used")
	if err != nil || resp.GetFound() {
		t.Errorf("progress of an unknown id: %v %v, want found false", resp, err)
	}
	if _, err := progressOf(ctx, ""); err == nil || !strings.Contains(err.Error(), "InvalidArgument") {
		t.Errorf("progress without an id: %v, want InvalidArgument", err)
	}
}

// TestProgressRenderer draws states of a phase with a known total, as a
// replication diff or a restore reports them: a bar with a percentage;
// and the same states as plain lines, one per change.
func TestProgressRenderer(t *testing.T) {
	var bar, plain strings.Builder
	rb := &progressRenderer{w: &bar, what: "replication diff", bar: true}
	rp := &progressRenderer{w: &plain, what: "replication diff"}
	for _, done := range []int64{3, 3, 7} {
		s := progressState{phase: "peer b (1/1)", unit: "chunks", done: done, total: 10}
		rb.render(s)
		rp.render(s)
	}
	rb.close()
	// (The bar redraws at most every 100ms, so the third state, at once,
	// is not drawn.) close clears the line.
	if got := bar.String(); !strings.Contains(got, "peer b (1/1), chunks  30% |") || !strings.Contains(got, "(3/10)") || !strings.HasSuffix(got, "\x1b[2K\r") {
		t.Errorf("bar:\n%q", got)
	}
	want := "replication diff: peer b (1/1): 3 of 10 chunks (30%)\nreplication diff: peer b (1/1): 7 of 10 chunks (70%)\n"
	if got := plain.String(); got != want {
		t.Errorf("plain lines:\n%s\nwant\n%s", got, want)
	}
}

// TestProgressDiff checks a replication diff reports its chunks: one
// phase per peer, done reaching the total.
func TestProgressDiff(t *testing.T) {
	t.Parallel()
	a := startServe(t, "serve", "--cluster-id", "a", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", t.TempDir())
	startServe(t, "serve", "--cluster-id", "b", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", t.TempDir(), "--join", a.addr)
	fillForProgress(t, a.addr)
	cf := connFlags{addr: a.addr, project: "ebbtable", instance: "ebbtable"}
	ctx := metadata.AppendToOutgoingContext(context.Background(), server.MetaProgressID, "diff-1")
	var diffErr error
	waitFor(t, "a diff with b", func() (bool, string) {
		_, diffErr = callEbbAdmin(ctx, &cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.ReplicationDiffResponse, error) {
			return c.ReplicationDiff(ctx, &ebbadminpb.ReplicationDiffRequest{Project: cf.project, Instance: cf.instance, Table: "t"})
		})
		return diffErr == nil, fmt.Sprint(diffErr)
	})
	f, err := callEbbAdmin(context.Background(), &cf, func(ctx context.Context, c ebbadminpb.EbbAdminClient) (*ebbadminpb.ProgressResponse, error) {
		return c.Progress(ctx, &ebbadminpb.ProgressRequest{Id: "diff-1"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.GetPhase() != "peer b (1/1)" || f.GetUnit() != "chunks" || f.GetTotal() < 2 || f.GetDone() != f.GetTotal() || !f.GetFinished() {
		t.Errorf("diff progress: %v", f)
	}
}
