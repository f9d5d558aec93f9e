package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/storage"
	"github.com/ebbtable/ebbtable/table"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	testProject  = "proj"
	testInstance = "inst"
)

// testEnv is a server on a loopback port with official clients talking to it.
type testEnv struct {
	srv    *Server
	client *bigtable.Client
	admin  *bigtable.AdminClient
	clock  *clock.Fake
	dir    string
}

type envOption func(*Options)

// withAnyViewQuery accepts materialized view queries beyond Cloud
// Bigtable's rules (Options.AnyViewQuery, serve --materialized-view-rules any).
func withAnyViewQuery(o *Options) { o.AnyViewQuery = true }

func withVisibility(v table.Visibility) envOption {
	return func(o *Options) { o.Visibility = v }
}

// newTestEnv starts a server with a fake clock (set to now) on a temp dir.
func newTestEnv(t *testing.T, opts ...envOption) *testEnv {
	t.Helper()
	fake := clock.NewFake(time.Now().Truncate(time.Millisecond))
	o := Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: t.TempDir(), Clock: fake}
	for _, f := range opts {
		f(&o)
	}
	env := &testEnv{clock: fake, dir: o.DataDir}
	env.start(t, o)
	return env
}

func (env *testEnv) start(t *testing.T, o Options) {
	t.Helper()
	srv := startServer(t, o)
	env.srv = srv
	env.client, env.admin = testkit.Clients(t, srv.Addr(), testProject, testInstance, "")
}

// startServer builds and starts a server with o, closed when tb ends.
func startServer(tb testing.TB, o Options) *Server {
	tb.Helper()
	srv, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Close() })
	return srv
}

// bulkSet writes n rows named fmt.Sprintf(format, i), each with one cell,
// in one MutateRows call.
func bulkSet(t *testing.T, tbl *bigtable.Table, n int, format, fam, col string, ts bigtable.Timestamp, val string) {
	t.Helper()
	keys := make([]string, n)
	muts := make([]*bigtable.Mutation, n)
	for i := range n {
		keys[i] = fmt.Sprintf(format, i)
		muts[i] = bigtable.NewMutation()
		muts[i].Set(fam, col, ts, []byte(val))
	}
	errs, err := tbl.ApplyBulk(context.Background(), keys, muts)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("row %s: %v", keys[i], err)
		}
	}
}

// raw returns a generated Data API client, for requests the official client
// library would correct before sending.
func (env *testEnv) raw(t *testing.T) btpb.BigtableClient {
	t.Helper()
	conn, err := grpc.NewClient(env.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return btpb.NewBigtableClient(conn)
}

func tableName(name string) string {
	return "projects/" + testProject + "/instances/" + testInstance + "/tables/" + name
}

// createTable makes a table with the given families and GC policies.
func (env *testEnv) createTable(t *testing.T, name string, families map[string]bigtable.GCPolicy) *bigtable.Table {
	t.Helper()
	conf := &bigtable.TableConf{TableID: name, ColumnFamilies: map[string]bigtable.Family{}}
	for f, p := range families {
		conf.ColumnFamilies[f] = bigtable.Family{GCPolicy: p}
	}
	if err := env.admin.CreateTableFromConf(context.Background(), conf); err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	return env.client.Open(name)
}

// storedCells counts the cells physically stored for a table, whatever their
// visibility: what the collector has not removed.
func storedCells(t *testing.T, env *testEnv, name string) int {
	t.Helper()
	m, err := env.srv.Engine().Table("projects/"+testProject+"/instances/"+testInstance, name)
	if err != nil {
		t.Fatal(err)
	}
	it, err := env.srv.Engine().RawIter(storage.TablePrefix(m.ID), storage.TableEnd(m.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	return n
}
