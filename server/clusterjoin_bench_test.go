package server

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
)

// BenchmarkReplicationClusterToCluster measures replication between two
// clusters of two nodes (b joined a with --join): per op, one row written
// on a through n2 (not a's puller) and read back through m2, the node of
// b that does not pull; "lag-ms" is the time from a's acknowledgement
// until the row reads through m2. "delay-m1-ms" and "delay-m2-ms" are the
// means of the delay (`replication status`, max_delay) that the puller m1
// and the non-pulling m2 report for a, sampled once per op after the row
// arrived: m2's comes from what m1 shares through etcd.
//
//	flock /tmp/ebb-bench.lock go test -run XXX -bench BenchmarkReplicationClusterToCluster -benchtime 200x ./server
func BenchmarkReplicationClusterToCluster(b *testing.B) {
	a := startScaleClusterTuned(b, 0, func(o *Options) { o.ClusterID = "a" }, "n1", "n2")
	a.createTable(b, "n1", "g", "n")
	bc := newScaleCluster(b, &scaleCluster{})
	for _, id := range []string{"m1", "m2"} {
		bc.tune = func(o *Options) {
			o.ClusterID = "b"
			if id == "m2" {
				o.Join = a.nodes["n1"].srv.Addr()
			}
		}
		n := bc.start(b, id, filepath.Join(b.TempDir(), id))
		b.Cleanup(n.stop)
	}
	ctx := context.Background()
	src, dst := a.nodes["n2"].client.Open("t"), bc.nodes["m2"].client.Open("t")
	delay := func(n *scaleNode) (time.Duration, bool) {
		st, err := ebbadminpb.NewEbbAdminClient(n.conn).ReplicationStatus(ctx, &ebbadminpb.ReplicationStatusRequest{Project: testProject, Instance: testInstance})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range st.GetPeers() {
			if p.GetId() == "a" && p.MaxDelaySeconds != nil {
				return time.Duration(p.GetMaxDelaySeconds() * float64(time.Second)), true
			}
		}
		return 0, false
	}
	var lag, d1, d2 time.Duration
	n1, n2 := 0, 0
	b.ResetTimer()
	for i := range b.N {
		row := fmt.Sprintf("%c-%06d", 'a'+i%26, i)
		m := bigtable.NewMutation()
		m.Set("f", "c", 1000, []byte("v"))
		if err := src.Apply(ctx, row, m); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for {
			r, err := dst.ReadRow(ctx, row)
			if err != nil {
				b.Fatal(err)
			}
			if len(r) > 0 {
				break
			}
			if time.Since(start) > 30*time.Second {
				b.Fatalf("row %s never reached m2", row)
			}
		}
		lag += time.Since(start)
		if d, ok := delay(bc.nodes["m1"]); ok {
			d1 += d
			n1++
		}
		if d, ok := delay(bc.nodes["m2"]); ok {
			d2 += d
			n2++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(lag.Microseconds())/1000/float64(b.N), "lag-ms")
	if n1 > 0 {
		b.ReportMetric(float64(d1.Microseconds())/1000/float64(n1), "delay-m1-ms")
	}
	if n2 > 0 {
		b.ReportMetric(float64(d2.Microseconds())/1000/float64(n2), "delay-m2-ms")
	}
}
