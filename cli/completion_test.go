package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/creack/pty"
	"github.com/ebbtable/ebbtable/internal/testkit"
)

// completionPath is a PATH holding the test binary under the name
// ebbtable, which the completion scripts run (`ebbtable __complete ...`).
func completionPath(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(ebbtableBin, filepath.Join(dir, "ebbtable")); err != nil {
		t.Fatal(err)
	}
	return dir + string(os.PathListSeparator) + os.Getenv("PATH")
}

// shellOrSkip finds a shell (for bash, with the bash-completion package
// cobra's script needs); CI installs them all (.ci/run).
func shellOrSkip(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed (.ci/run installs it)", name)
	}
	if _, err := os.Stat(bashCompletion); name == "bash" && err != nil {
		t.Skipf("bash-completion is not installed (.ci/run installs it): %v", err)
	}
	return p
}

// bashCompletion is the bash-completion package's script.
const bashCompletion = "/usr/share/bash-completion/bash_completion"

// completionCases are command lines (the cursor at the end) and words each
// must complete to.
var completionCases = []struct {
	line string
	want []string
}{
	{"ebbtable g", []string{"gc"}},
	{"ebbtable gc r", []string{"raise", "run"}},
	{"ebbtable completion ", []string{"bash", "fish", "zsh"}},
	{"ebbtable read t --pre", []string{"--prefix"}},
	{"ebbtable backup c", []string{"create"}},
}

// TestCompletionBash sources `ebbtable completion bash` in a real bash
// with the bash-completion package, and calls the completion function as
// bash does on TAB.
func TestCompletionBash(t *testing.T) {
	bash := shellOrSkip(t, "bash")
	t.Parallel()
	path := completionPath(t)
	for _, tc := range completionCases {
		script := `
. /usr/share/bash-completion/bash_completion
. <(ebbtable completion bash)
COMP_LINE="$1"
COMP_POINT=${#COMP_LINE}
read -r -a COMP_WORDS <<< "$COMP_LINE"
[[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
fn=$(complete -p ebbtable | sed -E 's/.*-F ([^ ]+).*/\1/')
"$fn" ebbtable "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
`
		r := run(t, []string{"PATH=" + path}, bash, "--norc", "--noprofile", "-c", script, "bash", tc.line).mustSucceed(t, "bash completion")
		checkCompletions(t, "bash", tc.line, strings.Fields(r.stdout), tc.want)
	}
}

// TestCompletionFish asks a real fish what it completes each line to.
func TestCompletionFish(t *testing.T) {
	fish := shellOrSkip(t, "fish")
	t.Parallel()
	path := completionPath(t)
	for _, tc := range completionCases {
		r := run(t, []string{"PATH=" + path, "XDG_CONFIG_HOME=" + t.TempDir(), "XDG_DATA_HOME=" + t.TempDir()}, fish, "--no-config", "-c",
			"ebbtable completion fish | source; complete -C \""+tc.line+"\"").mustSucceed(t, "fish completion")
		var words []string
		for _, l := range strings.Split(r.stdout, "\n") {
			if w, _, _ := strings.Cut(l, "\t"); w != "" {
				// fish prints the completed word; for flags, the flag.
				words = append(words, w)
			}
		}
		checkCompletions(t, "fish", tc.line, words, tc.want)
	}
}

// TestCompletionZsh types each line and a TAB into an interactive zsh on a
// pseudo-terminal, with `ebbtable completion zsh` loaded through compinit,
// and reads what zsh lists or inserts.
func TestCompletionZsh(t *testing.T) {
	zsh := shellOrSkip(t, "zsh")
	t.Parallel()
	path := completionPath(t)
	fpath := t.TempDir()
	script := run(t, nil, ebbtableBin, "completion", "zsh").mustSucceed(t, "completion zsh").stdout
	if err := os.WriteFile(filepath.Join(fpath, "_ebbtable"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	// One shell for every case: compinit is the slow part of a start
	// (one shell per case took 7 s, this 1-2 s). After each case the line
	// is dropped and a marker command must run, so no case starts on what
	// the last one left.
	cmd := exec.Command(zsh, "-f", "-i")
	cmd.Env = cleanEnv("PATH="+path, "TERM=dumb", "ZDOTDIR="+t.TempDir())
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
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
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		f.Close()
		<-copied
	}()
	// A prompt to wait for, completion listing every match at once.
	setup := "PS1='READY> '; fpath=(" + fpath + " $fpath); autoload -Uz compinit; compinit -u -D; zstyle ':completion:*' list-prompt ''; LISTMAX=0; unsetopt BEEP\n"
	f.Write([]byte(setup))
	waitShown(t, &out, "READY> ")
	for i, tc := range completionCases {
		mark := len(out.String())
		f.Write([]byte(tc.line + "\t\t"))
		ok := waitUntil(func() bool {
			got := out.String()[mark:]
			for _, w := range tc.want {
				if !strings.Contains(strings.TrimPrefix(got, tc.line), w) && !strings.Contains(got, strings.TrimSpace(tc.line)+w[len(lastWord(tc.line)):]) {
					return false
				}
			}
			return true
		})
		if !ok {
			t.Errorf("zsh: %q + TAB did not show %q; the terminal showed:\n%q", tc.line, tc.want, out.String()[mark:])
		}
		// Ctrl-U drops the line; then a command whose output (unlike
		// its echo) says zsh has read everything typed so far.
		mark = len(out.String())
		done := fmt.Sprintf("CASE%dDONE", i)
		f.Write([]byte{0x15}) // Ctrl-U: kill the whole line
		f.Write([]byte("echo CASE" + `""` + done[4:] + "\n"))
		if !waitUntil(func() bool {
			got := out.String()[mark:]
			at := strings.Index(got, done)
			return at >= 0 && strings.Contains(got[at:], "READY> ")
		}) {
			t.Fatalf("zsh: no fresh prompt after the case; the terminal showed:\n%q", out.String()[mark:])
		}
	}
}

// lastWord is the word under the cursor.
func lastWord(line string) string {
	if strings.HasSuffix(line, " ") {
		return ""
	}
	f := strings.Fields(line)
	return f[len(f)-1]
}

func checkCompletions(t *testing.T, shell, line string, got, want []string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%s: %q completes to %q, want it to include %q", shell, line, got, w)
		}
	}
}

// waitShown waits until out holds s.
func waitShown(t *testing.T, out *syncBuffer, s string) {
	t.Helper()
	if !waitUntil(func() bool { return strings.Contains(out.String(), s) }) {
		t.Fatalf("the terminal never showed %q:\n%q", s, out.String())
	}
}

// waitUntil polls cond until it holds or processTimeout passes.
func waitUntil(cond func() bool) bool { return testkit.Poll(processTimeout, cond) }

// TestCompletionTables completes table names from a running server, in a
// real bash, and checks every command meant to complete them exists.
func TestCompletionTables(t *testing.T) {
	root := newRootCmd(nil, nil)
	for _, path := range tableArgCommands {
		c, _, err := root.Find(strings.Fields(path)[1:])
		if err != nil || c.CommandPath() != path {
			t.Errorf("%q is not a command", path)
		} else if c.ValidArgsFunction == nil {
			t.Errorf("%s does not complete table names", path)
		}
	}
	bash := shellOrSkip(t, "bash")
	t.Parallel()
	srv := startServer(t, t.TempDir())
	at := func(args ...string) []string { return append(args, "--addr", srv.addr) }
	for _, tbl := range []string{"events", "everything", "users"} {
		ebbtable(t, at("createtable", tbl)...).mustSucceed(t, "createtable")
	}
	path := completionPath(t)
	script := `
. /usr/share/bash-completion/bash_completion
. <(ebbtable completion bash)
COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}
read -r -a COMP_WORDS <<< "$COMP_LINE"
[[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
__start_ebbtable ebbtable "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
`
	for line, want := range map[string]string{
		"ebbtable read --addr " + srv.addr + " ev":   "events everything",
		"ebbtable lookup --addr " + srv.addr + " ":   "events everything users",
		"ebbtable count --addr " + srv.addr + " u":   "users",
		"ebbtable read --addr " + srv.addr + " nope": "",
		"ebbtable read --addr 127.0.0.1:1 ":          "", // no server: no names, no hang
	} {
		r := run(t, []string{"PATH=" + path}, bash, "--norc", "--noprofile", "-c", script, "bash", line).mustSucceed(t, "bash completion")
		if got := strings.Join(strings.Fields(r.stdout), " "); got != want {
			t.Errorf("%q completes to %q, want %q", line, got, want)
		}
	}
}
