package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Command is how to start one target's server as a child process. The
// child must print a line containing "running on HOST:PORT" to stdout once
// it accepts connections, and stop on SIGINT.
type Command struct {
	Path string   `json:"path"`
	Args []string `json:"args,omitempty"`
	// Env is added to this process's environment.
	Env []string `json:"env,omitempty"`
}

// Binaries says how the process mode starts each target. Empty fields are
// filled by Build.
type Binaries struct {
	// Ebbtable is the ebbtable binary (run as "serve").
	Ebbtable string
	// Emulator is the reference emulator's binary
	// (cloud.google.com/go/bigtable/cmd/emulator).
	Emulator string
	// Ceiling starts the ceiling server; by default this executable with
	// --serve-ceiling (cmd/ebbbench answers it).
	Ceiling Command
}

// Build fills the empty binaries: it builds ebbtable and the emulator into
// a fresh temporary directory (the go command must run inside this
// module), and the ceiling defaults to this executable with
// --serve-ceiling. cleanup removes what it built.
func (b *Binaries) Build(ctx context.Context, progress io.Writer) (cleanup func(), err error) {
	cleanup = func() {}
	if b.Ebbtable != "" && b.Emulator != "" && b.Ceiling.Path != "" {
		return cleanup, nil
	}
	dir, err := os.MkdirTemp("", "ebbbench-bin-")
	if err != nil {
		return cleanup, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	build := func(out *string, name, pkg string) error {
		if *out != "" {
			return nil
		}
		bin := filepath.Join(dir, name)
		if progress != nil {
			fmt.Fprintf(progress, "building %s\n", pkg)
		}
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("bench: building %s: %w\n%s", pkg, err, stderr.Bytes())
		}
		*out = bin
		return nil
	}
	if err := build(&b.Ebbtable, "ebbtable", "github.com/ebbtable/ebbtable/cmd/ebbtable"); err != nil {
		cleanup()
		return func() {}, err
	}
	if err := build(&b.Emulator, "emulator", "cloud.google.com/go/bigtable/cmd/emulator"); err != nil {
		cleanup()
		return func() {}, err
	}
	if b.Ceiling.Path == "" {
		self, err := os.Executable()
		if err != nil {
			cleanup()
			return func() {}, err
		}
		b.Ceiling = Command{Path: self, Args: []string{"--serve-ceiling"}}
	}
	return cleanup, nil
}

// command is the child process that serves target. profile, if not empty,
// is where ebbtable writes its CPU profile (serve --cpuprofile).
func (b *Binaries) command(target, dataDir, profile string) (Command, error) {
	switch target {
	case TargetEbbtable:
		args := []string{"serve", "--addr", "127.0.0.1:0", "--http-addr", "off", "--data", dataDir,
			// The ballast is a file reserved at start; it costs nothing
			// while serving, and the benchmark's data dirs are temporary.
			"--ballast-size", "0"}
		if profile != "" {
			args = append(args, "--cpuprofile", profile)
		}
		return Command{Path: b.Ebbtable, Args: args}, nil
	case TargetEmulator:
		return Command{Path: b.Emulator, Args: []string{"--host", "127.0.0.1", "--port", "0"}}, nil
	case TargetCeiling, TargetCeilingPebble, TargetCeilingWAL:
		c := b.Ceiling
		c.Args = append(append([]string(nil), c.Args...), "--addr", "127.0.0.1:0")
		switch target {
		case TargetCeilingPebble:
			c.Args = append(c.Args, "--ceiling-pebble", dataDir)
		case TargetCeilingWAL:
			c.Args = append(c.Args, "--ceiling-wal", dataDir)
		}
		return c, nil
	}
	return Command{}, fmt.Errorf("bench: unknown target %q (want %s, %s or %s)", target, TargetEbbtable, TargetEmulator, TargetCeiling)
}

// child is a running server process.
type child struct {
	cmd    *exec.Cmd
	addr   string
	stderr *tailBuffer
	done   chan struct{}
	err    error // Wait's result, set before done closes
}

// startChild starts c and waits (up to a minute) for its "running on" line.
func startChild(ctx context.Context, c Command) (*child, error) {
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	ch := &child{cmd: cmd, stderr: &tailBuffer{max: 8 << 10}, done: make(chan struct{})}
	cmd.Stderr = ch.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", c.Path, err)
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		found := false
		for sc.Scan() {
			if _, addr, ok := strings.Cut(sc.Text(), "running on "); ok && !found {
				found = true
				addrc <- strings.TrimSpace(addr)
			}
		}
		ch.err = cmd.Wait()
		close(ch.done)
	}()
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	select {
	case ch.addr = <-addrc:
		return ch, nil
	case <-ch.done:
		return nil, fmt.Errorf("bench: %s exited before serving: %v\n%s", c.Path, ch.err, ch.stderr.String())
	case <-ctx.Done():
	case <-timer.C:
	}
	ch.stop()
	return nil, fmt.Errorf("bench: %s did not announce its address: %w\n%s", c.Path, context.Cause(ctx), ch.stderr.String())
}

// stop interrupts the child and waits for it to exit (killing it after 30
// seconds). An exit caused by the signal is not an error.
func (ch *child) stop() error {
	select {
	case <-ch.done:
	default:
		_ = ch.cmd.Process.Signal(os.Interrupt)
		timer := time.NewTimer(30 * time.Second)
		select {
		case <-ch.done:
			timer.Stop()
		case <-timer.C:
			_ = ch.cmd.Process.Kill()
			<-ch.done
			return fmt.Errorf("bench: %s did not stop within 30s of SIGINT; killed", ch.cmd.Path)
		}
	}
	var exit *exec.ExitError
	if ch.err != nil && !(errors.As(ch.err, &exit) && !exit.Exited()) {
		return fmt.Errorf("bench: %s: %w\n%s", ch.cmd.Path, ch.err, ch.stderr.String())
	}
	return nil
}

// cpu is the CPU time (all threads) the child has used so far; 0 where
// /proc is missing.
func (ch *child) cpu() time.Duration {
	return procCPU(ch.cmd.Process.Pid)
}

// procCPU is the CPU time process pid has used: the sum of its threads'
// run times in nanoseconds (/proc/PID/task/*/schedstat), or where that is
// missing, utime + stime from /proc/PID/stat (in clock ticks: 10 ms, too
// coarse for short workloads). A Go server's threads live as long as the
// process, so the threads' sum loses nothing to exited ones.
func procCPU(pid int) time.Duration {
	dir := "/proc/" + strconv.Itoa(pid)
	if tasks, err := os.ReadDir(dir + "/task"); err == nil {
		var sum int64
		ok := true
		for _, t := range tasks {
			b, err := os.ReadFile(dir + "/task/" + t.Name() + "/schedstat")
			if err != nil {
				continue // a thread that has just exited
			}
			f, _, _ := strings.Cut(string(b), " ")
			ns, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				ok = false
				break
			}
			sum += ns
		}
		if ok && sum > 0 {
			return time.Duration(sum)
		}
	}
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: fields are counted from
	// the last ')'; utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * time.Second / time.Duration(clockTicks())
}

var clockTicks = sync.OnceValue(func() int64 {
	// AT_CLKTCK (17) in this process's auxiliary vector: the unit of
	// /proc's utime and stime. 100 on every Linux in practice.
	if b, err := os.ReadFile("/proc/self/auxv"); err == nil {
		for i := 0; i+16 <= len(b); i += 16 {
			if binary.NativeEndian.Uint64(b[i:]) == 17 {
				if v := int64(binary.NativeEndian.Uint64(b[i+8:])); v > 0 {
					return v
				}
			}
		}
	}
	return 100
})

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// startProcess starts target as a child process and connects clients to
// it. profile, for ebbtable only, is passed to serve --cpuprofile.
func startProcess(ctx context.Context, bins *Binaries, target, dataDir, profile string) (*Endpoint, *child, error) {
	c, err := bins.command(target, dataDir, profile)
	if err != nil {
		return nil, nil, err
	}
	ch, err := startChild(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	e, err := Dial(ctx, target, ch.addr)
	if err != nil {
		ch.stop()
		return nil, nil, err
	}
	e.stop = ch.stop
	return e, ch, nil
}
