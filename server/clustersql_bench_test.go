package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/server/clusterpb"
)

// BenchmarkClusterSQL measures what running SQL on a node that does not
// own the table's rows costs: ExecuteQuery through the owner of every row
// against the same prepared query through the other node of a two-node
// cluster (in one process, so CPU counts both nodes), which reads the rows
// from the owner through ReadRows and runs the query itself. Interleaved in
// batches within one run; ratios: non-owner / owner. The queries: a point
// query on _key, and COUNT(*) over 1,000 rows.
func BenchmarkClusterSQL(b *testing.B) {
	sc := startScaleCluster(b, "n1", "n2")
	sc.createTable(b, "n1", "m")
	ctx := context.Background()
	tabs, err := sc.nodes["n1"].ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil || len(tabs.Tablets) != 2 {
		b.Fatalf("tablets: %+v %v", tabs, err)
	}
	owner := sc.nodes[tabs.Tablets[0].Owner] // owns [, m): every row below
	other := sc.nodes["n2"]
	if owner.id == "n2" {
		other = sc.nodes["n1"]
	}
	tbl := owner.client.Open("t")
	var rows []string
	var muts []*bigtable.Mutation
	for i := range 1000 {
		m := bigtable.NewMutation()
		m.Set("f", "c", bigtable.Timestamp(1000), []byte(fmt.Sprintf("value-%04d", i)))
		rows, muts = append(rows, fmt.Sprintf("a%04d", i)), append(muts, m)
	}
	if errs, err := tbl.ApplyBulk(ctx, rows, muts); err != nil || errs != nil {
		b.Fatal(err, errs)
	}
	queries := map[string]string{
		"point": "SELECT _key, f['c'] AS c FROM t WHERE _key = 'a0500'",
		"count": "SELECT COUNT(*) AS n FROM t WHERE _key < 'm'",
	}
	for _, name := range []string{"point", "count"} {
		b.Run(name, func(b *testing.B) {
			var run [2]func() error
			for side, n := range []*scaleNode{owner, other} {
				ps, err := n.client.PrepareStatement(ctx, queries[name], nil)
				if err != nil {
					b.Fatal(err)
				}
				run[side] = func() error {
					bs, err := ps.Bind(nil)
					if err != nil {
						return err
					}
					got := 0
					err = bs.Execute(ctx, func(bigtable.ResultRow) bool { got++; return true })
					if err == nil && got != 1 {
						err = fmt.Errorf("%d result rows, want 1", got)
					}
					return err
				}
			}
			var wall, cpu [2]time.Duration
			var n [2]int
			const batch = 20
			for i := 0; i < b.N; i += batch {
				for side := range 2 { // owner, then the other node
					w0, c0 := time.Now(), processCPU()
					for j := 0; j < batch && i+j < b.N; j++ {
						if err := run[side](); err != nil {
							b.Fatal(err)
						}
						n[side]++
					}
					wall[side] += time.Since(w0)
					cpu[side] += processCPU() - c0
				}
			}
			per := func(d time.Duration, k int) float64 { return float64(d.Microseconds()) / float64(max(k, 1)) }
			b.ReportMetric(per(wall[0], n[0]), "owner-µs/op")
			b.ReportMetric(per(wall[1], n[1]), "other-µs/op")
			b.ReportMetric(per(cpu[0], n[0]), "owner-cpu-µs/op")
			b.ReportMetric(per(cpu[1], n[1]), "other-cpu-µs/op")
			b.ReportMetric(per(wall[1], n[1])/per(wall[0], n[0]), "other/owner-latency")
			b.ReportMetric(per(cpu[1], n[1])/per(cpu[0], n[0]), "other/owner-cpu")
		})
	}
}
