//go:build unix

package robustness

import (
	"cmp"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/anishathalye/porcupine"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

var (
	linSeed         = flag.Uint64("lin.seed", 0, "seed of the first history (0: from the clock)")
	linHistories    = flag.Int("lin.histories", 1, "histories to run, each on a fresh server and data directory, seeds seed, seed+1, …")
	linDuration     = flag.Duration("lin.duration", 0, "load per history with random faults every 0.5–3 s; 0 is the short mode: two kills and one pause in about 5 s")
	linWorkers      = flag.Int("lin.workers", 6, "client workers, each on its own connection")
	linRows         = flag.Int("lin.rows", 10, "hot rows the workers share")
	linMinQPS       = flag.Float64("lin.min-qps", 100, "fewest successful operations per second of the fault plan (its gaps and pauses) for a valid run; the quiet load after the last fault goes on, up to linTailMax, until there are that many")
	linCheckTimeout = flag.Duration("lin.check-timeout", 5*time.Minute, "give up checking one history after this long (the run then fails)")
	linFaults       = flag.String("lin.faults", "kill,stop", `faults the nemesis injects: "kill" (SIGKILL and restart), "stop" (SIGSTOP, later SIGCONT), both, or "none"`)
	linOut          = flag.String("lin.out", "", "directory for the visualization of a failing history (default: the system's temporary directory)")
)

const (
	// linTailMax bounds the quiet load after the last fault that waits
	// for enough successful operations (-lin.min-qps).
	linTailMax  = 20 * time.Second
	linProject  = "proj"
	linInstance = "inst"
	linTable    = "lin"
	linFamily   = "f"
	colReg      = "r" // register: SetCell and compare-and-set
	colCounter  = "n" // ReadModifyWriteRow increment
	colLog      = "a" // ReadModifyWriteRow append
)

// Per-operation deadlines: short, so a paused server does not pile up work.
const (
	minOpTimeout = 500 * time.Millisecond
	maxOpTimeout = time.Second
)

// TestLinearizability runs workers against a server that a nemesis kills and
// pauses, and checks that each row's history is linearizable. See the package
// documentation.
func TestLinearizability(t *testing.T) {
	t.Parallel()
	seed := *linSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	if *linHistories == 1 {
		runLinHistory(t, seed)
		return
	}
	for i := range *linHistories {
		s := seed + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) { runLinHistory(t, s) })
	}
}

// faultKinds parses -lin.faults.
func faultKinds(s string) (kill, stop bool, err error) {
	if s == "none" {
		return false, false, nil
	}
	for _, k := range strings.Split(s, ",") {
		switch strings.TrimSpace(k) {
		case "kill":
			kill = true
		case "stop":
			stop = true
		default:
			return false, false, fmt.Errorf("-lin.faults=%q: want a comma-separated list of kill and stop, or none", s)
		}
	}
	return kill, stop, nil
}

// replayCommand is the command line that runs one history again.
func replayCommand(seed uint64) string {
	cmd := fmt.Sprintf("go test ./robustness -run 'TestLinearizability$' -count=1 -lin.seed=%d", seed)
	if *linDuration > 0 {
		cmd += fmt.Sprintf(" -lin.duration=%v", *linDuration)
	}
	if *linFaults != "kill,stop" {
		cmd += fmt.Sprintf(" -lin.faults=%s", *linFaults)
	}
	if *linWorkers != 6 {
		cmd += fmt.Sprintf(" -lin.workers=%d", *linWorkers)
	}
	if *linRows != 10 {
		cmd += fmt.Sprintf(" -lin.rows=%d", *linRows)
	}
	return cmd
}

// linStats are one history's figures.
type linStats struct {
	load                      time.Duration
	ok, unknownWrites, failed int // successful ops, failed writes kept as unknown, failed reads dropped
	openWrites                int // unknown writes no kill followed: open to the end
	kills, stops              int
	check                     time.Duration
}

func runLinHistory(t *testing.T, seed uint64) {
	killOn, stopOn, err := faultKinds(*linFaults)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d; replay: %s", seed, replayCommand(seed))
	failed := true
	defer func() {
		if failed {
			t.Logf("failed history: seed %d; replay: %s", seed, replayCommand(seed))
		}
	}()

	srv := newServer(t.TempDir())
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.stop)
	addr := srv.addr
	createLinTable(t, addr)

	workers := make([]*linWorker, *linWorkers)
	var okOps atomic.Int64 // the workers' successful operations so far
	for i := range workers {
		workers[i] = newLinWorker(t, i, addr, seed)
		workers[i].okTotal = &okOps
	}
	// The final reads run on a client of their own, after every worker.
	final := newLinWorker(t, len(workers), addr, seed)

	start := time.Now()
	clock := func() int64 { return int64(time.Since(start)) }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(clock, stop)
		}()
	}
	nem := &nemesis{srv: srv, rng: rand.New(rand.NewPCG(seed, 0x6e656d65)), clock: clock}
	nemErr := nem.run(*linDuration, killOn, stopOn)
	// A quiet tail after the last fault, so that the server is seen healthy.
	tail := time.NewTimer(300 * time.Millisecond)
	select {
	case <-tail.C:
	case <-srv.unexpected:
	}
	// The plan fixes the faults, not the machine's speed: under CI's load
	// (every package at once on two cores) a history once had 412
	// successful operations in 5.6 s, 74 a second. The quiet load goes
	// on until the history holds enough operations for a valid run.
	wantOK := int64(*linMinQPS * (nem.planned + 300*time.Millisecond).Seconds())
	extra := time.NewTimer(linTailMax)
more:
	for okOps.Load() < wantOK {
		select {
		case <-time.After(20 * time.Millisecond):
		case <-extra.C:
			break more
		case <-srv.unexpected:
			break more
		}
	}
	extra.Stop()
	close(stop)
	wg.Wait()
	load := time.Since(start)
	if nemErr != nil {
		t.Fatalf("nemesis: %v", nemErr)
	}
	if err := srv.failure(); err != nil {
		t.Fatal(err)
	}

	// The last operation on every row must succeed: each row is read until a
	// read does.
	for r := range *linRows {
		if !final.finalRead(clock, r) {
			t.Fatalf("row %d: no read succeeded within 10 s after the last fault; server stderr:\n%s", r, srv.stderr.String())
		}
	}
	if err := srv.failure(); err != nil {
		t.Fatal(err)
	}

	var ops []porcupine.Operation
	var st linStats
	st.load, st.kills, st.stops = load, nem.kills, nem.stops
	for _, w := range append(workers, final) {
		ops = append(ops, w.history...)
		st.ok += w.ok
		st.unknownWrites += w.unknownWrites
		st.failed += w.failedReads
	}
	st.openWrites = boundUnknown(ops, nem.killed)
	qps := float64(st.ok) / load.Seconds()

	checkStart := time.Now()
	res := porcupine.CheckOperationsTimeout(rowModel, ops, *linCheckTimeout)
	st.check = time.Since(checkStart)
	t.Logf("seed %d: %v of load, %d ops checked (%d ok, %d failed writes kept as unknown, %d of them open to the end; %d failed reads dropped), %.0f ok ops/s, %d kills, %d pauses, check %v: %s",
		seed, load.Round(time.Millisecond), len(ops), st.ok, st.unknownWrites, st.openWrites, st.failed, qps, st.kills, st.stops, st.check.Round(time.Millisecond), res)

	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Fatalf("porcupine gave up after %v without a verdict (raise -lin.check-timeout)", *linCheckTimeout)
	default:
		reportViolation(t, seed, ops, nem.events)
	}
	if int64(st.ok) < wantOK {
		t.Fatalf("invalid run: %d successful ops (%.1f/s), want at least %d (-lin.min-qps %.0f a second of the plan's %v; the quiet load waited up to %v more for them)",
			st.ok, qps, wantOK, *linMinQPS, nem.planned, linTailMax)
	}
	if *linDuration == 0 && ((killOn && st.kills < 2) || (stopOn && st.stops < 1)) {
		t.Fatalf("short mode ran %d kills and %d pauses, want at least 2 and 1", st.kills, st.stops)
	}
	failed = false
}

// boundUnknown gives each write whose outcome is unknown the latest return
// time it can have, and returns how many are open to the end of the history.
//
// A failed write may still take effect after its client gave up (the server
// was paused with the request in its socket, or is still working on it), so
// etcd's robustness tests let it return at infinity. But only the server
// process that received the request can apply it, and that process was
// alive when the client sent it, before the client returned; it is gone once
// the next kill has reaped it. So the write returns at the first kill after
// the client's failure (killed holds the times each kill was complete), or,
// if no kill followed, after every other operation. This keeps the checker's
// search small: a write that never happened stops being a candidate at the
// next kill instead of staying one for the rest of the history.
func boundUnknown(ops []porcupine.Operation, killed []int64) (open int) {
	var end int64
	for _, op := range ops {
		if !op.Output.(linOutput).Unknown {
			end = max(end, op.Return)
		}
	}
	for i := range ops {
		if !ops[i].Output.(linOutput).Unknown {
			continue
		}
		failedAt := ops[i].Return
		j, _ := slices.BinarySearch(killed, failedAt)
		if j < len(killed) {
			ops[i].Return = killed[j]
		} else {
			ops[i].Return = max(end, failedAt) + int64(time.Second)
			open++
		}
	}
	return open
}

// reportViolation writes porcupine's visualization and each illegal row's
// history, and fails the test naming them.
func reportViolation(t *testing.T, seed uint64, ops []porcupine.Operation, events []porcupine.Annotation) {
	t.Helper()
	dir := *linOut
	if dir == "" {
		dir = os.TempDir()
	}
	stamp := time.Now().UTC().Format("20060102T150405")
	html := filepath.Join(dir, fmt.Sprintf("ebbtable-lin-%d-%s.html", seed, stamp))
	_, info := porcupine.CheckOperationsVerbose(rowModel, ops, *linCheckTimeout)
	info.AddAnnotations(events)
	if err := porcupine.VisualizePath(rowModel, info, html); err != nil {
		t.Errorf("writing the visualization: %v", err)
	}
	var illegal []string
	for _, part := range rowModel.Partition(ops) {
		single := rowModel
		single.Partition = nil
		if porcupine.CheckOperationsTimeout(single, part, *linCheckTimeout) == porcupine.Ok {
			continue
		}
		row := part[0].Input.(linInput).Row
		txt := filepath.Join(dir, fmt.Sprintf("ebbtable-lin-%d-%s-row%02d.txt", seed, stamp, row))
		if err := os.WriteFile(txt, []byte(explainRow(part)+"\n"+dumpHistory(part, events)), 0o644); err != nil {
			t.Errorf("writing row %d's history: %v", row, err)
		}
		illegal = append(illegal, fmt.Sprintf("row %d (history: %s)", row, txt))
	}
	t.Fatalf("NOT LINEARIZABLE: %s\nvisualization: %s\nseed %d; replay: %s", strings.Join(illegal, ", "), html, seed, replayCommand(seed))
}

// explainRow describes where the checker got stuck on one row's history: the
// end of its longest partial linearization, with the row's state after each
// step, and the first operations to return that it could not place after it.
func explainRow(ops []porcupine.Operation) string {
	single := rowModel
	single.Partition = nil
	_, info := porcupine.CheckOperationsVerbose(single, ops, *linCheckTimeout)
	var longest []porcupine.Operation
	for _, p := range info.PartialLinearizationsOperations()[0] {
		if len(p) > len(longest) {
			longest = p
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The checker placed %d of %d operations; the last it placed, with the states the row can be in after each:\n", len(longest), len(ops))
	state := rowModel.Init()
	type key struct{ call, ret int64 }
	placed := map[key]bool{}
	for i, op := range longest {
		_, state = rowModel.Step(state, op.Input, op.Output)
		placed[key{op.Call, op.Return}] = true
		if i >= len(longest)-8 {
			fmt.Fprintf(&b, "  %s  ⇒ %s\n", describeTimed(op), rowModel.DescribeState(state))
		}
	}
	var rest []porcupine.Operation
	for _, op := range ops {
		if !placed[key{op.Call, op.Return}] {
			rest = append(rest, op)
		}
	}
	slices.SortFunc(rest, func(a, b porcupine.Operation) int { return cmp.Compare(a.Return, b.Return) })
	b.WriteString("Unplaced, by return time (none of these fits next):\n")
	for _, op := range rest[:min(len(rest), 6)] {
		fmt.Fprintf(&b, "  %s\n", describeTimed(op))
	}
	return b.String()
}

func describeTimed(op porcupine.Operation) string {
	return fmt.Sprintf("%12.6f .. %12.6f  w%d  %s", float64(op.Call)/1e9, float64(op.Return)/1e9, op.ClientId, describeOp(op.Input.(linInput), op.Output.(linOutput)))
}

// dumpHistory lists one row's operations by call time, with the nemesis's
// events between them, one per line.
func dumpHistory(ops []porcupine.Operation, events []porcupine.Annotation) string {
	type line struct {
		at  int64
		txt string
	}
	var lines []line
	for _, op := range ops {
		lines = append(lines, line{op.Call, describeTimed(op)})
	}
	for _, ev := range events {
		lines = append(lines, line{ev.Start, fmt.Sprintf("%12.6f .. %12.6f  nemesis  %s", float64(ev.Start)/1e9, float64(ev.End)/1e9, ev.Description)})
	}
	slices.SortStableFunc(lines, func(a, b line) int { return int(min(max(a.at-b.at, -1), 1)) })
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.txt)
		b.WriteByte('\n')
	}
	return b.String()
}

// dial connects to addr, reconnecting fast after the server restarts.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: minOpTimeout,
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func createLinTable(t *testing.T, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	admin, err := bigtable.NewAdminClient(ctx, linProject, linInstance, option.WithGRPCConn(dial(t, addr)))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	conf := &bigtable.TableConf{TableID: linTable, ColumnFamilies: map[string]bigtable.Family{
		linFamily: {GCPolicy: bigtable.MaxVersionsPolicy(1)},
	}}
	if err := admin.CreateTableFromConf(ctx, conf); err != nil {
		t.Fatal(err)
	}
}

// linWorker is one client: its own connection, its own random stream, its
// own history.
type linWorker struct {
	id  int
	tbl *bigtable.Table
	rng *rand.Rand
	seq int
	// seen is the last register value this worker saw per row: what its
	// compare-and-sets expect.
	seen map[int]string

	history                        []porcupine.Operation
	ok, unknownWrites, failedReads int
	okTotal                        *atomic.Int64 // counts ok too, if set: read while the workers run
	t                              *testing.T
}

func newLinWorker(t *testing.T, id int, addr string, seed uint64) *linWorker {
	client, err := bigtable.NewClientWithConfig(context.Background(), linProject, linInstance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}, DisableSession: true},
		option.WithGRPCConn(dial(t, addr)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return &linWorker{
		id:   id,
		tbl:  client.Open(linTable),
		rng:  rand.New(rand.NewPCG(seed, uint64(id)+1)),
		seen: map[int]string{},
		t:    t,
	}
}

func rowKey(r int) string { return fmt.Sprintf("row%02d", r) }

// unique returns a value no other operation of the history writes.
func (w *linWorker) unique() string {
	w.seq++
	return fmt.Sprintf("w%d.%d", w.id, w.seq)
}

// run issues random operations until stop is closed.
func (w *linWorker) run(clock func() int64, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		in := w.next()
		if ok := w.do(clock, in); !ok {
			// A client backs off a little after an error.
			pause := time.NewTimer(time.Duration(20+w.rng.IntN(80)) * time.Millisecond)
			select {
			case <-stop:
				pause.Stop()
				return
			case <-pause.C:
			}
		}
	}
}

// next draws the next operation.
func (w *linWorker) next() linInput {
	in := linInput{Row: w.rng.IntN(*linRows)}
	switch p := w.rng.IntN(100); {
	case p < 25:
		in.Kind, in.Value = opSet, w.unique()
	case p < 55:
		in.Kind = opRead
	case p < 75:
		in.Kind, in.Value = opCAS, w.unique()
		in.Expect = w.seen[in.Row]
		if in.Expect == "" || w.rng.IntN(10) == 0 {
			// A value nobody writes: the predicate cannot match.
			in.Expect = fmt.Sprintf("never.%d", w.rng.IntN(1000))
		}
	case p < 88:
		in.Kind, in.Delta = opIncr, 1+w.rng.Int64N(1<<20)
	default:
		in.Kind, in.Value = opAppend, w.unique()+";"
	}
	return in
}

// do runs one operation and records it. It reports whether it succeeded.
func (w *linWorker) do(clock func() int64, in linInput) bool {
	timeout := minOpTimeout + time.Duration(w.rng.Int64N(int64(maxOpTimeout-minOpTimeout)))
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	call := clock()
	out, err := w.apply(ctx, in)
	ret := clock()
	if err != nil {
		if in.Kind == opRead {
			// A failed read tells nothing.
			w.failedReads++
			return false
		}
		// A failed write may or may not have happened; boundUnknown sets its
		// return time once the history is complete.
		out = linOutput{Unknown: true, Err: errSummary(err)}
		w.unknownWrites++
	} else {
		w.ok++
		if w.okTotal != nil {
			w.okTotal.Add(1)
		}
	}
	w.history = append(w.history, porcupine.Operation{ClientId: w.id, Input: in, Call: call, Output: out, Return: ret})
	return err == nil
}

// errSummary is an error's gRPC code or first words, for the visualization.
func errSummary(err error) string {
	s := err.Error()
	if i := strings.Index(s, "desc = "); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), " "))
}

// apply sends in to the server and decodes the answer.
func (w *linWorker) apply(ctx context.Context, in linInput) (linOutput, error) {
	key := rowKey(in.Row)
	var out linOutput
	switch in.Kind {
	case opSet:
		m := bigtable.NewMutation()
		m.Set(linFamily, colReg, bigtable.ServerTime, []byte(in.Value))
		if err := w.tbl.Apply(ctx, key, m); err != nil {
			return out, err
		}
		w.seen[in.Row] = in.Value
	case opRead:
		row, err := w.tbl.ReadRow(ctx, key, bigtable.RowFilter(bigtable.LatestNFilter(1)))
		if err != nil {
			return out, err
		}
		for _, item := range row[linFamily] {
			switch item.Column {
			case linFamily + ":" + colReg:
				out.Reg = string(item.Value)
			case linFamily + ":" + colCounter:
				out.N = w.counter(item.Value)
			case linFamily + ":" + colLog:
				out.Log = string(item.Value)
			default:
				w.t.Errorf("read of %s returned unexpected column %q", key, item.Column)
			}
		}
		w.seen[in.Row] = out.Reg
	case opCAS:
		pred := bigtable.ChainFilters(
			bigtable.FamilyFilter(linFamily),
			bigtable.ColumnFilter(colReg),
			bigtable.LatestNFilter(1),
			bigtable.ValueFilter(regexp.QuoteMeta(in.Expect)))
		set := bigtable.NewMutation()
		set.Set(linFamily, colReg, bigtable.ServerTime, []byte(in.Value))
		if err := w.tbl.Apply(ctx, key, bigtable.NewCondMutation(pred, set, nil), bigtable.GetCondMutationResult(&out.Matched)); err != nil {
			return out, err
		}
		if out.Matched {
			w.seen[in.Row] = in.Value
		}
	case opIncr, opAppend:
		rmw := bigtable.NewReadModifyWrite()
		col := colCounter
		if in.Kind == opIncr {
			rmw.Increment(linFamily, colCounter, in.Delta)
		} else {
			col = colLog
			rmw.AppendValue(linFamily, colLog, []byte(in.Value))
		}
		row, err := w.tbl.ApplyReadModifyWrite(ctx, key, rmw)
		if err != nil {
			return out, err
		}
		var found bool
		for _, item := range row[linFamily] {
			if item.Column != linFamily+":"+col {
				continue
			}
			found = true
			if in.Kind == opIncr {
				out.N = w.counter(item.Value)
			} else {
				out.Log = string(item.Value)
			}
		}
		if !found {
			w.t.Errorf("ReadModifyWriteRow on %s returned no %s:%s cell: %v", key, linFamily, col, row)
		}
	}
	return out, nil
}

// counter decodes an increment column: a 64-bit big-endian integer.
func (w *linWorker) counter(v []byte) int64 {
	if len(v) != 8 {
		w.t.Errorf("counter cell holds %d bytes, want 8: %x", len(v), v)
		return -1
	}
	return int64(binary.BigEndian.Uint64(v))
}

// finalRead reads row r until a read succeeds (for 10 s at most) and
// records the successful one.
func (w *linWorker) finalRead(clock func() int64, r int) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if w.do(clock, linInput{Kind: opRead, Row: r}) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// nemesis hurts the server: SIGKILL and restart, or SIGSTOP for a while and
// SIGCONT.
type nemesis struct {
	srv          *server
	rng          *rand.Rand
	clock        func() int64
	kills, stops int
	planned      time.Duration          // the plan's gaps and pauses: the load's length on an idle machine, kills aside
	killed       []int64                // when each kill was complete (the process reaped)
	events       []porcupine.Annotation // for the visualization
}

// fault is one planned action: wait gap, then kill (pause 0) or pause for
// pause. A fault with quiet set only waits.
type fault struct {
	gap, pause time.Duration
	quiet      bool
}

// plan draws the faults of one history, of the kinds -lin.faults allows. The
// short mode (duration 0) is two kills and one pause in random order, 0.5–0.8
// s apart, the pause 1–1.2 s. Otherwise faults come every 0.5–3 s until
// duration has passed, two in three a kill, the rest a pause of 1–3 s.
func (n *nemesis) plan(duration time.Duration, kill, stop bool) []fault {
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(n.rng.Int64N(int64(hi-lo))) }
	if duration == 0 {
		var f []fault
		if kill {
			f = append(f, fault{}, fault{})
		}
		if stop {
			f = append(f, fault{pause: between(time.Second, 1200*time.Millisecond)})
		}
		n.rng.Shuffle(len(f), func(i, j int) { f[i], f[j] = f[j], f[i] })
		for i := range f {
			f[i].gap = between(500*time.Millisecond, 800*time.Millisecond)
		}
		if len(f) == 0 {
			f = []fault{{gap: 3 * time.Second, quiet: true}}
		}
		return f
	}
	if !kill && !stop {
		return []fault{{gap: duration, quiet: true}}
	}
	var f []fault
	for total := time.Duration(0); ; {
		next := fault{gap: between(500*time.Millisecond, 3*time.Second)}
		if !kill || (stop && n.rng.IntN(3) == 2) {
			next.pause = between(time.Second, 3*time.Second)
		}
		total += next.gap + next.pause
		if total > duration {
			return f
		}
		f = append(f, next)
	}
}

// run carries out the plan. It returns early if the server exits by itself.
func (n *nemesis) run(duration time.Duration, kill, stop bool) error {
	for _, f := range n.plan(duration, kill, stop) {
		n.planned += f.gap + f.pause
		if !n.sleep(f.gap) || f.quiet {
			return nil
		}
		if f.pause == 0 {
			at := n.clock()
			if err := n.srv.kill(); err != nil {
				return err
			}
			n.killed = append(n.killed, n.clock())
			if err := n.srv.start(); err != nil {
				return err
			}
			n.kills++
			n.events = append(n.events, porcupine.Annotation{Tag: "nemesis", Start: at, End: n.clock(), Description: "kill -9, restart", BackgroundColor: "#f4b6b6"})
			continue
		}
		at := n.clock()
		if err := n.srv.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		n.sleep(f.pause)
		if err := n.srv.signal(syscall.SIGCONT); err != nil {
			return err
		}
		n.stops++
		n.events = append(n.events, porcupine.Annotation{Tag: "nemesis", Start: at, End: n.clock(), Description: fmt.Sprintf("SIGSTOP %v", f.pause.Round(time.Millisecond)), BackgroundColor: "#b6cdf4"})
	}
	return nil
}

// sleep waits d, or less if the server exits by itself; it reports whether
// the whole wait passed.
func (n *nemesis) sleep(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-n.srv.unexpected:
		return false
	}
}
