package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/changestream"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/console"
)

// TestConsoleChangesPages reads the console's change tail of a table
// spread over three nodes in batches smaller than what was written: each
// batch goes on after the last one's last record, and together they hold
// every write once, in commit order, whichever node reads.
func TestConsoleChangesPages(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	if err := sc.nodes["n1"].admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: []string{"g", "p"},
		ChangeStreamRetention: 24 * time.Hour, ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i, r := range letters() {
		via := []string{"n1", "n2", "n3"}[i%3]
		if err := writeScale(t, sc.nodes[via].client.Open("t"), r, "v"); err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
	}
	for _, id := range []string{"n1", "n3"} {
		s := sc.nodes[id].srv
		m, err := s.Engine().Table("projects/"+testProject+"/instances/"+testInstance, "t")
		if err != nil {
			t.Fatal(err)
		}
		now := clock.Micros(time.Now())
		q := console.TailQuery{From: now - time.Minute.Microseconds(), Until: now, Limit: 7}
		var got []string
		batches := 0
		for {
			b, err := s.consoleChanges(ctx, m, q)
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			batches++
			for _, line := range b.Records {
				var r changestream.JSON
				if err := json.Unmarshal(line, &r); err != nil {
					t.Fatal(err)
				}
				got = append(got, r.RowKey)
				if r.Token == "" {
					t.Fatalf("%s: a record without its token: %s", id, line)
				}
				if b.Last != r.Token && string(line) == string(b.Records[len(b.Records)-1]) {
					t.Fatalf("%s: Last %q, the last record's token %q", id, b.Last, r.Token)
				}
			}
			if !b.Full {
				break
			}
			if len(b.Records) != q.Limit {
				t.Fatalf("%s: a full batch of %d", id, len(b.Records))
			}
			q.After = b.Last
		}
		// The writes were made one after another, so commit order is
		// the order written.
		if g, w := strings.Join(got, ""), strings.Join(want, ""); g != w || batches != 4 {
			t.Errorf("%s read %q in %d batches, want %q in 4", id, g, batches, w)
		}
	}
}

// TestConsoleChangesWithTokens: with tokens on, the console's change tail
// on n2 reads the partitions other nodes own with the browser's token
// (each node checks it as for a forwarded call).
func TestConsoleChangesWithTokens(t *testing.T) {
	t.Parallel()
	c := newIAMClusterTuned(t, true, func(o *Options) { o.HTTPAddr = "127.0.0.1:0" }, "n1", "n2", "n3")
	nodes := c.nodes
	ctx := context.Background()
	admin := c.admin("n1", tokAdmin)
	client := c.data("n1", tokAdmin)
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: []string{"g", "p"},
		ChangeStreamRetention: 24 * time.Hour, ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"b", "k", "t"} {
		if err := writeScale(t, client, r, "v"); err != nil {
			t.Fatal(err)
		}
	}
	// The page's first poll reads one second of commit time from the
	// table's creation, and each reply says where the next one starts
	// (more, after or from, span) until a poll reaches now. Under load the
	// writes commit more than a second after the creation (the test once
	// read "" and once "b" in the first poll alone): follow the cursor as
	// the page does.
	base := "http://" + nodes["n2"].HTTPAddr() + "/t/" + testProject + "/" + testInstance + "/t/changes.json"
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	var rows []string
	cursor := url.Values{}
	for polls := 0; ; polls++ {
		if polls == 50 {
			t.Fatalf("the tail still has more after %d polls; read %q", polls, strings.Join(rows, ""))
		}
		req, err := http.NewRequest("GET", base+"?"+cursor.Encode(), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("me", tokReader)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var rep struct {
			Records []struct {
				RowKey string `json:"row_key"`
			} `json:"records"`
			After string `json:"after"`
			From  int64  `json:"from"`
			Span  int64  `json:"span"`
			More  bool   `json:"more"`
			Error string `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&rep)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s: %v", resp.Status, err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: error %q after rows %q", resp.Status, rep.Error, strings.Join(rows, ""))
		}
		for _, r := range rep.Records {
			rows = append(rows, r.RowKey)
		}
		if !rep.More {
			break
		}
		cursor = url.Values{}
		if rep.After != "" {
			cursor.Set("after", rep.After)
		} else {
			cursor.Set("from", strconv.FormatInt(rep.From, 10))
		}
		if rep.Span > 0 {
			cursor.Set("span", strconv.FormatInt(rep.Span, 10))
		}
	}
	if got := strings.Join(rows, ""); got != "bkt" {
		t.Errorf("rows %q, want \"bkt\"", got)
	}
}
