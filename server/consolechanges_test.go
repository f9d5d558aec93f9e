package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
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
			for _, r := range b.Records {
				got = append(got, r.RowKey)
			}
			if !b.Full {
				break
			}
			if len(b.Records) != q.Limit {
				t.Fatalf("%s: a full batch of %d", id, len(b.Records))
			}
			q.After = b.Records[len(b.Records)-1].Token
		}
		// The writes were made one after another, so commit order is
		// the order written.
		if g, w := strings.Join(got, ""), strings.Join(want, ""); g != w || batches != 4 {
			t.Errorf("%s read %q in %d batches, want %q in 4", id, g, batches, w)
		}
	}
}
