package compat

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

// The harness builds two binaries once per run, into a temporary directory:
// ebbtable itself, and the client module's test binary (go test -c, kept
// across runs: buildSuite), so each integration test runs as its own
// process against a fresh server.
var (
	buildOnce  sync.Once
	buildErr   error
	ebbBin     string
	suiteBin   string
	suiteDir   string
	cleanupAll []func()
)

var mu sync.Mutex

var keepLogs = flag.Bool("compat.keep", false, "print every integration test's full output, passing ones included")

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	for _, f := range cleanupAll {
		f()
	}
	os.Exit(code)
}

// binaries builds ebbtable and the client's integration test binary.
func binaries(t *testing.T) (ebb, suite, dir string) {
	t.Helper()
	buildOnce.Do(func() {
		bin, cleanup, err := testkit.BuildEbbtable("ebbtable-compat-")
		if err != nil {
			buildErr = err
			return
		}
		cleanupAll = append(cleanupAll, cleanup)
		ebbBin = bin
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "cloud.google.com/go/bigtable").Output()
		if err != nil {
			buildErr = fmt.Errorf("locate the client module: %w", err)
			return
		}
		suiteDir = strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(suiteDir, "integration_test.go")); err != nil {
			buildErr = fmt.Errorf("client module has no integration suite at %s: %w", suiteDir, err)
			return
		}
		suiteBin = filepath.Join(filepath.Dir(bin), "bigtable.test")
		buildErr = buildSuite(suiteBin, suiteDir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return ebbBin, suiteBin, suiteDir
}

// buildSuite links the client module's test binary at bin, unless the one
// there was linked from the same module directory by the same Go release.
// The module cache is read-only and its directory names the version, so
// the two decide the binary; asking the go command whether it is up to
// date costs about a CPU-second on every run of the package. A key file
// next to the binary records what it was built from.
func buildSuite(bin, dir string) error {
	key := fmt.Sprintf("%s %s %s/%s GOFLAGS=%s", dir, runtime.Version(), runtime.GOOS, runtime.GOARCH, os.Getenv("GOFLAGS"))
	keyFile := bin + ".key"
	if b, err := os.ReadFile(keyFile); err == nil && string(b) == key {
		if _, err := os.Stat(bin); err == nil {
			return nil
		}
	}
	os.Remove(keyFile)
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the client's test binary: %v\n%s", err, out)
	}
	return os.WriteFile(keyFile, []byte(key), 0o600)
}

// serve starts a fresh ebbtable on a free loopback port with an empty data
// directory and returns its address; the process is stopped when t ends.
func serve(t *testing.T, ebb string, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--ballast-size", "0", "--data", filepath.Join(dir, "data")}, extra...)
	cmd := exec.Command(ebb, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case line := <-lines:
		addr, ok := strings.CutPrefix(line, "ebbtable running on ")
		if !ok {
			t.Fatalf("serve printed %q", line)
		}
		return addr
	case <-time.After(30 * time.Second):
		b, _ := os.ReadFile(logf.Name())
		t.Fatalf("ebbtable did not start within 30s:\n%s", b)
	}
	return ""
}

// result is one integration test's outcome in one process.
type result struct {
	passed, skipped bool
	output          string
}

// runSuite runs the client's test binary against addr with extra flags and
// returns the outcome of each top-level test it ran, by name.
func runSuite(t *testing.T, suite, dir, addr string, timeout time.Duration, args ...string) (map[string]*result, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite, append([]string{"-test.count=1", "-test.v"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "BIGTABLE_EMULATOR_HOST="+addr)
	out, _ := cmd.CombinedOutput()
	if ctx.Err() != nil {
		out = append(out, fmt.Sprintf("\n[compat: killed after %v]\n", timeout)...)
	}
	return parseResults(string(out)), string(out)
}

// parseResults reads `go test -v` output into per-test results. Parallel
// tests interleave their output; go test heads each stretch with
// "=== RUN|CONT|NAME|PAUSE <test>", so every line is given to the
// top-level test of the last header.
func parseResults(out string) map[string]*result {
	res := map[string]*result{}
	bufs := map[string]*strings.Builder{}
	current := ""
	top := func(name string) string { return strings.SplitN(name, "/", 2)[0] }
	for _, line := range strings.Split(out, "\n") {
		if m := testHeader.FindStringSubmatch(line); m != nil {
			current = top(m[1])
		}
		verdict := ""
		if m := testVerdict.FindStringSubmatch(strings.TrimSpace(line)); m != nil && !strings.Contains(m[2], "/") {
			verdict, current = m[1], m[2]
		}
		b := bufs[current]
		if b == nil {
			b = &strings.Builder{}
			bufs[current] = b
		}
		b.WriteString(line)
		b.WriteByte('\n')
		if verdict != "" {
			res[current] = &result{passed: verdict != "FAIL", skipped: verdict == "SKIP", output: b.String()}
		}
	}
	return res
}

var (
	testHeader  = regexp.MustCompile(`^=== (?:RUN|CONT|NAME|PAUSE)\s+(\S+)`)
	testVerdict = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+)`)
)

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
