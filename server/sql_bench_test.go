package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

// BenchmarkSQLKeyRange compares a _key-ranged SELECT with ReadRows of the
// same rows, both through the official client against a loopback server:
// each iteration reads the range once each way, alternating, and the
// ratios of SQL's rows/s to ReadRows' are reported.
//
//	flock /tmp/ebb-bench.lock go test -run '^$' -bench SQLKeyRange -benchtime 20x ./server
func BenchmarkSQLKeyRange(b *testing.B) {
	const total, ranged = 20000, 10000
	env := newBenchEnv(b)
	ctx := context.Background()
	conf := &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{"f": {}}}
	if err := env.admin.CreateTableFromConf(ctx, conf); err != nil {
		b.Fatal(err)
	}
	tbl := env.client.Open("t")
	val := make([]byte, 100)
	for start := 0; start < total; start += 1000 {
		var keys []string
		var muts []*bigtable.Mutation
		for i := start; i < start+1000; i++ {
			m := bigtable.NewMutation()
			m.Set("f", "a", 1000, val)
			m.Set("f", "b", 1000, val)
			keys = append(keys, fmt.Sprintf("row%06d", i))
			muts = append(muts, m)
		}
		if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
			b.Fatal(err, errs)
		}
	}
	lo, hi := fmt.Sprintf("row%06d", 5000), fmt.Sprintf("row%06d", 5000+ranged)
	queries := map[string]string{
		"columns": "SELECT _key, f['a'] AS a, f['b'] AS b FROM t WHERE _key >= @lo AND _key < @hi",
		"family":  "SELECT _key, f FROM t WHERE _key >= @lo AND _key < @hi",
	}
	for _, name := range []string{"columns", "family"} {
		b.Run(name, func(b *testing.B) {
			ps, err := env.client.PrepareStatement(ctx, queries[name], map[string]bigtable.SQLType{"lo": bigtable.BytesSQLType{}, "hi": bigtable.BytesSQLType{}})
			if err != nil {
				b.Fatal(err)
			}
			bs, err := ps.Bind(map[string]any{"lo": []byte(lo), "hi": []byte(hi)})
			if err != nil {
				b.Fatal(err)
			}
			var sqlTime, readTime time.Duration
			for b.Loop() {
				start := time.Now()
				n := 0
				if err := tbl.ReadRows(ctx, bigtable.NewRange(lo, hi), func(bigtable.Row) bool { n++; return true }); err != nil || n != ranged {
					b.Fatalf("ReadRows: %v, %d rows", err, n)
				}
				readTime += time.Since(start)
				start = time.Now()
				n = 0
				if err := bs.Execute(ctx, func(bigtable.ResultRow) bool { n++; return true }); err != nil || n != ranged {
					b.Fatalf("SQL: %v, %d rows", err, n)
				}
				sqlTime += time.Since(start)
			}
			iters := float64(b.N)
			b.ReportMetric(ranged*iters/readTime.Seconds(), "readrows-rows/s")
			b.ReportMetric(ranged*iters/sqlTime.Seconds(), "sql-rows/s")
			b.ReportMetric(readTime.Seconds()/sqlTime.Seconds(), "sql/readrows")
		})
	}
}

// newBenchEnv is newTestEnv for benchmarks: the real clock, a loopback
// server, official clients.
func newBenchEnv(b *testing.B) *testEnv {
	b.Helper()
	o := Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: b.TempDir()}
	srv, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	client, admin := testkit.Clients(b, srv.Addr(), testProject, testInstance, "")
	return &testEnv{srv: srv, client: client, admin: admin}
}
