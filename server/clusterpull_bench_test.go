package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// BenchmarkReplicationIntoCluster measures replication into a cluster of
// three nodes from a cluster of one process: per op, one row written on b
// through the official client and read back through a node of c that is
// not the puller (its tablet may be on any node); "lag-ms" is the time
// from b's acknowledgement until the row reads on c. A bulk run then
// writes 2,000 rows on b in one MutateRows and reports "bulk-rows/s", the
// rate at which they all reached c.
//
//	flock /tmp/ebb-bench.lock go test -run XXX -bench BenchmarkReplicationIntoCluster -benchtime 200x ./server
func BenchmarkReplicationIntoCluster(b *testing.B) {
	sc := startScaleClusterTuned(b, 0, func(o *Options) { o.ClusterID = "c" }, "n1", "n2", "n3")
	sc.createTable(b, "n2", "g", "n", "t")
	peer := startBenchPeer(b, sc.nodes["n1"].srv.Addr())
	ctx := context.Background()
	src, dst := peer.client.Open("t"), sc.nodes["n2"].client.Open("t")
	visible := func(row string) bool {
		r, err := dst.ReadRow(ctx, row)
		if err != nil {
			b.Fatal(err)
		}
		return len(r) > 0
	}
	var lag time.Duration
	b.ResetTimer()
	for i := range b.N {
		row := fmt.Sprintf("%c-%06d", 'a'+i%26, i)
		m := bigtable.NewMutation()
		m.Set("f", "c", 1000, []byte("v"))
		if err := src.Apply(ctx, row, m); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for !visible(row) {
			if time.Since(start) > 30*time.Second {
				b.Fatalf("row %s never reached c", row)
			}
		}
		lag += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(lag.Microseconds())/1000/float64(b.N), "lag-ms")

	const bulk = 2000
	var rows []string
	var muts []*bigtable.Mutation
	for i := range bulk {
		rows = append(rows, fmt.Sprintf("%c-bulk-%06d", 'a'+i%26, i))
		m := bigtable.NewMutation()
		m.Set("f", "c", 1000, []byte("bulk"))
		muts = append(muts, m)
	}
	start := time.Now()
	if errs, err := src.ApplyBulk(ctx, rows, muts); err != nil || errs != nil {
		b.Fatal(err, errs)
	}
	for {
		n := 0
		if err := dst.ReadRows(ctx, bigtable.PrefixRange(""), func(r bigtable.Row) bool {
			n++
			return true
		}, bigtable.RowFilter(bigtable.ValueFilter("bulk"))); err != nil {
			b.Fatal(err)
		}
		if n == bulk {
			break
		}
		if time.Since(start) > time.Minute {
			b.Fatalf("%d of %d bulk rows on c", n, bulk)
		}
	}
	b.ReportMetric(bulk/time.Since(start).Seconds(), "bulk-rows/s")
}

// startBenchPeer starts cluster b, one process joining through join.
func startBenchPeer(b *testing.B, join string) *cluster {
	srv, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: b.TempDir(), ClusterID: "b", Join: join})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		srv.Close()
		b.Fatal(err)
	}
	c := &cluster{srv: srv}
	c.client, c.admin = officialClients(b, srv.Addr(), "")
	b.Cleanup(c.stop)
	return c
}
