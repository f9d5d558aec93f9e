package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/changestream"
)

// TestConsoleTailBacklog opens the console's change tail on a table of 30
// tablets over three nodes with a backlog of 3,000 records, polling as the
// page does (its cursor, span included): every record arrives once, in
// commit order, and the partitions' streams hand the merges at most four
// times the records delivered (1.9–2.4 times when measured; polls reading
// up to now had every partition stream its records ahead, and each full
// batch left them to be read again: 7.3 times).
func TestConsoleTailBacklog(t *testing.T) {
	t.Parallel()
	sc := startScaleClusterTuned(t, 0, func(o *Options) { o.HTTPAddr = "127.0.0.1:0" }, "n1", "n2", "n3")
	ctx := context.Background()
	const tablets, rows = 30, 3000
	var splits []string
	for i := 1; i < tablets; i++ {
		splits = append(splits, fmt.Sprintf("r%04d", i*rows/tablets))
	}
	if err := sc.nodes["n1"].admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: splits,
		ChangeStreamRetention: 24 * time.Hour, ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
		t.Fatal(err)
	}
	tbl := sc.nodes["n1"].client.Open("t")
	for start := 0; start < rows; start += 500 {
		var keys []string
		var muts []*bigtable.Mutation
		for i := start; i < start+500; i++ {
			m := bigtable.NewMutation()
			m.Set("f", "c", 1000, []byte("v"))
			keys, muts = append(keys, fmt.Sprintf("r%04d", i)), append(muts, m)
		}
		if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
			t.Fatal(err, errs)
		}
	}
	base := "http://" + sc.nodes["n2"].srv.HTTPAddr() + "/t/" + testProject + "/" + testInstance + "/t/changes.json"
	hc := &http.Client{Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	lines := &sc.nodes["n2"].srv.consoleTailLines
	lines0 := lines.Load()
	seen := map[string]int{}
	var last changestream.Position
	cursor, polls := "", 0
	for more := true; more; polls++ {
		if polls > 2000 {
			t.Fatalf("%d polls", polls)
		}
		resp, err := hc.Get(base + cursor)
		if err != nil {
			t.Fatal(err)
		}
		var rep struct {
			Records []changestream.JSON `json:"records"`
			After   string              `json:"after"`
			From    int64               `json:"from"`
			Span    int64               `json:"span"`
			More    bool                `json:"more"`
			Error   string              `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&rep)
		resp.Body.Close()
		if err != nil || rep.Error != "" {
			t.Fatalf("poll %d: %v %s", polls, err, rep.Error)
		}
		for _, r := range rep.Records {
			pos, err := changestream.ParseToken(r.Token)
			if err != nil {
				t.Fatal(err)
			}
			if !last.Less(pos) {
				t.Fatalf("poll %d: %s at %v after %v", polls, r.RowKey, pos, last)
			}
			last = pos
			seen[r.RowKey]++
		}
		cursor = fmt.Sprintf("?from=%d", rep.From)
		if rep.After != "" {
			cursor = "?after=" + url.QueryEscape(rep.After)
		}
		if rep.Span != 0 {
			cursor += fmt.Sprintf("&span=%d", rep.Span)
		}
		more = rep.More
	}
	delivered := 0
	for i := 0; i < rows; i++ {
		k := fmt.Sprintf("r%04d", i)
		if seen[k] != 1 {
			t.Fatalf("%s delivered %d times", k, seen[k])
		}
		delivered++
	}
	read := lines.Load() - lines0
	t.Logf("%d records delivered in %d polls; the partitions' streams handed %d to the merges", delivered, polls, read)
	if read > 4*int64(delivered) {
		t.Errorf("the partitions' streams handed %d records to the merges for %d delivered; want at most four times as many", read, delivered)
	}
}
