package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// BenchmarkClusterBackup measures a cluster backup and restore of a table
// whose three tablets are on three nodes against the same of a table of
// one tablet on one node, same rows, interleaved within one run (one
// process: the wall time includes every node's work). Ratios: spread /
// one tablet.
func BenchmarkClusterBackup(b *testing.B) {
	sc := startScaleCluster(b, "n1", "n2", "n3")
	ctx := context.Background()
	admin := sc.nodes["n1"].admin
	const rows = 20000
	for _, tc := range []struct {
		id     string
		splits []string
	}{{"spread", []string{"r06666", "r13333"}}, {"one", nil}} {
		if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: tc.id, SplitKeys: tc.splits,
			ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
			b.Fatal(err)
		}
		tbl := sc.nodes["n1"].client.Open(tc.id)
		for start := 0; start < rows; start += 1000 {
			var keys []string
			var muts []*bigtable.Mutation
			for i := start; i < start+1000; i++ {
				m := bigtable.NewMutation()
				m.Set("f", "c", bigtable.Timestamp(1000), []byte(fmt.Sprintf("value-%08d", i)))
				keys, muts = append(keys, fmt.Sprintf("r%05d", i)), append(muts, m)
			}
			if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
				b.Fatal(err, errs)
			}
		}
	}
	var backup, restore, backupCPU, restoreCPU [2]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for side, id := range []string{"spread", "one"} {
			bk := fmt.Sprintf("%s-%d", id, i)
			start, c0 := time.Now(), processCPU()
			if err := admin.CreateBackup(ctx, id, "c1", bk, time.Now().Add(7*time.Hour)); err != nil {
				b.Fatal(err)
			}
			mid, c1 := time.Now(), processCPU()
			if err := sc.nodes["n2"].admin.RestoreTable(ctx, bk, "c1", bk); err != nil {
				b.Fatal(err)
			}
			backup[side] += mid.Sub(start)
			restore[side] += time.Since(mid)
			backupCPU[side] += c1 - c0
			restoreCPU[side] += processCPU() - c1
			b.StopTimer()
			if err := admin.DeleteTable(ctx, bk); err != nil {
				b.Fatal(err)
			}
			if err := admin.DeleteBackup(ctx, "c1", bk); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / n / 1000 }
	b.ReportMetric(ms(backup[0]), "spread-backup-ms")
	b.ReportMetric(ms(backup[1]), "one-backup-ms")
	b.ReportMetric(ms(backupCPU[0]), "spread-backup-cpu-ms")
	b.ReportMetric(ms(backupCPU[1]), "one-backup-cpu-ms")
	b.ReportMetric(float64(backup[0])/float64(backup[1]), "backup-ratio")
	b.ReportMetric(float64(backupCPU[0])/float64(backupCPU[1]), "backup-cpu-ratio")
	b.ReportMetric(ms(restore[0]), "spread-restore-ms")
	b.ReportMetric(ms(restore[1]), "one-restore-ms")
	b.ReportMetric(ms(restoreCPU[0]), "spread-restore-cpu-ms")
	b.ReportMetric(ms(restoreCPU[1]), "one-restore-cpu-ms")
	b.ReportMetric(float64(restore[0])/float64(restore[1]), "restore-ratio")
	b.ReportMetric(float64(restoreCPU[0])/float64(restoreCPU[1]), "restore-cpu-ratio")
}
