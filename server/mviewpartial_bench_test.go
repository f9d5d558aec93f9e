package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/clusterpb"
)

// BenchmarkClusterMaterializedViewRead measures a materialized view read
// through one node of a three-node cluster whose table is split in three
// tablets, one per node (no node owns the whole table): merged from the
// owners' states (mviewpartial.go) against computed on read (the same
// view with merging turned off, as every such read was before), alternating
// in one run. 20,000 rows in 10 groups; each iteration writes one row
// through n1 (to a tablet it may not own) and reads the view whole both
// ways, by ReadRows and by SQL. It reports the times and the ratio
// computed/merged.
//
//	flock /tmp/ebb-bench.lock go test -run '^$' -bench 'ClusterMaterializedViewRead$' -benchtime 20x ./server
func BenchmarkClusterMaterializedViewRead(b *testing.B) {
	const total = 20000
	sc, tbl, key := viewBenchCluster(b, nil, total)
	ctx := context.Background()
	n1 := sc.nodes["n1"]
	iac := testkit.InstanceAdmin(b, n1.srv.Addr(), testProject)
	const query = "SELECT f['g'] AS _key, COUNT(*) AS n, SUM(TO_INT64(f['v'])) AS s, MAX(TO_INT64(f['v'])) AS mx FROM t GROUP BY f['g']"
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "mv", Query: query}); err != nil {
		b.Fatal(err)
	}
	ps, err := n1.client.PrepareStatement(ctx, "SELECT _key, n, s, mx FROM mv", nil)
	if err != nil {
		b.Fatal(err)
	}
	readRows := func() {
		n := 0
		if err := n1.client.OpenMaterializedView("mv").ReadRows(ctx, bigtable.RowRange{}, func(bigtable.Row) bool { n++; return true }); err != nil {
			b.Fatal(err)
		}
		if n != 10 {
			b.Fatalf("ReadRows: %d rows, want 10", n)
		}
	}
	sql := func() {
		bs, err := ps.Bind(nil)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		if err := bs.Execute(ctx, func(bigtable.ResultRow) bool { n++; return true }); err != nil {
			b.Fatal(err)
		}
		if n != 10 {
			b.Fatalf("SQL: %d rows, want 10", n)
		}
	}
	timed := func(off bool, f func()) time.Duration {
		n1.srv.mviews.mergeOff.Store(off)
		defer n1.srv.mviews.mergeOff.Store(false)
		start := time.Now()
		f()
		return time.Since(start)
	}
	readRows() // every owner builds its part, if its maintainer has not yet
	var mergedRR, computedRR, mergedSQL, computedSQL time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := bigtable.NewMutation()
		m.Set("f", "g", 1000, []byte(fmt.Sprintf("g%d", i%10)))
		m.Set("f", "v", 1000, binary.BigEndian.AppendUint64(nil, uint64(i)))
		if err := tbl.Apply(ctx, key(total+i), m); err != nil {
			b.Fatal(err)
		}
		mergedRR += timed(false, readRows)
		computedRR += timed(true, readRows)
		mergedSQL += timed(false, sql)
		computedSQL += timed(true, sql)
	}
	if got := n1.srv.mviews.mergedReads.Load(); got < int64(2*b.N) {
		b.Fatalf("%d merged reads, want at least %d", got, 2*b.N)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(mergedRR), "merged-readrows-ms")
	b.ReportMetric(ms(computedRR), "computed-readrows-ms")
	b.ReportMetric(ms(computedRR)/ms(mergedRR), "readrows-computed/merged")
	b.ReportMetric(ms(mergedSQL), "merged-sql-ms")
	b.ReportMetric(ms(computedSQL), "computed-sql-ms")
	b.ReportMetric(ms(computedSQL)/ms(mergedSQL), "sql-computed/merged")
}

// viewBenchCluster starts the three-node cluster of the view read
// benchmarks, its table t split in three tablets, one per node, holding
// total rows written through n1: f:g in 10 groups, f:v the row's number
// (8 bytes), f:u one of 47 values. key names row i (in every tablet).
func viewBenchCluster(b *testing.B, tune func(*Options), total int) (*scaleCluster, *bigtable.Table, func(int) string) {
	b.Helper()
	sc := startScaleClusterTuned(b, 0, tune, "n1", "n2", "n3")
	sc.createTable(b, "n1", "g", "p")
	ctx := context.Background()
	n1 := sc.nodes["n1"]
	tabs, err := n1.ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil || len(tabs.Tablets) != 3 {
		b.Fatalf("tablets: %+v %v", tabs, err)
	}
	owners := map[string]bool{}
	for _, t := range tabs.Tablets {
		owners[t.Owner] = true
	}
	if len(owners) != 3 {
		b.Fatalf("tablets on %d nodes, want 3", len(owners))
	}
	tbl := n1.client.Open("t")
	key := func(i int) string { return fmt.Sprintf("%c%06d", 'a'+i%26, i) } // every tablet
	for start := 0; start < total; start += 1000 {
		var keys []string
		var muts []*bigtable.Mutation
		for i := start; i < min(start+1000, total); i++ {
			keys, muts = append(keys, key(i)), append(muts, viewBenchRow(i))
		}
		if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
			b.Fatal(err, errs)
		}
	}
	return sc, tbl, key
}

// viewBenchRow is row i of viewBenchCluster.
func viewBenchRow(i int) *bigtable.Mutation {
	m := bigtable.NewMutation()
	m.Set("f", "g", 1000, []byte(fmt.Sprintf("g%d", i%10)))
	m.Set("f", "v", 1000, binary.BigEndian.AppendUint64(nil, uint64(i)))
	m.Set("f", "u", 1000, []byte(fmt.Sprintf("u%d", i%47)))
	return m
}

// BenchmarkClusterMaterializedViewReadDistinct is
// BenchmarkClusterMaterializedViewRead for DISTINCT views (serve
// --materialized-view-rules any), whose merged read ships every owner's
// distinct values: "few" counts the 47 values of f:u in each of 10 groups
// (at most 1,410 values travel), "many" counts and sums f:v, distinct in
// every row (every row's value travels). Each iteration writes one row
// through n1 and reads both views whole both ways (merged and computed on
// read) by ReadRows and by SQL.
//
//	flock /tmp/ebb-bench.lock go test -run '^$' -bench ClusterMaterializedViewReadDistinct -benchtime 20x ./server
func BenchmarkClusterMaterializedViewReadDistinct(b *testing.B) {
	const total = 20000
	sc, tbl, key := viewBenchCluster(b, withAnyViewQuery, total)
	ctx := context.Background()
	n1 := sc.nodes["n1"]
	iac := testkit.InstanceAdmin(b, n1.srv.Addr(), testProject)
	views := []struct{ name, query string }{
		{"few", "SELECT f['g'] AS _key, COUNT(*) AS n, COUNT(DISTINCT f['u']) AS d FROM t GROUP BY f['g']"},
		{"many", "SELECT f['g'] AS _key, COUNT(DISTINCT TO_INT64(f['v'])) AS d, SUM(DISTINCT TO_INT64(f['v'])) AS s FROM t GROUP BY f['g']"},
	}
	type way struct {
		read                   func()
		merged, computed       time.Duration
		mergedSQL, computedSQL time.Duration
		sql                    func()
	}
	ways := make([]*way, len(views))
	for i, v := range views {
		if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: v.name, Query: v.query}); err != nil {
			b.Fatal(err)
		}
		ps, err := n1.client.PrepareStatement(ctx, "SELECT * FROM "+v.name, nil)
		if err != nil {
			b.Fatal(err)
		}
		name := v.name
		ways[i] = &way{
			read: func() {
				n := 0
				if err := n1.client.OpenMaterializedView(name).ReadRows(ctx, bigtable.RowRange{}, func(bigtable.Row) bool { n++; return true }); err != nil {
					b.Fatal(err)
				}
				if n != 10 {
					b.Fatalf("%s: ReadRows: %d rows, want 10", name, n)
				}
			},
			sql: func() {
				bs, err := ps.Bind(nil)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				if err := bs.Execute(ctx, func(bigtable.ResultRow) bool { n++; return true }); err != nil {
					b.Fatal(err)
				}
				if n != 10 {
					b.Fatalf("%s: SQL: %d rows, want 10", name, n)
				}
			},
		}
		ways[i].read() // every owner builds its part
	}
	timed := func(off bool, f func()) time.Duration {
		n1.srv.mviews.mergeOff.Store(off)
		defer n1.srv.mviews.mergeOff.Store(false)
		start := time.Now()
		f()
		return time.Since(start)
	}
	merged0 := n1.srv.mviews.mergedReads.Load()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := tbl.Apply(ctx, key(total+i), viewBenchRow(total+i)); err != nil {
			b.Fatal(err)
		}
		for _, w := range ways {
			w.merged += timed(false, w.read)
			w.computed += timed(true, w.read)
			w.mergedSQL += timed(false, w.sql)
			w.computedSQL += timed(true, w.sql)
		}
	}
	if got := n1.srv.mviews.mergedReads.Load() - merged0; got < int64(4*b.N) {
		b.Fatalf("%d merged reads, want at least %d", got, 4*b.N)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	for i, v := range views {
		w := ways[i]
		b.ReportMetric(ms(w.merged), v.name+"-merged-readrows-ms")
		b.ReportMetric(ms(w.computed), v.name+"-computed-readrows-ms")
		b.ReportMetric(ms(w.computed)/ms(w.merged), v.name+"-readrows-computed/merged")
		b.ReportMetric(ms(w.mergedSQL), v.name+"-merged-sql-ms")
		b.ReportMetric(ms(w.computedSQL), v.name+"-computed-sql-ms")
	}
}
