package server

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// BenchmarkForwarding measures what forwarding costs: point reads and
// writes sent to the tablet's owner against the same sent to the other
// node of a two-node cluster (in one process, so CPU counts both nodes),
// interleaved in batches within one run. Ratios: forwarded / owner.
func BenchmarkForwarding(b *testing.B) {
	sc := startScaleCluster(b, "n1", "n2")
	sc.createTable(b, "n1", "m")
	tbl := sc.nodes["n1"].client.Open("t") // n1 owns [, m); n2 owns [m, )
	ctx := context.Background()
	for _, r := range []string{"a", "z"} {
		if err := writeScale(b, tbl, r, "value"); err != nil {
			b.Fatal(err)
		}
	}
	ops := map[string]func(row string) error{
		"read": func(row string) error { _, err := tbl.ReadRow(ctx, row); return err },
		"write": func(row string) error {
			m := bigtable.NewMutation()
			m.Set("f", "c", bigtable.Timestamp(1000), []byte("value"))
			return tbl.Apply(ctx, row, m)
		},
	}
	for _, name := range []string{"read", "write"} {
		op := ops[name]
		b.Run(name, func(b *testing.B) {
			var wall, cpu [2]time.Duration
			var n [2]int
			const batch = 50
			for i := 0; i < b.N; {
				for side, row := range []string{"a", "z"} { // owner, then forwarded
					w0, c0 := time.Now(), processCPU()
					for j := 0; j < batch && i+j < b.N; j++ {
						if err := op(row); err != nil {
							b.Fatal(err)
						}
						n[side]++
					}
					wall[side] += time.Since(w0)
					cpu[side] += processCPU() - c0
				}
				i += batch
			}
			per := func(d time.Duration, k int) float64 { return float64(d.Microseconds()) / float64(max(k, 1)) }
			b.ReportMetric(per(wall[0], n[0]), "owner-µs/op")
			b.ReportMetric(per(wall[1], n[1]), "fwd-µs/op")
			b.ReportMetric(per(cpu[0], n[0]), "owner-cpu-µs/op")
			b.ReportMetric(per(cpu[1], n[1]), "fwd-cpu-µs/op")
			b.ReportMetric(per(wall[1], n[1])/per(wall[0], n[0]), "fwd/owner-latency")
			b.ReportMetric(per(cpu[1], n[1])/per(cpu[0], n[0]), "fwd/owner-cpu")
		})
	}
}
