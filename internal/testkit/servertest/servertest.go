// Package servertest starts real ebbtable servers in-process for tests in
// other packages: each on a loopback port, with its Pebble data in a
// temporary directory and (by default) a fake clock, and the official
// Bigtable clients connected to it. Cluster starts several joined as
// replicas. Everything is closed at the test's cleanup.
//
// Tests inside package server cannot import it (it imports server); they
// share the same client dialling through testkit.Clients.
package servertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server"
)

// Project and Instance are the names the clients use.
const (
	Project  = "proj"
	Instance = "inst"
)

// Env is one running server and its clients.
type Env struct {
	Srv    *server.Server
	Client *bigtable.Client
	Admin  *bigtable.AdminClient
	// Clock is the server's clock when it is the fake one (the default);
	// nil when an Option gave another.
	Clock *clock.Fake
	// Dir is the data directory.
	Dir string

	t       testing.TB
	opts    server.Options
	stopped bool
}

// Option changes the server's options before it starts.
type Option func(*server.Options)

// WithOptions applies f to the options, for anything the other Options do
// not name.
func WithOptions(f func(*server.Options)) Option { return Option(f) }

// RealClock runs the server on the real clock: for what waits on other
// processes or peers in real time.
func RealClock() Option { return func(o *server.Options) { o.Clock = clock.Real{} } }

// Dir puts the data in dir instead of a fresh temporary directory (to
// restart on the same data).
func Dir(dir string) Option { return func(o *server.Options) { o.DataDir = dir } }

// Start starts a server on 127.0.0.1 with the HTTP port off, a fresh data
// directory and a fake clock set to now (truncated to the millisecond), and
// connects the official data and admin clients to it.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	o := server.Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: t.TempDir(),
		Clock: clock.NewFake(time.Now().Truncate(time.Millisecond))}
	for _, f := range opts {
		f(&o)
	}
	env := &Env{t: t, opts: o, Dir: o.DataDir}
	env.Clock, _ = o.Clock.(*clock.Fake)
	env.start()
	return env
}

func (env *Env) start() {
	t := env.t
	t.Helper()
	srv, err := server.New(env.opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		srv.Close()
		t.Fatal(err)
	}
	env.Srv, env.stopped = srv, false
	env.Client, env.Admin = testkit.Clients(t, srv.Addr(), Project, Instance, "")
	t.Cleanup(env.Stop)
}

// Addr is the server's gRPC address.
func (env *Env) Addr() string { return env.Srv.Addr() }

// Stop closes the clients and the server; a second call does nothing.
func (env *Env) Stop() {
	if env.stopped {
		return
	}
	env.stopped = true
	env.Client.Close()
	env.Admin.Close()
	env.Srv.Close()
}

// Restart stops the server and starts it again on the same data directory,
// options and clock, with new clients.
func (env *Env) Restart() {
	env.t.Helper()
	env.Stop()
	env.opts.Addr = "127.0.0.1:0"
	env.start()
}

// Clients connects another pair of official clients, with an app profile.
func (env *Env) Clients(profile string) (*bigtable.Client, *bigtable.AdminClient) {
	env.t.Helper()
	return testkit.Clients(env.t, env.Addr(), Project, Instance, profile)
}

// InstanceAdmin connects the official instance-admin client.
func (env *Env) InstanceAdmin() *bigtable.InstanceAdminClient {
	env.t.Helper()
	return testkit.InstanceAdmin(env.t, env.Addr(), Project)
}

// CreateTable makes a table with the given families and GC policies and
// opens it.
func (env *Env) CreateTable(name string, families map[string]bigtable.GCPolicy) *bigtable.Table {
	env.t.Helper()
	conf := &bigtable.TableConf{TableID: name, ColumnFamilies: map[string]bigtable.Family{}}
	for f, p := range families {
		conf.ColumnFamilies[f] = bigtable.Family{GCPolicy: p}
	}
	if err := env.Admin.CreateTableFromConf(context.Background(), conf); err != nil {
		env.t.Fatalf("create table %s: %v", name, err)
	}
	return env.Client.Open(name)
}

// Cluster starts len(ids) servers on the real clock (replication runs
// between them in real time), the first alone and each next one joining
// the one before, and waits until each knows every other as a ready peer.
// opts apply to every server.
func Cluster(t testing.TB, ids []string, opts ...Option) []*Env {
	t.Helper()
	var envs []*Env
	for i, id := range ids {
		join := ""
		if i > 0 {
			join = envs[i-1].Addr()
		}
		o := append([]Option{RealClock()}, opts...)
		o = append(o, func(so *server.Options) { so.ClusterID, so.Join = id, join })
		envs = append(envs, Start(t, o...))
	}
	for _, e := range envs {
		iac := e.InstanceAdmin()
		testkit.Eventually(t, e.opts.ClusterID+" sees every cluster ready", 20*time.Second, func() (bool, string) {
			cs, err := iac.Clusters(context.Background(), Instance)
			if err != nil {
				return false, err.Error()
			}
			ready := 0
			for _, c := range cs {
				if c.State == "READY" {
					ready++
				}
			}
			return ready == len(envs), fmt.Sprintf("%d of %d clusters ready: %v", ready, len(envs), cs)
		})
	}
	return envs
}
