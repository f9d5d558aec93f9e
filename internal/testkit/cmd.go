package testkit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/ebbtable/ebbtable/internal/testkit/testbin"
)

// Result is a finished command: what it printed and its exit code.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Run runs name with args in env (a whole environment, as CleanEnv makes)
// and returns its output and exit code. It fails the test if the command
// cannot start or does not finish within ProcessTimeout; a non-zero exit is
// the caller's to judge.
func Run(t testing.TB, env []string, name string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ProcessTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, testbin.ServeArgs(args)...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s %q: %v", name, args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %q: timed out after %v; stderr:\n%s", name, args, ProcessTimeout, stderr.String())
	}
	return Result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

// MustSucceed fails the test unless r exited 0, and returns r.
func (r Result) MustSucceed(t testing.TB, what string) Result {
	t.Helper()
	if r.Code != 0 {
		t.Fatalf("%s: exit code %d\nstdout:\n%s\nstderr:\n%s", what, r.Code, r.Stdout, r.Stderr)
	}
	return r
}

// FreeAddr returns a loopback address that was free a moment ago, for a
// subprocess that does not print the address it listens on (serve's
// --http-addr).
func FreeAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// Metric reads one unlabelled-or-labelled sample, written exactly as name
// (labels included), from the Prometheus page at httpAddr, and says
// whether it was there.
func Metric(t testing.TB, httpAddr, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	return v, err == nil
}
