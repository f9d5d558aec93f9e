//go:build unix

package robustness

// The harness for the disk-fault tests (diskfault_test.go): a small ext4
// filesystem on a loop device that a test can fill, kill (EIO) or stall; a
// write load through the official client that records what each write
// returned and what reads saw; a gRPC health watcher; and a server start
// with a deadline.

import (
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// loopFS is an ext4 filesystem in an image file, loop-mounted on dir.
type loopFS struct {
	img, dir string
	mounted  bool
}

// newLoopFS makes and mounts an ext4 filesystem of size bytes, unmounted at
// cleanup (after any server on it, which the test starts later and so stops
// first). It skips the test where the machine does not allow it: not Linux,
// not root, no mkfs.ext4, no loop device.
func newLoopFS(t *testing.T, size int64) *loopFS {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("disk-fault tests need Linux (loop-mounted ext4)")
	}
	if os.Geteuid() != 0 {
		t.Skip("disk-fault tests need root to mount a small loop filesystem; run them as root (sudo go test -run Disk ./robustness)")
	}
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("disk-fault tests need %s: %v", tool, err)
		}
	}
	base := t.TempDir() // removed after the unmount registered below
	f := &loopFS{img: filepath.Join(base, "fs.img"), dir: filepath.Join(base, "mnt")}
	if err := os.Mkdir(f.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A sparse image: the host disk holds only what the test writes.
	if err := os.WriteFile(f.img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f.img, size); err != nil {
		t.Fatal(err)
	}
	// -m 0: no blocks reserved for root, or the server (running as root
	// here) would write on into the reserve and the disk would not fill.
	if out, err := exec.Command("mkfs.ext4", "-q", "-m", "0", f.img).CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4 failed, cannot make a test filesystem: %v\n%s", err, out)
	}
	if err := f.mount(); err != nil {
		t.Skipf("cannot loop-mount a test filesystem here (no loop device or no privilege?): %v", err)
	}
	t.Cleanup(func() { f.unmount(t) })
	return f
}

func (f *loopFS) mount() error {
	if out, err := exec.Command("mount", "-o", "loop", f.img, f.dir).CombinedOutput(); err != nil {
		return fmt.Errorf("mount -o loop %s %s: %v: %s", f.img, f.dir, err, bytes.TrimSpace(out))
	}
	f.mounted = true
	return nil
}

// unmount unmounts, retrying while a dying process still holds files open,
// and detaches lazily as a last resort so no mount outlives the test.
func (f *loopFS) unmount(t *testing.T) {
	t.Helper()
	if !f.mounted {
		return
	}
	var out []byte
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if out, err = exec.Command("umount", f.dir).CombinedOutput(); err == nil {
			f.mounted = false
			return
		}
	}
	t.Errorf("umount %s: %v: %s; detaching lazily", f.dir, err, bytes.TrimSpace(out))
	if out, err := exec.Command("umount", "-l", f.dir).CombinedOutput(); err != nil {
		t.Errorf("umount -l %s: %v: %s", f.dir, err, bytes.TrimSpace(out))
		return
	}
	f.mounted = false
}

// remount unmounts and mounts the image again (after an EIO shutdown the
// kernel only lets the filesystem come back this way).
func (f *loopFS) remount(t *testing.T) {
	t.Helper()
	f.unmount(t)
	if err := f.mount(); err != nil {
		t.Fatal(err)
	}
}

// free returns the bytes available to the server (root, with -m 0).
func (f *loopFS) free(t *testing.T) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(f.dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// fillTo allocates a filler file that leaves about leave bytes free, and
// returns its path.
func (f *loopFS) fillTo(t *testing.T, leave int64) string {
	t.Helper()
	size := f.free(t) - leave
	if size <= 0 {
		t.Fatalf("filesystem has only %d bytes free, want more than %d", f.free(t), leave)
	}
	path := filepath.Join(f.dir, "filler")
	fl, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	if err := syscall.Fallocate(int(fl.Fd()), 0, 0, size); err != nil {
		t.Fatalf("fallocate filler: %v", err)
	}
	if err := fl.Sync(); err != nil {
		t.Fatal(err)
	}
	return path
}

// ext4IocShutdown is EXT4_IOC_SHUTDOWN, _IOR('X', 125, __u32); with
// ext4GoingNoLogFlush the filesystem dies as a disk does: every later
// write, fsync and create fails with EIO and the journal is not flushed.
const (
	ext4IocShutdown     = 0x8004587D
	ext4GoingNoLogFlush = 2
)

// shutdown makes the filesystem fail every I/O with EIO until remounted.
func (f *loopFS) shutdown(t *testing.T) {
	t.Helper()
	d, err := os.Open(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	flag := uint32(ext4GoingNoLogFlush)
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, d.Fd(), ext4IocShutdown, uintptr(unsafe.Pointer(&flag))); errno != 0 {
		t.Skipf("EXT4_IOC_SHUTDOWN refused on this kernel: %v", errno)
	}
}

// device returns the filesystem's block device as MAJOR:MINOR.
func (f *loopFS) device(t *testing.T) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(f.dir, &st); err != nil {
		t.Fatal(err)
	}
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	return fmt.Sprintf("%d:%d", major, minor)
}

// blkioWriteBPS is cgroup v1's write throttle. A rule in the root cgroup
// applies to every writer of the device, the kernel's journal and
// writeback threads included; the device is this test's own loop device.
const blkioWriteBPS = "/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device"

// throttle limits writes to the device to bps bytes a second (0 lifts the
// limit). It skips the test where cgroup v1's blkio controller is missing.
func (f *loopFS) throttle(t *testing.T, bps int64) {
	t.Helper()
	if _, err := os.Stat(blkioWriteBPS); err != nil {
		t.Skipf("no cgroup v1 blkio throttle here (%v); cannot stall a disk", err)
	}
	rule := fmt.Sprintf("%s %d", f.device(t), bps)
	if err := os.WriteFile(blkioWriteBPS, []byte(rule), 0); err != nil {
		t.Fatalf("write %q to %s: %v", rule, blkioWriteBPS, err)
	}
}

// outcome is what a write's caller learnt.
type outcome int

const (
	pending outcome = iota
	acked           // returned OK: must survive everything
	failed          // the server answered with an error: never read, before or after a restart
	// uncertain: the server answered with an error and said the write
	// may or may not be applied after a restart (its WAL sync failed: the
	// disk may have kept the record). Never read while the server runs.
	uncertain
	unknown // no answer (deadline, connection lost): may or may not have happened
)

func (o outcome) String() string {
	return [...]string{"pending", "acked", "failed", "uncertain", "unknown"}[o]
}

// classify reads a write's error. An error the server produced (every
// ebbtable status message starts "ebbtable:", and codes other than
// Unavailable, DeadlineExceeded, Canceled and Unknown are never made by the
// transport) means the write did not happen, unless it says the write may
// be applied after a restart; a lost connection or a deadline leaves it
// undecided.
func classify(err error) outcome {
	if err == nil {
		return acked
	}
	st, ok := status.FromError(err)
	if !ok {
		return unknown
	}
	if strings.Contains(st.Message(), "ebbtable") {
		if strings.Contains(st.Message(), "may or may not be applied") {
			return uncertain
		}
		return failed
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown:
		return unknown
	}
	return failed
}

// diskWrite is one SetCell of a unique value to its own row.
type diskWrite struct {
	key        string
	value      []byte
	out        outcome
	err        error
	start, end time.Time
}

// diskLoad writes unique, incompressible values to fresh rows from several
// workers until a write fails (or stop), while a reader reads the rows
// whose writes are in flight. It records every write's outcome and every
// value a read returned.
type diskLoad struct {
	tbl       *bigtable.Table
	valueSize int
	timeout   time.Duration // per write

	next    atomic.Int64
	acks    atomic.Int64
	stopped atomic.Bool
	workers sync.WaitGroup
	reader  chan struct{} // closed when the reader returns

	mu        sync.Mutex
	writes    map[string]*diskWrite
	inflight  map[string]*diskWrite
	seen      map[string]string // key → the first read on a live server that returned its value
	seenLater map[string]bool   // keys a restarted server returned
	restarted bool              // verifyRestarted read the whole table
	wrong     []string          // reads that returned a value no write of theirs wrote
	started   time.Time
	faultAt   time.Time // when the test injected its fault (zero: none)
	// raceAtFault: writes acknowledged after faultAt raced the fault (an
	// fsync the kernel reported done as the disk died); their loss is
	// reported, and fails the test only with -diskfault.strict.
	raceAtFault bool
	firstErrAt  time.Time
	firstErr    error
}

func startDiskLoad(tbl *bigtable.Table, workers, valueSize int) *diskLoad {
	l := &diskLoad{
		tbl: tbl, valueSize: valueSize, timeout: 5 * time.Second,
		writes: map[string]*diskWrite{}, inflight: map[string]*diskWrite{}, seen: map[string]string{}, seenLater: map[string]bool{},
		reader: make(chan struct{}), started: time.Now(),
	}
	for range workers {
		l.workers.Add(1)
		go l.work()
	}
	go l.read()
	return l
}

func (l *diskLoad) work() {
	defer l.workers.Done()
	for !l.stopped.Load() {
		seq := l.next.Add(1)
		w := &diskWrite{key: fmt.Sprintf("r%06d", seq), value: make([]byte, l.valueSize)}
		rand.Read(w.value) // incompressible, so the disk fills as fast as the WAL grows
		copy(w.value, fmt.Sprintf("%s/", w.key))
		m := bigtable.NewMutation()
		// Server time: not idempotent, so the client does not retry and
		// each outcome is one attempt's.
		m.Set("f", "c", bigtable.ServerTime, w.value)
		l.mu.Lock()
		w.start = time.Now()
		l.writes[w.key], l.inflight[w.key] = w, w
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
		err := l.tbl.Apply(ctx, w.key, m)
		cancel()
		l.mu.Lock()
		w.end, w.err, w.out = time.Now(), err, classify(err)
		delete(l.inflight, w.key)
		if err != nil && l.firstErr == nil {
			l.firstErr, l.firstErrAt = err, w.end
		}
		l.mu.Unlock()
		if err != nil {
			l.stopped.Store(true) // write until a write fails
			return
		}
		l.acks.Add(1)
	}
}

// read reads rows whose writes are in flight: a read must never return a
// value whose write then fails.
func (l *diskLoad) read() {
	defer close(l.reader)
	for !l.stopped.Load() {
		l.mu.Lock()
		var w *diskWrite
		for _, w = range l.inflight {
			break
		}
		l.mu.Unlock()
		if w == nil {
			time.Sleep(time.Millisecond)
			continue
		}
		// Short: once the server is gone the client would retry until
		// the deadline, and the load's stop waits for this read.
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		row, err := l.tbl.ReadRow(ctx, w.key)
		cancel()
		if err == nil {
			l.observe(row, "a ReadRow while its write was in flight")
		}
	}
}

// afterRestart is how verifyRestarted's reads are recorded.
const afterRestart = "ReadRows after the restart"

// observe records what a read returned.
func (l *diskLoad) observe(row bigtable.Row, how string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, items := range row {
		for _, it := range items {
			w := l.writes[it.Row]
			if w == nil || !bytes.Equal(it.Value, w.value) {
				l.wrong = append(l.wrong, fmt.Sprintf("%s returned row %q %s = %.24q…, a value never written there", how, it.Row, it.Column, it.Value))
				continue
			}
			if how == afterRestart {
				l.seenLater[it.Row] = true
			} else if _, ok := l.seen[it.Row]; !ok {
				l.seen[it.Row] = how
			}
		}
	}
}

// stop stops the load and waits for its workers, up to limit.
func (l *diskLoad) stop(t *testing.T, limit time.Duration) {
	t.Helper()
	l.stopped.Store(true)
	done := make(chan struct{})
	go func() { l.workers.Wait(); <-l.reader; close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("the write load did not stop within %v", limit)
	}
}

// waitAcks waits until n writes were acknowledged, failing the test with
// the server's stderr if the load stops first.
func (l *diskLoad) waitAcks(t *testing.T, n int64, srv *faultProc) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for l.acks.Load() < n {
		if l.stopped.Load() || time.Now().After(deadline) {
			t.Fatalf("only %d writes acknowledged, want %d (first error: %v); server stderr (tail):\n%s", l.acks.Load(), n, l.firstErr, tail(srv.stderr.String(), 5))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFirstError waits for the first failed write, up to limit, and
// returns when it returned.
func (l *diskLoad) waitFirstError(t *testing.T, limit time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		l.mu.Lock()
		at, err := l.firstErrAt, l.firstErr
		l.mu.Unlock()
		if err != nil {
			return at
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write failed within %v (%d acknowledged)", limit, l.acks.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// counts returns how many writes ended each way, and the bytes acknowledged.
func (l *diskLoad) counts() (n map[outcome]int, ackedBytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n = map[outcome]int{}
	for _, w := range l.writes {
		n[w.out]++
		if w.out == acked {
			ackedBytes += int64(len(w.value))
		}
	}
	return n, ackedBytes
}

// errorSample returns a few distinct write errors, for the log.
func (l *diskLoad) errorSample() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, w := range l.writes {
		if w.err != nil {
			s := fmt.Sprintf("%v: %v", w.out, w.err)
			if !slices.Contains(out, s) && len(out) < 4 {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return out
}

// readBack reads each failed or uncertain write's row and then the whole
// table on the live server: neither may return such a write's value. A read that
// errors (the server is stopping) sees nothing and is only logged.
func (l *diskLoad) readBack(t *testing.T, client *bigtable.Client, how string) {
	t.Helper()
	l.mu.Lock()
	var failedKeys []string
	for k, w := range l.writes {
		if w.out == failed || w.out == uncertain {
			failedKeys = append(failedKeys, k)
		}
	}
	l.mu.Unlock()
	slices.Sort(failedKeys)
	tbl := client.Open("df")
	for _, k := range failedKeys {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		row, err := tbl.ReadRow(ctx, k)
		cancel()
		if err != nil {
			t.Logf("%s: ReadRow %s: %v", how, k, err)
			break // the server is going; the scan below says the same
		}
		l.observe(row, how+" (ReadRow)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		l.observe(r, how+" (ReadRows)")
		return true
	})
	if err != nil {
		t.Logf("%s: ReadRows: %v", how, err)
	}
}

// verifyRestarted reads the whole table from a restarted server: every
// acknowledged write is there with its value, and no failed one.
func (l *diskLoad) verifyRestarted(t *testing.T, client *bigtable.Client) {
	t.Helper()
	got := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := client.Open("df").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		got[r.Key()] = true
		l.observe(r, afterRestart)
		return true
	})
	if err != nil {
		t.Errorf("ReadRows after the restart: %v", err)
		return
	}
	l.mu.Lock()
	l.restarted = true
	var lost []string
	present := map[outcome]int{}
	for k, w := range l.writes {
		if got[k] {
			present[w.out]++
		} else if w.out == acked {
			what := k
			if !l.faultAt.IsZero() {
				what += fmt.Sprintf(" (sent %v, acknowledged %v after the fault)", w.start.Sub(l.faultAt).Round(time.Microsecond), w.end.Sub(l.faultAt).Round(time.Microsecond))
			}
			lost = append(lost, what)
		}
	}
	raced := l.raceAtFault
	l.mu.Unlock()
	slices.Sort(lost)
	if raced && !*diskfaultStrict {
		var before []string
		for _, what := range lost {
			if w := l.writes[strings.Fields(what)[0]]; w.end.Before(l.faultAt) {
				before = append(before, what)
			}
		}
		if n := len(lost) - len(before); n > 0 {
			t.Logf("%d writes acknowledged as the disk died were lost (a kernel race, see docs/reliability.md; -diskfault.strict fails on it): %s", n, sample(lost))
		}
		lost = before
	}
	if len(lost) > 0 {
		t.Errorf("%d acknowledged writes lost after the restart: %s", len(lost), sample(lost))
	}
	t.Logf("after the restart: %d rows; present by outcome: %v", len(got), present)
}

// checkReads reports every read on the live server that returned the value
// of a write that returned an error; every failed write (one not said to be
// uncertain) present after the restart; every value a live read returned
// that the restart lost; and every read that returned a value never
// written.
func (l *diskLoad) checkReads(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var live, later, undurable, racedReads []string
	for k, w := range l.writes {
		how, seen := l.seen[k]
		// Reads see only durable writes: what one returned survives. A
		// write whose sync the kernel reported done as the disk died (it
		// ended after the fault) may be read and then lost: the same
		// kernel race as a lost acknowledgement (docs/reliability.md),
		// reported, and failed on only with -diskfault.strict.
		if seen && l.restarted && !l.seenLater[k] {
			what := fmt.Sprintf("%s (%v: %v) was returned by %s", k, w.out, w.err, how)
			if l.raceAtFault && !*diskfaultStrict && !w.end.Before(l.faultAt) {
				racedReads = append(racedReads, what)
			} else {
				undurable = append(undurable, what)
			}
		}
		if seen && (w.out == failed || w.out == uncertain) {
			live = append(live, fmt.Sprintf("%s: its write returned %v, yet %s returned its value", k, w.err, how))
		}
		if l.seenLater[k] && w.out == failed {
			later = append(later, fmt.Sprintf("%s (its write returned %v)", k, w.err))
		}
	}
	slices.Sort(live)
	slices.Sort(later)
	slices.Sort(undurable)
	slices.Sort(racedReads)
	if len(racedReads) > 0 {
		t.Logf("%d writes read while the disk died were gone after the restart (a kernel race, see docs/reliability.md; -diskfault.strict fails on it): %s", len(racedReads), sample(racedReads))
	}
	if len(undurable) > 0 {
		t.Errorf("reads on the live server returned %d writes that were gone after the restart (not durable when read): %s", len(undurable), sample(undurable))
	}
	if len(live) > 0 {
		t.Errorf("phantom reads on the live server: %d failed writes were read back; %s", len(live), sample(live))
	}
	if len(later) > 0 {
		t.Errorf("failed writes present after the restart: %d; %s", len(later), sample(later))
	}
	if len(l.wrong) > 0 {
		t.Errorf("%d reads returned values never written: %s", len(l.wrong), sample(l.wrong))
	}
}

func sample(s []string) string {
	if len(s) > 3 {
		return strings.Join(s[:3], "; ") + fmt.Sprintf("; … (%d more)", len(s)-3)
	}
	return strings.Join(s, "; ")
}

// healthWatch polls a server's gRPC health every 20 ms and records the
// answers.
type healthWatch struct {
	stopCh, done chan struct{}
	mu           sync.Mutex
	obs          []healthObs
}

type healthObs struct {
	sent   time.Time
	answer string // SERVING, NOT_SERVING, or "no answer: …"
}

func watchHealth(t *testing.T, addr string) *healthWatch {
	t.Helper()
	hc := healthpb.NewHealthClient(testkit.Dial(t, addr))
	h := &healthWatch{stopCh: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			sent := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			cancel()
			answer := ""
			if err != nil {
				answer = "no answer: " + status.Code(err).String()
			} else {
				answer = resp.GetStatus().String()
			}
			h.mu.Lock()
			h.obs = append(h.obs, healthObs{sent, answer})
			h.mu.Unlock()
			select {
			case <-h.stopCh:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(h.stop)
	return h
}

func (h *healthWatch) stop() {
	select {
	case <-h.stopCh:
	default:
		close(h.stopCh)
	}
	<-h.done
}

// waitPollAfter waits, up to limit, until a check sent after t0 has been
// answered (or has timed out), so the record covers t0.
func (h *healthWatch) waitPollAfter(t0 time.Time, limit time.Duration) {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		h.mu.Lock()
		n := len(h.obs)
		last := healthObs{}
		if n > 0 {
			last = h.obs[n-1]
		}
		h.mu.Unlock()
		if !last.sent.Before(t0) {
			return
		}
	}
}

// notServingAfter returns when a poll sent after t0 first got anything but
// SERVING, and the first poll sent after that which got SERVING again.
func (h *healthWatch) notServingAfter(t0 time.Time) (first time.Time, answer string, servingAgain *healthObs) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, o := range h.obs {
		if o.sent.Before(t0) || o.answer == "SERVING" {
			continue
		}
		for _, later := range h.obs[i+1:] {
			if later.answer == "SERVING" {
				return o.sent, o.answer, &later
			}
		}
		return o.sent, o.answer, nil
	}
	return time.Time{}, "", nil
}

// faultProc is a server process that records when it exited.
type faultProc struct {
	*serverProc
	exitedAt time.Time // set once exitedWithin has seen the exit
}

// startServeWithin runs `ebbtable serve args…` and waits up to limit for
// its readiness line. It reports whether the server became ready, and how
// long that (or its exit) took; a process not ready within limit is
// killed. The process is killed at cleanup if still running.
func startServeWithin(t *testing.T, limit time.Duration, args ...string) (p *faultProc, ready bool, took time.Duration) {
	t.Helper()
	s, ready, took := testkit.StartServeWithin(t, limit, ebbtableBin, cleanHome(), args...)
	return &faultProc{serverProc: &serverProc{Serve: s, cmd: s.Cmd, addr: s.Addr, stderr: s.Stderr}}, ready, took
}

// kill9 kills the process if it still runs and reaps it. A process stuck
// in a stalled fsync cannot die until the I/O completes, so callers lift
// any throttle first.
func (p *faultProc) kill9() { p.KillNow() }

// exitedWithin says whether the process exits within d.
func (p *faultProc) exitedWithin(d time.Duration) bool {
	if !p.ExitedWithin(d) {
		return false
	}
	p.exitedAt = p.ExitedAt
	return true
}

// diskfaultStrict makes a write acknowledged (or read) as the disk died
// (after the EIO test's shutdown ioctl) and then lost fail the test: see
// raceAtFault.
var diskfaultStrict = flag.Bool("diskfault.strict", false, "TestDiskEIOFailStop: fail when a write acknowledged or read after the shutdown ioctl was lost")

var serveFlagsOnce struct {
	sync.Once
	help string
}

// serveHasFlag reports whether `ebbtable serve` takes --name.
func serveHasFlag(t *testing.T, name string) bool {
	t.Helper()
	serveFlagsOnce.Do(func() {
		out, _ := exec.Command(ebbtableBin, "serve", "--help").CombinedOutput()
		serveFlagsOnce.help = string(out)
	})
	return strings.Contains(serveFlagsOnce.help, "--"+name+" ")
}

// fatalLines returns stderr's lines that report a fatal storage error.
func fatalLines(stderr string) []string {
	var out []string
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, "fatal storage error") {
			out = append(out, line)
		}
	}
	return out
}

// longestSince returns the longest a write started after t0 took, or has
// been waiting so far.
func (l *diskLoad) longestSince(t0 time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	var longest time.Duration
	for _, w := range l.writes {
		if w.start.Before(t0) && !w.end.IsZero() && w.end.Before(t0) {
			continue
		}
		end := w.end
		if end.IsZero() {
			end = now
		}
		start := w.start
		if start.Before(t0) {
			start = t0
		}
		longest = max(longest, end.Sub(start))
	}
	return longest
}

// listDir lists dir's files with their sizes, for failure reports.
func listDir(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range entries {
		size := int64(-1)
		if info, err := e.Info(); err == nil {
			size = info.Size()
		}
		fmt.Fprintf(&b, "%12d %s\n", size, e.Name())
	}
	return b.String()
}
