package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/changestream"
	tablets "github.com/ebbtable/ebbtable/cluster"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// csFollower reads every partition of a table's change stream as Beam's
// connector does: one reader per partition; on a CloseStream it keeps the
// continuation tokens by new partition and starts a new partition once
// tokens cover it (a merge waits for both parents); an UNAVAILABLE stream
// is opened again from its last token. It reads through the nodes in turn,
// so most streams are forwarded to the owner.
type csFollower struct {
	t       *testing.T
	ctx     context.Context
	clients []btpb.BigtableClient
	start   time.Time

	mu      sync.Mutex
	next    int                                        // the next client to use
	sets    map[string][]string                        // row → SetCell values, in stream order
	gc      map[string]int                             // row → GARBAGE_COLLECTION records
	pending map[string][]*btpb.StreamContinuationToken // new partition → tokens so far
	closes  int                                        // CloseStreams with new partitions
	// queued partitions start at the next flush: the test flushes after
	// each split, move or merge, so the partitions of every other
	// CloseStream start on a directory that changed again since their
	// tokens were made.
	queued []func()
	wg     sync.WaitGroup
}

func (f *csFollower) flush() {
	f.mu.Lock()
	q := f.queued
	f.queued = nil
	f.mu.Unlock()
	for _, start := range q {
		start()
	}
}

func rangeKey(p *btpb.StreamPartition) string {
	r := partitionRange(p)
	return fmt.Sprintf("[%q,%q)", r.Start, r.End)
}

func (f *csFollower) client() btpb.BigtableClient {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	return f.clients[f.next%len(f.clients)]
}

func (f *csFollower) startAll() {
	res, err := f.clients[0].GenerateInitialChangeStreamPartitions(f.ctx, &btpb.GenerateInitialChangeStreamPartitionsRequest{TableName: scaleTable})
	if err != nil {
		f.t.Fatal(err)
	}
	var parts []*btpb.StreamPartition
	for {
		r, err := res.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			f.t.Fatal(err)
		}
		parts = append(parts, r.Partition)
	}
	if len(parts) != 3 {
		f.t.Fatalf("initial partitions: %v, want the 3 tablets", parts)
	}
	for _, p := range parts {
		f.launch(p, nil)
	}
}

func (f *csFollower) launch(p *btpb.StreamPartition, toks []*btpb.StreamContinuationToken) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.read(p, toks)
	}()
}

// read follows one partition until it closes or the test ends.
func (f *csFollower) read(p *btpb.StreamPartition, toks []*btpb.StreamContinuationToken) {
	for attempt := 0; ; attempt++ {
		req := &btpb.ReadChangeStreamRequest{TableName: scaleTable, Partition: p, HeartbeatDuration: durationpb.New(50 * time.Millisecond)}
		if toks != nil {
			req.StartFrom = &btpb.ReadChangeStreamRequest_ContinuationTokens{ContinuationTokens: &btpb.StreamContinuationTokens{Tokens: toks}}
		} else {
			req.StartFrom = &btpb.ReadChangeStreamRequest_StartTime{StartTime: timestamppb.New(f.start)}
		}
		cs, err := f.client().ReadChangeStream(f.ctx, req)
		for err == nil {
			var resp *btpb.ReadChangeStreamResponse
			if resp, err = cs.Recv(); err != nil {
				break
			}
			switch r := resp.StreamRecord.(type) {
			case *btpb.ReadChangeStreamResponse_DataChange_:
				f.record(r.DataChange)
				toks = []*btpb.StreamContinuationToken{{Partition: p, Token: r.DataChange.Token}}
			case *btpb.ReadChangeStreamResponse_Heartbeat_:
				toks = []*btpb.StreamContinuationToken{r.Heartbeat.ContinuationToken}
			case *btpb.ReadChangeStreamResponse_CloseStream_:
				f.closed(p, r.CloseStream)
				return
			}
		}
		if f.ctx.Err() != nil {
			return
		}
		if status.Code(err) != codes.Unavailable || attempt > 200 {
			f.t.Errorf("partition %s: %v (end of stream without CloseStream: %v)", rangeKey(p), err, errors.Is(err, io.EOF))
			return
		}
	}
}

func (f *csFollower) record(dc *btpb.ReadChangeStreamResponse_DataChange) {
	f.mu.Lock()
	defer f.mu.Unlock()
	row := string(dc.RowKey)
	if dc.Type == btpb.ReadChangeStreamResponse_DataChange_GARBAGE_COLLECTION {
		f.gc[row]++
		return
	}
	// One entry per write: its value, and "/d" when it also deleted the
	// versions of its op's millisecond (the writer's deletes).
	entry, del := "", ""
	for _, ch := range dc.Chunks {
		if sc := ch.GetMutation().GetSetCell(); sc != nil && sc.FamilyName == "f" {
			entry = string(sc.Value)
		}
		if d := ch.GetMutation().GetDeleteFromColumn(); d != nil && d.FamilyName == "f" {
			del = "v" + strconv.FormatInt(d.GetTimeRange().GetStartTimestampMicros()/1000, 10)
		}
	}
	if del != "" {
		if del != entry {
			f.t.Errorf("row %s: a delete of %s with the write of %s", row, del, entry)
		}
		entry += "/d"
	}
	if entry != "" {
		f.sets[row] = append(f.sets[row], entry)
	}
}

// closed keeps a CloseStream's tokens and starts the partitions they cover.
func (f *csFollower) closed(p *btpb.StreamPartition, cl *btpb.ReadChangeStreamResponse_CloseStream) {
	if cl.GetStatus().GetCode() != int32(codes.OK) {
		f.t.Errorf("partition %s closed with %v", rangeKey(p), cl.GetStatus())
	}
	if len(cl.NewPartitions) != len(cl.ContinuationTokens) || len(cl.NewPartitions) == 0 {
		f.t.Errorf("partition %s: CloseStream with %d new partitions, %d tokens", rangeKey(p), len(cl.NewPartitions), len(cl.ContinuationTokens))
		return
	}
	f.mu.Lock()
	f.closes++
	var ready []*btpb.StreamPartition
	var readyToks [][]*btpb.StreamContinuationToken
	for i, np := range cl.NewPartitions {
		k := rangeKey(np)
		f.pending[k] = append(f.pending[k], cl.ContinuationTokens[i])
		if covers(np, f.pending[k]) {
			ready, readyToks = append(ready, np), append(readyToks, f.pending[k])
			delete(f.pending, k)
		}
	}
	late := f.closes%2 == 0 // every other close's partitions start late
	for i := range ready {
		p, toks := ready[i], readyToks[i]
		if late {
			f.queued = append(f.queued, func() { f.launch(p, toks) })
		} else {
			defer f.launch(p, toks)
		}
	}
	f.mu.Unlock()
}

// covers says whether the tokens' partitions cover p.
func covers(p *btpb.StreamPartition, toks []*btpb.StreamContinuationToken) bool {
	var rs []tablets.Range
	for _, t := range toks {
		rs = append(rs, partitionRange(t.Partition))
	}
	sort.Slice(rs, func(i, j int) bool { return bytes.Compare(rs[i].Start, rs[j].Start) < 0 })
	want := partitionRange(p)
	at := want.Start
	for _, r := range rs {
		if !bytes.Equal(r.Start, at) {
			return false
		}
		if len(r.End) == 0 {
			return len(want.End) == 0
		}
		at = r.End
	}
	return bytes.Equal(at, want.End)
}

// TestClusterChangeStreamAcrossMoves: a reader follows every partition of a
// three-node table's change stream while a writer writes (sets, and
// deletes with them) through n1 and the tablets split, move and merge; it
// must see each write once, in per-row order, and the collector's
// deletion in a moved tablet once.
func TestClusterChangeStreamAcrossMoves(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := sc.nodes["n1"].admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: []string{"g", "p"},
		ColumnFamilies:        map[string]bigtable.Family{"f": {}, "g": {GCPolicy: bigtable.MaxVersionsPolicy(1)}},
		ChangeStreamRetention: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f := &csFollower{t: t, ctx: ctx, start: time.Now(), sets: map[string][]string{}, gc: map[string]int{},
		pending: map[string][]*btpb.StreamContinuationToken{}}
	for _, id := range []string{"n1", "n2", "n3"} {
		f.clients = append(f.clients, btpb.NewBigtableClient(sc.nodes[id].conn))
	}
	f.startAll()

	// The writer: rows a00..z03, each written again and again with
	// increasing values, through n1.
	var mu sync.Mutex
	acked := map[string][]string{} // row → acknowledged values, in order
	tried := map[string]bool{}     // every value written, acknowledged or not
	nacked := 0
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tbl := sc.nodes["n1"].client.Open("t")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			row := fmt.Sprintf("%c%02d", 'a'+i%26, (i/26)%4)
			v := "v" + strconv.Itoa(i)
			m := bigtable.NewMutation()
			entry := v
			if i%5 == 4 {
				// A delete too, told apart by its range.
				m.DeleteTimestampRange("f", "c", bigtable.Timestamp(i*1000), bigtable.Timestamp(i*1000+1000))
				entry += "/d"
			}
			m.Set("f", "c", bigtable.ServerTime, []byte(v)) // not idempotent: the client never retries it
			err := tbl.Apply(ctx, row, m)
			mu.Lock()
			tried[entry] = true
			if err == nil {
				acked[row] = append(acked[row], entry)
				nacked++
			}
			mu.Unlock()
		}
	}()
	// Each step waits for this many more acknowledged writes (the writer
	// keeps writing through every split, move and merge as well), while
	// they keep coming: it fails when none is acknowledged for 30 s (the
	// writer stalled), not on the pace. A starved machine (load ~28, race)
	// acknowledged under 2 writes a second, so a fixed 20 s for 40 writes
	// failed on main's code as on this one (as TestScaleOutSplitMoveDrain's
	// did, scaleout_test.go).
	const perStep = 40
	waitAcked := func(steps int) {
		waitAckedWhileComing(t, steps*perStep, func() int {
			mu.Lock()
			defer mu.Unlock()
			return nacked
		})
	}
	ops := sc.nodes["n2"].ops
	tabletAt := func(key string) *clusterpb.Tablet {
		t.Helper()
		res, err := ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range res.Tablets {
			if string(tb.Start) <= key && (len(tb.End) == 0 || key < string(tb.End)) {
				return tb
			}
		}
		t.Fatalf("no tablet holds %q", key)
		return nil
	}
	other := func(tb *clusterpb.Tablet) string {
		for _, id := range []string{"n1", "n2", "n3"} {
			if id != tb.Owner {
				return id
			}
		}
		return ""
	}
	move := func(key, to string) {
		t.Helper()
		tb := tabletAt(key)
		if to == "" {
			to = other(tb)
		}
		// A node whose 2 s lease lapsed (a starved machine: renewals
		// time out at load ~35) is refused as a target, or refuses to
		// move as the source, until it registers again.
		testkit.Eventually(t, "the move to "+to, 30*time.Second, func() (bool, string) {
			_, err := ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tb.Id, To: to})
			lapsed := (status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "is not live")) ||
				(status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "does not hold its lease"))
			if err != nil && !lapsed {
				t.Fatalf("move %s to %s: %v", tb, to, err)
			}
			return err == nil, fmt.Sprint(err)
		})
		f.flush()
	}
	split := func(key string) {
		t.Helper()
		if _, err := ops.SplitTablet(ctx, &clusterpb.SplitTabletRequest{Table: scaleTable, Key: []byte(key)}); err != nil {
			t.Fatalf("split at %s: %v", key, err)
		}
		f.flush()
	}
	waitAcked(1)
	// Cells the collector will delete in a tablet that moves first.
	gcTbl := sc.nodes["n3"].client.Open("t")
	for _, ts := range []bigtable.Timestamp{1000, 2000} {
		m := bigtable.NewMutation()
		m.Set("g", "c", ts, []byte("x"))
		if err := gcTbl.Apply(ctx, "b-gc", m); err != nil {
			t.Fatal(err)
		}
	}
	split("d") // 1: [,d) [d,g)
	waitAcked(2)
	move("a", "") // 2: [,d), holding b-gc, to another node
	waitAcked(3)
	move("e", tabletAt("a").Owner) // 3: [d,g) to [,d)'s owner
	waitAcked(4)
	split("t") // 4
	waitAcked(5)
	move("q", "") // 5
	waitAcked(6)
	if _, err := ops.MergeTablet(ctx, &clusterpb.MergeTabletRequest{Table: scaleTable, Tablet: tabletAt("a").Id}); err != nil {
		t.Fatal(err) // 6: [,d) + [d,g)
	}
	f.flush()
	waitAcked(7)
	move("a", "") // 7: the merged tablet
	waitAcked(8)
	move("u", "") // 8
	waitAcked(9)
	gcRun(t, sc.nodes[tabletAt("b").Owner]) // the moved tablet's new owner collects b-gc's old version
	close(stop)
	<-done

	testkit.Eventually(t, "the follower to see every acknowledged write and the collection", 30*time.Second, func() (bool, string) {
		f.flush()
		mu.Lock()
		defer mu.Unlock()
		f.mu.Lock()
		defer f.mu.Unlock()
		missing := 0
		for row, want := range acked {
			seen := map[string]bool{}
			for _, v := range f.sets[row] {
				seen[v] = true
			}
			for _, v := range want {
				if !seen[v] {
					missing++
				}
			}
		}
		return missing == 0 && f.gc["b-gc"] >= 1, fmt.Sprintf("%d of %d acknowledged writes not seen, %d collections", missing, nacked, f.gc["b-gc"])
	})
	cancel()
	f.wg.Wait()

	f.mu.Lock()
	defer f.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if f.closes < 5 {
		// Fewer than the 8 changes: a partition started late may find
		// its tablet moved already, and just read on from its tokens.
		t.Errorf("%d CloseStreams with new partitions, want 5 at least", f.closes)
	}
	if f.gc["b-gc"] != 1 {
		t.Errorf("b-gc: %d collector records, want 1", f.gc["b-gc"])
	}
	for row, want := range acked {
		got := f.sets[row]
		seen := map[string]bool{}
		last := -1
		for _, v := range got {
			if seen[v] {
				t.Errorf("row %s: %s seen twice", row, v)
			}
			seen[v] = true
			if !tried[v] {
				t.Errorf("row %s: %s was never written", row, v)
			}
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(v, "v"), "/d"))
			if n <= last {
				t.Errorf("row %s: %s after v%d: out of order", row, v, last)
			}
			last = n
		}
		for _, v := range want {
			if !seen[v] {
				t.Errorf("row %s: acknowledged %s never seen", row, v)
				break
			}
		}
	}
	t.Logf("%d writes acknowledged, %d CloseStreams followed", nacked, f.closes)
}

// TestChangeTokenPieces: a merged partition's state, its token and back.
func TestChangeTokenPieces(t *testing.T) {
	p1 := changestream.Position{Commit: 10, Tiebreaker: 3, Index: 1}
	p2 := changestream.Position{Commit: 20, Tiebreaker: 4}
	st := csState{{r: tablets.Range{Start: []byte{}, End: []byte("m")}, pos: p1}, {r: tablets.Range{Start: []byte("m")}, pos: p2}}
	whole := tablets.Range{Start: []byte{}}
	tok := st.token()
	if !strings.HasPrefix(tok, "v2.") {
		t.Fatalf("token of two positions: %s", tok)
	}
	back, err := parseTokenPieces(tok, whole)
	if err != nil || len(back) != 2 || back[0].pos != p1 || back[1].pos != p2 || string(back[1].r.Start) != "m" {
		t.Fatalf("parsed %+v %v", back, err)
	}
	if !st.wants([]byte("a"), changestream.Position{Commit: 15}) || st.wants([]byte("x"), changestream.Position{Commit: 15}) {
		t.Error("a record between the pieces' positions goes to the piece behind only")
	}
	st.advance(changestream.Position{Commit: 30})
	if tok := st.token(); tok != (changestream.Position{Commit: 30}).Token() {
		t.Errorf("token once past both: %s", tok)
	}
	if _, err := combine(csState{{r: tablets.Range{Start: []byte{}, End: []byte("m")}}}, whole); err == nil {
		t.Error("tokens leaving rows uncovered accepted")
	}
}

// csRead reads one ReadChangeStream until stop says so or the stream
// closes; it returns the SetCell values of family f in order, the last
// token and the CloseStream, if any.
func csRead(t *testing.T, c btpb.BigtableClient, req *btpb.ReadChangeStreamRequest, stop func(vals []string) bool) ([]string, *btpb.StreamContinuationToken, *btpb.ReadChangeStreamResponse_CloseStream) {
	t.Helper()
	cvs, tok, cl := csReadCommits(t, c, req, func(cvs []csValue) bool { return stop(csValues(cvs)) })
	return csValues(cvs), tok, cl
}

// csValue is a SetCell value a stream sent and its record's commit
// timestamp and tiebreaker.
type csValue struct {
	v   string
	at  time.Time
	tie int32
}

func csValues(cvs []csValue) []string {
	var out []string
	for _, cv := range cvs {
		out = append(out, cv.v)
	}
	return out
}

// csReadCommits is csRead with each value's commit.
func csReadCommits(t *testing.T, c btpb.BigtableClient, req *btpb.ReadChangeStreamRequest, stop func([]csValue) bool) ([]csValue, *btpb.StreamContinuationToken, *btpb.ReadChangeStreamResponse_CloseStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req.TableName = scaleTable
	req.HeartbeatDuration = durationpb.New(20 * time.Millisecond)
	cs, err := c.ReadChangeStream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var vals []csValue
	var tok *btpb.StreamContinuationToken
	for !stop(vals) {
		resp, err := cs.Recv()
		if err != nil {
			t.Fatalf("after %v: %v", csValues(vals), err)
		}
		switch r := resp.StreamRecord.(type) {
		case *btpb.ReadChangeStreamResponse_DataChange_:
			for _, ch := range r.DataChange.Chunks {
				if sc := ch.GetMutation().GetSetCell(); sc != nil {
					vals = append(vals, csValue{v: string(sc.Value), at: r.DataChange.GetCommitTimestamp().AsTime(), tie: r.DataChange.GetTiebreaker()})
				}
			}
			tok = &btpb.StreamContinuationToken{Partition: req.Partition, Token: r.DataChange.Token}
		case *btpb.ReadChangeStreamResponse_Heartbeat_:
			tok = r.Heartbeat.ContinuationToken
		case *btpb.ReadChangeStreamResponse_CloseStream_:
			return vals, tok, r.CloseStream
		}
	}
	return vals, tok, nil
}

func fromTokens(toks ...*btpb.StreamContinuationToken) *btpb.ReadChangeStreamRequest_ContinuationTokens {
	return &btpb.ReadChangeStreamRequest_ContinuationTokens{ContinuationTokens: &btpb.StreamContinuationTokens{Tokens: toks}}
}

func partitionOf(start, end string) *btpb.StreamPartition {
	return streamPartition(tablets.Range{Start: []byte(start), End: []byte(end)})
}

// TestClusterChangeStreamResume: a token taken on a tablet's owner resumes
// on the node it moved to with nothing lost (the records written on the
// old owner after the token travelled with the tablet) or repeated; a
// partition split since answers CloseStream at once with its halves; two
// partitions merged since read on from their own positions.
func TestClusterChangeStreamResume(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2")
	ctx := context.Background()
	err := sc.nodes["n1"].admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: []string{"m"},
		ColumnFamilies: map[string]bigtable.Family{"f": {}}, ChangeStreamRetention: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ops := sc.nodes["n1"].ops
	tabs, err := ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil || len(tabs.Tablets) != 2 {
		t.Fatalf("tablets %v %v", tabs, err)
	}
	first := tabs.Tablets[0]
	owner, to := first.Owner, "n1"
	if owner == "n1" {
		to = "n2"
	}
	write := func(row, v string) {
		t.Helper()
		if err := writeScale(t, sc.nodes["n1"].client.Open("t"), row, v); err != nil {
			t.Fatal(err)
		}
	}
	write("a1", "v1")
	left := partitionOf("", "m")
	c := btpb.NewBigtableClient(sc.nodes[owner].conn)
	vals, tok, _ := csRead(t, c, &btpb.ReadChangeStreamRequest{Partition: left,
		StartFrom: &btpb.ReadChangeStreamRequest_StartTime{StartTime: timestamppb.New(start)}},
		func(v []string) bool { return len(v) == 1 })
	if vals[0] != "v1" {
		t.Fatalf("first read: %v", vals)
	}
	write("a2", "v2")
	// v3 is written after the move shipped the records it could, before
	// it fences the tablet: the tail shipped under the gate carries it.
	hook := func() { write("a3", "v3") }
	sc.nodes[owner].srv.cluster.changes.afterAhead.Store(&hook)
	if _, err := ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: first.Id, To: to}); err != nil {
		t.Fatal(err)
	}
	write("a4", "v4")
	// Resumed through the node the tablet left: forwarded to its owner.
	vals, tok2, _ := csRead(t, c, &btpb.ReadChangeStreamRequest{Partition: left, StartFrom: fromTokens(tok)},
		func(v []string) bool { return len(v) >= 3 })
	if strings.Join(vals, ",") != "v2,v3,v4" {
		t.Fatalf("resumed after the move: %v, want v2,v3,v4", vals)
	}
	// Split since: closed at once, with both halves.
	if _, err := ops.SplitTablet(ctx, &clusterpb.SplitTabletRequest{Table: scaleTable, Key: []byte("f")}); err != nil {
		t.Fatal(err)
	}
	write("g1", "v5")
	vals, _, cl := csRead(t, c, &btpb.ReadChangeStreamRequest{Partition: left, StartFrom: fromTokens(tok2)}, func([]string) bool { return false })
	if len(vals) != 0 || cl == nil || len(cl.NewPartitions) != 2 || rangeKey(cl.NewPartitions[1]) != rangeKey(partitionOf("f", "m")) ||
		rangeKey(cl.ContinuationTokens[1].Partition) != rangeKey(partitionOf("f", "m")) {
		t.Fatalf("stale partition: %v %+v", vals, cl)
	}
	// Read the left half on to a later position than the right half, then
	// merge: the merged partition reads on from each half's own position.
	write("a5", "v6")
	lvals, ltok, _ := csRead(t, c, &btpb.ReadChangeStreamRequest{Partition: cl.NewPartitions[0], StartFrom: fromTokens(cl.ContinuationTokens[0])},
		func(v []string) bool { return len(v) >= 1 })
	rtok := cl.ContinuationTokens[1] // g1 (v5) not read yet
	if strings.Join(lvals, ",") != "v6" {
		t.Fatalf("left half: %v", lvals)
	}
	cur, _ := ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if _, err := ops.MergeTablet(ctx, &clusterpb.MergeTabletRequest{Table: scaleTable, Tablet: cur.Tablets[0].Id}); err != nil {
		t.Fatal(err)
	}
	write("b1", "v7")
	vals, _, _ = csRead(t, c, &btpb.ReadChangeStreamRequest{Partition: left, StartFrom: fromTokens(ltok, rtok)},
		func(v []string) bool { return len(v) >= 2 })
	if strings.Join(vals, ",") != "v5,v7" {
		t.Fatalf("merged partition from the halves' tokens: %v, want v5,v7", vals)
	}
	// While the tablet moves back, a reader on its owner goes no further
	// than the move's mark, and then closes there.
	moveCapped(t, sc, to, owner)

	// A move's mark caps the readers of its rows until it is settled.
	cm := sc.nodes["n1"].srv.cluster
	from := closedPosition(time.Now().UnixMicro() - 1000)
	mk := cm.beginMove(scaleTable, tablets.Tablet{Start: []byte("a"), End: []byte("c")})
	if _, at, capped := cm.closedAndCap(scaleTable, tablets.Range{Start: []byte("b"), End: []byte("d")}, from); !capped || at != mk.at {
		t.Errorf("a reader of the moving rows: capped %v at %d, want the mark %d", capped, at, mk.at)
	}
	if _, _, capped := cm.closedAndCap(scaleTable, tablets.Range{Start: []byte("c")}, from); capped {
		t.Error("a reader of other rows is capped")
	}
	if _, at, capped := cm.closedAndCap(scaleTable, tablets.Range{Start: []byte("a")}, closedPosition(mk.at)); !capped || at != mk.at {
		t.Error("a reader at the mark is not held there")
	}
	if _, _, capped := cm.closedAndCap(scaleTable, tablets.Range{Start: []byte("a")}, closedPosition(mk.at+1)); capped {
		t.Error("a reader past the mark is capped")
	}
	cm.endMove(scaleTable, mk, false)
	if _, _, capped := cm.closedAndCap(scaleTable, tablets.Range{Start: []byte("a")}, from); capped {
		t.Error("a failed move's mark still caps readers")
	}
}

// moveCapped moves the tablet at "" from node from to node to while a
// reader follows it on from: the reader's positions stay at or below the
// move's mark while the move is under way, and its CloseStream carries the
// mark.
func moveCapped(t *testing.T, sc *scaleCluster, from, to string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	entered, release := make(chan struct{}), make(chan struct{})
	fault := func() error {
		close(entered)
		<-release
		return nil
	}
	sc.nodes[to].srv.cluster.ingestFault.Store(&fault)
	defer sc.nodes[to].srv.cluster.ingestFault.Store(nil)
	cs, err := btpb.NewBigtableClient(sc.nodes[from].conn).ReadChangeStream(ctx, &btpb.ReadChangeStreamRequest{TableName: scaleTable,
		Partition: partitionOf("", "m"), HeartbeatDuration: durationpb.New(10 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Recv(); err != nil { // the stream is being served
		t.Fatal(err)
	}
	tabs, err := sc.nodes[from].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	moved := make(chan error, 1)
	go func() {
		_, err := sc.nodes[from].ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: tabs.Tablets[0].Id, To: to})
		moved <- err
	}()
	<-entered
	cm := &sc.nodes[from].srv.cluster.changes
	cm.mu.Lock()
	marks := cm.marks[scaleTable]
	at := marks[len(marks)-1].at
	cm.mu.Unlock()
	for beats := 0; beats < 5; {
		resp, err := cs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		hb := resp.GetHeartbeat()
		if hb == nil {
			continue
		}
		beats++
		if p, err := changestream.ParseToken(hb.ContinuationToken.Token); err != nil || p.Commit > at {
			t.Fatalf("heartbeat during the move at %s (%v), past the mark %d", hb.ContinuationToken.Token, err, at)
		}
	}
	close(release)
	if err := <-moved; err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := cs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if cl := resp.GetCloseStream(); cl != nil {
			if len(cl.ContinuationTokens) != 1 || cl.ContinuationTokens[0].Token != closedPosition(at).Token() {
				t.Fatalf("CloseStream after the move: %+v, want the mark %s", cl, closedPosition(at).Token())
			}
			return
		}
	}
}
