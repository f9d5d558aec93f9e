package server

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// consoleTailSecs and consoleTailTablets tune BenchmarkConsoleTail.
var (
	consoleTailSecs    = flag.Int("console.tailsecs", 10, "BenchmarkConsoleTail: seconds each phase runs")
	consoleTailTablets = flag.Int("console.tailtablets", 3, "BenchmarkConsoleTail: tablets of the table (on three nodes, round robin)")
)

// BenchmarkConsoleTail measures what the web console's change tail costs a
// three-node cluster (console/changes.go, consolechanges.go): the CPU of
// the whole process (the three nodes, etcd, and the poller standing in for
// the browser) per second, in four phases of -console.tailsecs each:
//
//   - idle: no tail open, no writes (the baseline);
//   - tail: one tail open on n2, no writes: tail-cpu-ms/s is its cost
//     above idle;
//   - writes: 50 rows a second written through n1, no tail;
//   - writes+tail: the same with the tail open: per-change-cpu-us is the
//     CPU above "writes" per record the tail delivered.
//
// The poller does what the page's script does: it asks changes.json from
// its cursor, and asks again at once when the answer says more, else one
// second later (console/static/console.js).
//
//	flock /tmp/ebb-bench.lock go test -run '^$' -bench ConsoleTail -benchtime 1x ./server
func BenchmarkConsoleTail(b *testing.B) {
	secs := time.Duration(*consoleTailSecs) * time.Second
	sc := startScaleClusterTuned(b, 0, func(o *Options) { o.HTTPAddr = "127.0.0.1:0" }, "n1", "n2", "n3")
	ctx := context.Background()
	var splits []string
	for i := 1; i < *consoleTailTablets; i++ {
		at := i * 26 * 1000000 / *consoleTailTablets // over the rows' keys: a letter, six digits
		splits = append(splits, fmt.Sprintf("%c%06d", 'a'+at/1000000, at%1000000))
	}
	if err := sc.nodes["n1"].admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: splits,
		ChangeStreamRetention: 24 * time.Hour, ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
		b.Fatal(err)
	}
	base := "http://" + sc.nodes["n2"].srv.HTTPAddr() + "/t/" + testProject + "/" + testInstance + "/t/changes.json"
	hc := &http.Client{Timeout: time.Minute}
	defer hc.CloseIdleConnections()

	// tail runs the page's poll loop until ctx ends.
	var polls, records, pollNanos atomic.Int64
	tail := func(ctx context.Context) {
		cursor := ""
		for ctx.Err() == nil {
			start := time.Now()
			req, err := http.NewRequestWithContext(ctx, "GET", base+cursor, nil)
			if err != nil {
				b.Error(err)
				return
			}
			resp, err := hc.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					b.Error(err)
				}
				return
			}
			var rep struct {
				Records []json.RawMessage `json:"records"`
				After   string            `json:"after"`
				From    int64             `json:"from"`
				More    bool              `json:"more"`
				Error   string            `json:"error"`
			}
			err = json.NewDecoder(resp.Body).Decode(&rep)
			resp.Body.Close()
			if err != nil || rep.Error != "" {
				if ctx.Err() == nil {
					b.Errorf("poll: %v %s", err, rep.Error)
				}
				return
			}
			polls.Add(1)
			pollNanos.Add(int64(time.Since(start)))
			records.Add(int64(len(rep.Records)))
			if rep.After != "" {
				cursor = "?after=" + url.QueryEscape(rep.After)
			} else {
				cursor = fmt.Sprintf("?from=%d", rep.From)
			}
			if rep.More {
				continue
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	// writes writes 50 rows a second through n1 until ctx ends.
	var written atomic.Int64
	writes := func(ctx context.Context) {
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		tbl := sc.nodes["n1"].client.Open("t")
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			if err := writeScale(b, tbl, fmt.Sprintf("%c%06d", 'a'+i%26, i), "v"); err != nil && ctx.Err() == nil {
				b.Error(err)
				return
			}
			written.Add(1)
		}
	}
	// phase runs fns for secs and returns the process CPU per second.
	phase := func(fns ...func(context.Context)) float64 {
		ctx, cancel := context.WithTimeout(ctx, secs)
		defer cancel()
		done := make(chan struct{}, len(fns))
		cpu0, t0 := processCPU(), time.Now()
		for _, f := range fns {
			go func() { f(ctx); done <- struct{}{} }()
		}
		<-ctx.Done()
		for range fns {
			<-done
		}
		return float64(processCPU()-cpu0) / float64(time.Since(t0)) * 1000 // ms per s
	}
	// A first tail, so every node has served one (connections, caches).
	warm, cancel := context.WithTimeout(ctx, 2*time.Second)
	tail(warm)
	cancel()
	b.ResetTimer()
	idle := phase()
	polls.Store(0)
	pollNanos.Store(0)
	tailed := phase(tail)
	idlePolls, idlePollMs := polls.Load(), float64(pollNanos.Load())/1e6/float64(max(polls.Load(), 1))
	wrote := phase(writes)
	records.Store(0)
	written.Store(0)
	both := phase(writes, tail)
	b.StopTimer()
	got := records.Load()
	if got == 0 || got < written.Load()/2 {
		b.Fatalf("the tail delivered %d records of %d written", got, written.Load())
	}
	b.ReportMetric(idle, "idle-cpu-ms/s")
	b.ReportMetric(tailed-idle, "tail-cpu-ms/s")
	b.ReportMetric(float64(idlePolls)/secs.Seconds(), "polls/s")
	b.ReportMetric(idlePollMs, "poll-ms")
	b.ReportMetric(wrote, "writes-cpu-ms/s")
	b.ReportMetric(both-wrote, "writes+tail-extra-cpu-ms/s")
	b.ReportMetric((both-wrote)*secs.Seconds()*1000/float64(got), "per-change-cpu-us")
}
