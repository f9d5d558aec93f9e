package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// BenchmarkMaterializedViewRead compares reading a maintained view (its
// table has a change stream) with reading the same view computed on read
// (no change stream), through the official client: 20,000 rows in 10
// groups; each iteration writes one row to each table, then reads each view
// whole, alternating, then the maintained view again with nothing changed.
// It reports the ratio computed/maintained read time and the times.
//
//	flock /tmp/ebb-bench.lock go test -run '^$' -bench MaterializedViewRead -benchtime 20x ./server
func BenchmarkMaterializedViewRead(b *testing.B) {
	const total = 20000
	env := newBenchEnv(b)
	ctx := context.Background()
	iac, err := bigtable.NewInstanceAdminClient(ctx, testProject)
	if err != nil {
		b.Fatal(err)
	}
	defer iac.Close()
	for _, name := range []string{"m", "c"} {
		conf := &bigtable.TableConf{TableID: name, ColumnFamilies: map[string]bigtable.Family{"f": {}}}
		if name == "m" {
			conf.ChangeStreamRetention = 24 * time.Hour
		}
		if err := env.admin.CreateTableFromConf(ctx, conf); err != nil {
			b.Fatal(err)
		}
		tbl := env.client.Open(name)
		for start := 0; start < total; start += 1000 {
			var keys []string
			var muts []*bigtable.Mutation
			for i := start; i < start+1000; i++ {
				m := bigtable.NewMutation()
				m.Set("f", "g", 1000, []byte(fmt.Sprintf("g%d", i%10)))
				m.Set("f", "v", 1000, []byte(fmt.Sprintf("%06d", i)))
				keys = append(keys, fmt.Sprintf("row%06d", i))
				muts = append(muts, m)
			}
			if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
				b.Fatal(err, errs)
			}
		}
		q := fmt.Sprintf("SELECT f['g'] AS _key, COUNT(f['v']) AS n, MAX(f['v']) AS mx FROM %s GROUP BY f['g']", name)
		if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "v" + name, Query: q}); err != nil {
			b.Fatal(err)
		}
	}
	read := func(view string) time.Duration {
		start := time.Now()
		n := 0
		if err := env.client.OpenMaterializedView(view).ReadRows(ctx, bigtable.RowRange{}, func(bigtable.Row) bool { n++; return true }); err != nil {
			b.Fatal(err)
		}
		if n != 10 {
			b.Fatalf("%s: %d rows, want 10", view, n)
		}
		return time.Since(start)
	}
	read("vm") // the first read builds the maintained state
	var maintained, computed, idle time.Duration
	i := 0
	for b.Loop() {
		for _, name := range []string{"m", "c"} {
			m := bigtable.NewMutation()
			m.Set("f", "v", bigtable.Timestamp(2000+i), []byte("x"))
			if err := env.client.Open(name).Apply(ctx, fmt.Sprintf("row%06d", i*7%total), m); err != nil {
				b.Fatal(err)
			}
		}
		if i%2 == 0 {
			maintained += read("vm")
			computed += read("vc")
		} else {
			computed += read("vc")
			maintained += read("vm")
		}
		idle += read("vm") // nothing changed since the last read
		i++
	}
	b.ReportMetric(float64(computed)/float64(maintained), "computed/maintained")
	b.ReportMetric(float64(maintained.Microseconds())/float64(i), "maintained-µs/read")
	b.ReportMetric(float64(computed.Microseconds())/float64(i), "computed-µs/read")
	b.ReportMetric(float64(idle.Microseconds())/float64(i), "idle-maintained-µs/read")
}
