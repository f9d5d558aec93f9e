package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/storage"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestFailoverChangesIncremental: a full checkpoint round writes only the
// change records committed since the span's previous round, not its whole
// retained history again; a take-over after several such rounds still
// rebuilds every record, in order, once. The bytes each round wrote are
// logged (docs/scale-out.md quotes them).
func TestFailoverChangesIncremental(t *testing.T) {
	t.Parallel()
	sc, victim, start := csHistoryCluster(t)
	reader := "n1"
	if victim == reader {
		reader = "n2"
	}
	ctx := context.Background()
	tbl := sc.nodes[reader].client.Open("t")
	var want []string
	write := func(from, n int) {
		t.Helper()
		var rows []string
		var muts []*bigtable.Mutation
		for i := from; i < from+n; i++ {
			v := fmt.Sprintf("v%04d-%s", i, strings.Repeat("x", 100))
			m := bigtable.NewMutation()
			m.Set("f", "c", bigtable.Timestamp(1000), []byte(v))
			rows, muts = append(rows, fmt.Sprintf("q%04d", i)), append(muts, m)
			want = append(want, v)
		}
		for i := 0; i < len(rows); i += 200 {
			j := min(i+200, len(rows))
			errs, err := tbl.ApplyBulk(ctx, rows[i:j], muts[i:j])
			if err != nil || errs != nil {
				t.Fatalf("write: %v %v", err, errs)
			}
		}
	}
	f := sc.nodes[victim].srv.cluster.fail
	round := func() uint64 {
		before := f.changesBytes.Load()
		fullRound(t, sc.nodes[victim])
		return f.changesBytes.Load() - before
	}
	write(0, 2000)
	first := round()
	var later []uint64
	for r := range 3 {
		write(2000+r*10, 10)
		later = append(later, round())
	}
	idle := round() // nothing new
	t.Logf("change-record bytes written by full rounds of a span holding 2000 records: first %d, then with 10 new records each %v, with none %d",
		first, later, idle)
	for _, b := range later {
		if b == 0 || b*20 > first {
			t.Errorf("a full round after 10 new records wrote %d bytes of change records, the first (2000 records) %d: the history is written again", b, first)
		}
	}
	if idle != 0 {
		t.Errorf("a full round with no new record wrote %d bytes of change records", idle)
	}
	cat, _, err := storage.ReadCatalog(sc.nodes[victim].srv.cluster.store, victim)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range cat.Entries {
		if e.Changes != "" && len(e.ChangesPrev) != 3 {
			t.Errorf("checkpoint of [%s, %s): %d earlier objects of records, want 3", e.StartRow, e.EndRow, len(e.ChangesPrev))
		}
	}
	// Records in the log only, then the victim dies: the take-over has
	// every record from the objects and the log, each once, in order.
	write(2030, 5)
	sc.nodes[victim].crash()
	testkit.Eventually(t, victim+"'s tablet to be taken over", 30*time.Second, func() (bool, string) {
		got := owners(t, sc.nodes[reader])
		return !strings.Contains(got, victim), got
	})
	c := btpb.NewBigtableClient(sc.nodes[reader].conn)
	vals, _, _ := csRead(t, c, &btpb.ReadChangeStreamRequest{Partition: partitionOf("p", ""),
		StartFrom: &btpb.ReadChangeStreamRequest_StartTime{StartTime: timestamppb.New(start)}},
		func(v []string) bool { return len(v) >= len(want) })
	if got, exp := strings.Join(vals, ","), strings.Join(want, ","); got != exp {
		t.Fatalf("after the take-over the stream has %d records, want %d (in order, once each)", len(vals), len(want))
	}
}
