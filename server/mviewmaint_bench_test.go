package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/ebbtable/ebbtable/internal/testkit"
)

// loadGrouped writes total rows to a table: f:g one of 10 groups, f:v a
// big-endian integer.
func loadGrouped(b *testing.B, env *testEnv, name string, total int) {
	b.Helper()
	tbl := env.client.Open(name)
	for start := 0; start < total; start += 1000 {
		var keys []string
		var muts []*bigtable.Mutation
		for i := start; i < min(start+1000, total); i++ {
			m := bigtable.NewMutation()
			m.Set("f", "g", 1000, []byte(fmt.Sprintf("g%d", i%10)))
			m.Set("f", "v", 1000, binary.BigEndian.AppendUint64(nil, uint64(i)))
			keys = append(keys, fmt.Sprintf("row%06d", i))
			muts = append(muts, m)
		}
		if errs, err := tbl.ApplyBulk(context.Background(), keys, muts); err != nil || errs != nil {
			b.Fatal(err, errs)
		}
	}
}

// BenchmarkMaterializedViewRead compares reading a maintained view with
// reading the same view computed on read (its query calls CURRENT_DATE, so
// it is not maintained), through the official client: 20,000 rows in 10 groups;
// each iteration writes one row to each table, then reads each view whole,
// alternating, then the maintained view again with nothing changed. It
// reports the ratio computed/maintained read time and the times.
//
//	flock /tmp/ebb-bench.lock go test -run '^$' -bench MaterializedViewRead -benchtime 20x ./server
func BenchmarkMaterializedViewRead(b *testing.B) {
	const total = 20000
	env, ctx := viewBenchSetup(b, total)
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
	read("vm") // builds the maintained state, if the maintainer has not yet
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

// viewBenchSetup makes tables m and c of total rows in 10 groups, and views
// vm (maintained) and vc (the same, computed on read: its key column is
// not named _key).
func viewBenchSetup(b *testing.B, total int) (*testEnv, context.Context) {
	env := newBenchEnv(b)
	ctx := context.Background()
	iac := testkit.InstanceAdmin(b, env.srv.Addr(), testProject)
	for _, name := range []string{"m", "c"} {
		conf := &bigtable.TableConf{TableID: name, ColumnFamilies: map[string]bigtable.Family{"f": {}}}
		if err := env.admin.CreateTableFromConf(ctx, conf); err != nil {
			b.Fatal(err)
		}
		loadGrouped(b, env, name, total)
		key := "_key"
		if name == "c" {
			key = "g"
		}
		q := fmt.Sprintf("SELECT f['g'] AS %s, COUNT(f['v']) AS n, MAX(f['v']) AS mx FROM %s GROUP BY f['g']", key, name)
		if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "v" + name, Query: q}); err != nil {
			b.Fatal(err)
		}
	}
	if m, _, _ := env.srv.keptView(sqlInstance, "vm"); m == nil {
		b.Fatal("vm is not maintained")
	}
	if c, _, _ := env.srv.keptView(sqlInstance, "vc"); c != nil {
		b.Fatal("vc is maintained")
	}
	return env, ctx
}

// BenchmarkMaterializedViewSQL is BenchmarkMaterializedViewRead through
// SQL: `SELECT * FROM vm` (the maintained view's stored rows) against
// `SELECT * FROM vc` (computed), prepared once, executed through the
// official client after a write to each table.
//
//	flock /tmp/ebb-bench.lock go test -run '^$' -bench MaterializedViewSQL -benchtime 20x ./server
func BenchmarkMaterializedViewSQL(b *testing.B) {
	const total = 20000
	env, ctx := viewBenchSetup(b, total)
	prepared := map[string]*bigtable.PreparedStatement{}
	for _, v := range []string{"vm", "vc"} {
		ps, err := env.client.PrepareStatement(ctx, "SELECT * FROM "+v, nil)
		if err != nil {
			b.Fatal(err)
		}
		prepared[v] = ps
	}
	read := func(view string) time.Duration {
		start := time.Now()
		bs, err := prepared[view].Bind(nil)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		if err := bs.Execute(ctx, func(bigtable.ResultRow) bool { n++; return true }); err != nil {
			b.Fatal(err)
		}
		if n != 10 {
			b.Fatalf("%s: %d rows, want 10", view, n)
		}
		return time.Since(start)
	}
	read("vm")
	var maintained, computed time.Duration
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
		i++
	}
	b.ReportMetric(float64(computed)/float64(maintained), "computed/maintained")
	b.ReportMetric(float64(maintained.Microseconds())/float64(i), "maintained-µs/read")
	b.ReportMetric(float64(computed.Microseconds())/float64(i), "computed-µs/read")
}

// BenchmarkMaterializedViewWrite measures what a maintained view adds to a
// write: two tables of 20,000 rows in 10 groups (2,000 rows a group), one
// read by a view with COUNT, SUM, AVG, MIN and MAX. Each iteration sends
// 100 single-row writes (each moving a row to another group with a new
// value) to each table, alternating which goes first; the view's are
// followed by waiting until the view has caught up with them (so its
// maintenance is counted, background or not). It reports the time and the
// process's CPU (server and client) per write, each way, and their ratios.
//
//	flock /tmp/ebb-bench.lock go test -run '^$' -bench MaterializedViewWrite -benchtime 20x ./server
func BenchmarkMaterializedViewWrite(b *testing.B) {
	const total, writes = 20000, 100
	env := newBenchEnv(b)
	ctx := context.Background()
	iac := testkit.InstanceAdmin(b, env.srv.Addr(), testProject)
	for _, name := range []string{"plain", "viewed"} {
		if err := env.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: name, ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
			b.Fatal(err)
		}
		loadGrouped(b, env, name, total)
	}
	q := "SELECT f['g'] AS _key, COUNT(*) AS n, SUM(TO_INT64(f['v'])) AS s, AVG(TO_INT64(f['v'])) AS a, MIN(f['v']) AS mn, MAX(f['v']) AS mx FROM viewed GROUP BY f['g']"
	if err := iac.CreateMaterializedView(ctx, testInstance, &bigtable.MaterializedViewInfo{MaterializedViewID: "v", Query: q}); err != nil {
		b.Fatal(err)
	}
	if err := env.srv.maintainAll(ctx); err != nil { // the build
		b.Fatal(err)
	}
	i := 0
	run := func(name string) (time.Duration, time.Duration) {
		tbl := env.client.Open(name)
		start, cpu := time.Now(), processCPU()
		for w := 0; w < writes; w++ {
			n := i*writes + w
			m := bigtable.NewMutation()
			m.Set("f", "g", 1000, []byte(fmt.Sprintf("g%d", n%7)))
			m.Set("f", "v", 1000, binary.BigEndian.AppendUint64(nil, uint64(n)))
			if err := tbl.Apply(ctx, fmt.Sprintf("row%06d", n*7919%total), m); err != nil {
				b.Fatal(err)
			}
		}
		if name == "viewed" {
			if err := env.srv.maintainAll(ctx); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start), processCPU() - cpu
	}
	var plain, viewed, plainCPU, viewedCPU time.Duration
	for b.Loop() {
		order := []string{"plain", "viewed"}
		if i%2 == 1 {
			order = []string{"viewed", "plain"}
		}
		for _, name := range order {
			t, c := run(name)
			if name == "plain" {
				plain, plainCPU = plain+t, plainCPU+c
			} else {
				viewed, viewedCPU = viewed+t, viewedCPU+c
			}
		}
		i++
	}
	n := float64(i * writes)
	b.ReportMetric(float64(plain.Microseconds())/n, "plain-µs/write")
	b.ReportMetric(float64(viewed.Microseconds())/n, "viewed-µs/write")
	b.ReportMetric(float64(viewed)/float64(plain), "viewed/plain")
	b.ReportMetric(float64(plainCPU.Microseconds())/n, "plain-cpu-µs/write")
	b.ReportMetric(float64(viewedCPU.Microseconds())/n, "viewed-cpu-µs/write")
	b.ReportMetric(float64(viewedCPU)/float64(plainCPU), "viewed/plain-cpu")
}
