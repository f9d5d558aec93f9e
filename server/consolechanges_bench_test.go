package server

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
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
// three-node cluster (console/changes.go, consolechanges.go), as CPU of the
// whole process (the three nodes, etcd and the poller standing in for the
// browser) above the same cluster left idle:
//
//   - idle: no tail open, no writes, -console.tailsecs (the baseline,
//     idle-cpu-ms/s);
//
//   - polls: one tail on n2 polling back to back with nothing to deliver,
//     -console.tailsecs: poll-cpu-us per poll. The page polls once a
//     second when idle (console/static/console.js), so an open idle tail
//     costs tail-cpu-ms/s = poll-cpu-us × 1 poll/s;
//
//   - backlog: 10,000 rows written through n1 beforehand, then one tail
//     on n2 reads them all, 200 a poll as the page does:
//     per-change-cpu-us per record delivered.
//
//     flock /tmp/ebb-bench.lock go test -run '^$' -bench ConsoleTail -benchtime 1x ./server
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

	// poll asks changes.json from cursor as the page does; it returns the
	// records, the next cursor and whether to ask again at once.
	poll := func(ctx context.Context, cursor string) (int, string, bool, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", base+cursor, nil)
		if err != nil {
			return 0, "", false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", false, err
		}
		defer resp.Body.Close()
		var rep struct {
			Records []json.RawMessage `json:"records"`
			After   string            `json:"after"`
			From    int64             `json:"from"`
			Span    int64             `json:"span"`
			More    bool              `json:"more"`
			Error   string            `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil || rep.Error != "" {
			return 0, "", false, fmt.Errorf("poll: %v %s", err, rep.Error)
		}
		next := fmt.Sprintf("?from=%d", rep.From)
		if rep.After != "" {
			next = "?after=" + url.QueryEscape(rep.After)
		}
		if rep.Span != 0 {
			next += fmt.Sprintf("&span=%d", rep.Span)
		}
		return len(rep.Records), next, rep.More, nil
	}
	cpuAbove := func(idle float64, f func()) (time.Duration, time.Duration) {
		cpu0, t0 := processCPU(), time.Now()
		f()
		wall := time.Since(t0)
		return processCPU() - cpu0 - time.Duration(idle*float64(wall)/1000), wall
	}
	// Every node serves a tail once (connections, caches).
	if _, _, _, err := poll(ctx, ""); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	// idle
	cpu0, t0 := processCPU(), time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(secs):
	}
	idle := float64(processCPU()-cpu0) / float64(time.Since(t0)) * 1000 // ms per s
	// polls
	polls := 0
	pollCPU, pollWall := cpuAbove(idle, func() {
		cursor := ""
		for end := time.Now().Add(secs); time.Now().Before(end); polls++ {
			n, next, _, err := poll(ctx, cursor)
			if err != nil {
				b.Fatal(err)
			}
			if n != 0 {
				b.Fatalf("%d records from an idle table", n)
			}
			cursor = next
		}
	})
	// backlog
	b.StopTimer()
	const rows = 10000
	tbl := sc.nodes["n1"].client.Open("t")
	for start := 0; start < rows; start += 500 {
		var keys []string
		var muts []*bigtable.Mutation
		for i := start; i < start+500; i++ {
			m := bigtable.NewMutation()
			m.Set("f", "c", 1000, []byte("v"))
			keys, muts = append(keys, fmt.Sprintf("%c%06d", 'a'+i%26, i*26*1000000/rows/26)), append(muts, m)
		}
		if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
			b.Fatal(err, errs)
		}
	}
	b.StartTimer()
	got, backlogPolls := 0, 0
	backlogCPU, _ := cpuAbove(idle, func() {
		cursor, more := "", true
		for more {
			n, next, m, err := poll(ctx, cursor)
			if err != nil {
				b.Fatal(err)
			}
			got, cursor, more, backlogPolls = got+n, next, m, backlogPolls+1
		}
	})
	b.StopTimer()
	if got != rows {
		b.Fatalf("the tail delivered %d records of %d written", got, rows)
	}
	perPoll := float64(pollCPU.Microseconds()) / float64(polls)
	b.ReportMetric(idle, "idle-cpu-ms/s")
	b.ReportMetric(perPoll, "poll-cpu-us")
	b.ReportMetric(float64(pollWall.Microseconds())/1000/float64(polls), "poll-ms")
	b.ReportMetric(perPoll/1000, "tail-cpu-ms/s")
	b.ReportMetric(float64(backlogCPU.Microseconds())/float64(got), "per-change-cpu-us")
	b.ReportMetric(float64(backlogPolls), "backlog-polls")
}
