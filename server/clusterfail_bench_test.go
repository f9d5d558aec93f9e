package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// BenchmarkFailoverWrites measures what the shared commit log costs a
// write: one-node clusters with failover off (the baseline) and on (every
// write in an object of the shared directory before it is acknowledged),
// in one process and one run, batches interleaved. "seq": one writer;
// "conc8": eight writers at once (their records share log objects).
// Ratios: failover / baseline.
func BenchmarkFailoverWrites(b *testing.B) {
	base := startScaleCluster(b, "n1")
	base.createTable(b, "n1")
	fo := startScaleClusterTuned(b, 0, func(o *Options) { o.Cluster.Failover = true }, "n1")
	fo.createTable(b, "n1")
	ctx := context.Background()
	tbls := []*bigtable.Table{base.nodes["n1"].client.Open("t"), fo.nodes["n1"].client.Open("t")}
	for _, writers := range []int{1, 8} {
		name := "seq"
		if writers > 1 {
			name = fmt.Sprintf("conc%d", writers)
		}
		b.Run(name, func(b *testing.B) {
			var wall, cpu [2]time.Duration
			var n [2]int
			const batch = 40
			for i := 0; i < b.N; i += batch {
				for side, tbl := range tbls {
					k := min(batch, b.N-i)
					w0, c0 := time.Now(), processCPU()
					var wg sync.WaitGroup
					for w := range writers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for j := w; j < k; j += writers {
								m := bigtable.NewMutation()
								m.Set("f", "c", bigtable.Timestamp(1000), []byte("value"))
								if err := tbl.Apply(ctx, fmt.Sprintf("r%08d", i+j), m); err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
					wg.Wait()
					wall[side] += time.Since(w0)
					cpu[side] += processCPU() - c0
					n[side] += k
				}
			}
			per := func(d time.Duration, k int) float64 { return float64(d.Microseconds()) / float64(max(k, 1)) }
			b.ReportMetric(per(wall[0], n[0]), "base-µs/op")
			b.ReportMetric(per(wall[1], n[1]), "failover-µs/op")
			b.ReportMetric(per(cpu[0], n[0]), "base-cpu-µs/op")
			b.ReportMetric(per(cpu[1], n[1]), "failover-cpu-µs/op")
			b.ReportMetric(per(wall[1], n[1])/per(wall[0], n[0]), "failover/base-time")
			b.ReportMetric(per(cpu[1], n[1])/per(cpu[0], n[0]), "failover/base-cpu")
		})
	}
}
