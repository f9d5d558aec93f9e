package server

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/ebbtable/ebbtable/auth"
)

// BenchmarkClusterIAM measures what the IAM step costs a point read in a
// scale-out cluster: two three-node clusters on their own embedded etcd in
// one process, one without tokens, one with tokens, a node credential and
// a policy on the table and the instance. Reads go through the tablet's
// owner in both, interleaved in batches within one run, so CPU (the whole
// process: every node and etcd) and latency are compared under the same
// load. Ratios: tokens on / tokens off (docs/security.md, "Cost").
func BenchmarkClusterIAM(b *testing.B) {
	ctx := context.Background()
	ids := []string{"n1", "n2", "n3"}
	off, on := newIAMCluster(b, false, ids...), newIAMCluster(b, true, ids...)
	off.createTable("n1", "")
	on.createTable("n1", tokAdmin)
	owner := func(c *iamCluster) string {
		d, ok := c.nodes["n1"].ClusterMember().Directory(testInstanceName + "/tables/t")
		if !ok {
			b.Fatal("no directory")
		}
		return d.Tablets[0].Owner
	}
	for _, res := range []string{scaleInstance, scaleTable} {
		if _, err := on.tableAdmin("n1", tokAdmin).SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: res, Policy: &iampb.Policy{Bindings: []*iampb.Binding{
			{Role: "roles/bigtable.admin", Members: []string{auth.TokenMember(tokAdmin)}},
			{Role: "roles/bigtable.reader", Members: []string{auth.TokenMember(tokReader)}},
		}}}); err != nil {
			b.Fatal(err)
		}
	}
	tbls := [2]*bigtable.Table{off.data(owner(off), ""), on.data(owner(on), tokReader)}
	if err := writeScale(b, off.data("n1", ""), "r", "value"); err != nil {
		b.Fatal(err)
	}
	if err := writeScale(b, on.data("n1", tokAdmin), "r", "value"); err != nil {
		b.Fatal(err)
	}
	for _, t := range tbls { // warm up
		for range 200 {
			if _, err := t.ReadRow(ctx, "r"); err != nil {
				b.Fatal(err)
			}
		}
	}
	var wall, cpu [2]time.Duration
	var n [2]int
	const batch = 50
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		for side, t := range tbls {
			w0, c0 := time.Now(), processCPU()
			for j := 0; j < batch && i+j < b.N; j++ {
				if row, err := t.ReadRow(ctx, "r"); err != nil || len(row["f"]) != 1 {
					b.Fatal(row, err)
				}
				n[side]++
			}
			wall[side] += time.Since(w0)
			cpu[side] += processCPU() - c0
		}
	}
	per := func(d time.Duration, k int) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(max(k, 1)) }
	b.ReportMetric(per(wall[0], n[0]), "off-µs/op")
	b.ReportMetric(per(wall[1], n[1]), "on-µs/op")
	b.ReportMetric(per(cpu[0], n[0]), "off-cpu-µs/op")
	b.ReportMetric(per(cpu[1], n[1]), "on-cpu-µs/op")
	b.ReportMetric(per(cpu[1], n[1])/per(cpu[0], n[0]), "on/off-cpu")
	b.ReportMetric(per(wall[0], n[0])/per(wall[1], n[1]), "on/off-throughput")
}
