package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIDocsCurrent fails while docs/cli.md differs from what the cobra
// commands generate, so the reference cannot go stale.
func TestCLIDocsCurrent(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteReference(&buf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "docs", "cli.md")
	have, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(have, buf.Bytes()) {
		return
	}
	haveLines, wantLines := strings.Split(string(have), "\n"), strings.Split(buf.String(), "\n")
	for i := 0; i < max(len(haveLines), len(wantLines)); i++ {
		var h, w string
		if i < len(haveLines) {
			h = haveLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if h != w {
			t.Fatalf("docs/cli.md is stale (run 'go generate ./cli'); first difference at line %d:\n have: %q\n want: %q", i+1, h, w)
		}
	}
}

// TestCLIDocsCover checks the reference names every command, so a command
// hidden from it by mistake shows.
func TestCLIDocsCover(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteReference(&buf); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"serve", "read", "lookup", "count", "ls", "gc run", "ttl run", "backup create", "restore", "replication diff", "completion bash", "verify"} {
		if !strings.Contains(buf.String(), "\n## ebbtable "+c+"\n") {
			t.Errorf("the reference has no section for ebbtable %s", c)
		}
	}
}
