package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeQuickStart runs the README's quick start literally, line by
// line, against a server started with the README's serve command, so the
// first thing a newcomer types cannot silently break. Two things change:
// the server listens on a free port (tests run in parallel) and
// `go run ./cmd/ebbtable` is the binary TestMain built.
func TestReadmeQuickStart(t *testing.T) {
	cbtPath, err := exec.LookPath("cbt")
	if err != nil {
		t.Skip("cbt is not on the PATH")
	}
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := shellBlocks(string(readme))
	if len(blocks) < 2 {
		t.Fatalf("README has %d sh blocks, want the two commands and the quick start", len(blocks))
	}
	const runCmd = "go run ./cmd/ebbtable"
	serve := strings.Fields(commandPart(blocks[0][0]))
	if strings.Join(serve, " ") != runCmd+" serve" {
		t.Fatalf("README's first command is %q, want %q", blocks[0][0], runCmd+" serve")
	}
	srv := startServe(t, "serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", t.TempDir())

	// cbt alone on the PATH: without -creds it would otherwise run gcloud
	// for defaults (see TestCbt).
	bin := t.TempDir()
	if err := os.Symlink(cbtPath, filepath.Join(bin, "cbt")); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + bin, "TZ=UTC"}
	var outputs []string
	for _, line := range blocks[1] {
		cmd := commandPart(line)
		if rest, ok := strings.CutPrefix(cmd, "export BIGTABLE_EMULATOR_HOST="); ok {
			if rest != "localhost:8086" {
				t.Fatalf("the quick start points at %s, not the serve command's localhost:8086", rest)
			}
			env = append(env, "BIGTABLE_EMULATOR_HOST="+srv.addr)
			continue
		}
		cmd = strings.Replace(cmd, runCmd, ebbtableBin, 1)
		r := run(t, env, "/bin/bash", "-c", cmd)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", line, r.code, r.stdout, r.stderr)
		}
		outputs = append(outputs, r.stdout)
	}
	all := strings.Join(outputs, "\n")
	for _, want := range []string{`"hello"`, "(age() > 30d || versions() > 2)"} {
		if !strings.Contains(all, want) {
			t.Errorf("the quick start's output lacks %q:\n%s", want, all)
		}
	}
}

// shellBlocks returns the lines of each ```sh block of a Markdown text.
func shellBlocks(md string) [][]string {
	var blocks [][]string
	var cur []string
	in := false
	for _, l := range strings.Split(md, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```sh":
			in, cur = true, nil
		case in && strings.TrimSpace(l) == "```":
			in = false
			blocks = append(blocks, cur)
		case in && strings.TrimSpace(l) != "":
			cur = append(cur, l)
		}
	}
	return blocks
}

// commandPart is a shell line without its trailing comment.
func commandPart(line string) string {
	if i := strings.Index(line, "  #"); i >= 0 {
		line = line[:i]
	}
	return strings.TrimSpace(line)
}
