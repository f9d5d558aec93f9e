package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/internal/etcdtest"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// iamCluster is a scale-out cluster in one process for the IAM tests and
// benchmark: an embedded etcd, a shared directory and nodes in cluster
// mode, with tokens and a node credential (secure) or without.
type iamCluster struct {
	t            testing.TB
	secure       bool
	etcd, prefix string // the shared etcd, through a proxy of the cluster's own, and its keys' prefix
	shared       string
	cutEtcd      func()         // drops every connection to etcd, refuses new ones
	healEtcd     func()         // lets nodes reach etcd again
	tune         func(*Options) // set before start: adjusts each node's options
	knobs        *testKnobs     // every node's test hooks and bounds (testknobs.go)
	tokens, peer string
	cred, dir    string
	nodes        map[string]*Server
	dirs         map[string]string
	conns        []*grpc.ClientConn
	closers      []func() error
}

func newIAMCluster(t testing.TB, secure bool, ids ...string) *iamCluster {
	t.Helper()
	return newIAMClusterTuned(t, secure, nil, ids...)
}

func newIAMClusterTuned(t testing.TB, secure bool, tune func(*Options), ids ...string) *iamCluster {
	t.Helper()
	c := &iamCluster{t: t, secure: secure, shared: t.TempDir(), dir: t.TempDir(), nodes: map[string]*Server{}, dirs: map[string]string{},
		knobs: &testKnobs{}}
	ep, prefix := sharedEtcd.Start(t)
	c.etcd, c.cutEtcd, c.healEtcd = etcdtest.Cuttable(t, ep)
	c.prefix = prefix
	c.tune = tune
	if secure {
		c.tokens, c.peer, c.cred = filepath.Join(c.dir, "tokens"), filepath.Join(c.dir, "peer"), filepath.Join(c.dir, "node")
		body := "# test tokens\n" + tokViewer + " viewer\n" + tokReader + " reader\n" + tokUser + " user\n" + tokAdmin + " admin\n" + tokOther + " user other\n"
		for f, b := range map[string]string{c.tokens: body, c.peer: peerSecret + "\n", c.cred: "node-secret-0123456789abc\n"} {
			if err := os.WriteFile(f, []byte(b), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(c.close)
	for _, id := range ids {
		c.start(id, filepath.Join(c.dir, id))
	}
	first := ids[0]
	testkit.Eventually(t, "every node to see the others", 20*time.Second, func() (bool, string) {
		return len(c.nodes[first].ClusterMember().Nodes()) == len(ids), ""
	})
	return c
}

// start starts node id on data directory dir (a new one, or one a node
// used before).
func (c *iamCluster) start(id, dir string) *Server {
	c.t.Helper()
	o := Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: dir,
		Cluster: &ClusterOptions{Etcd: []string{c.etcd}, Prefix: c.prefix, NodeID: id, LeaseTTL: 2 * time.Second, SharedStorage: "file://" + c.shared}, knobs: c.knobs}
	if c.tune != nil {
		c.tune(&o)
	}
	if c.secure {
		o.Security = SecurityOptions{TokenFile: c.tokens, PeerCredentialFile: c.peer, NodeCredentialFile: c.cred}
	}
	srv, err := New(o)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		srv.Close()
		c.t.Fatal(err)
	}
	c.nodes[id], c.dirs[id] = srv, dir
	return srv
}

// stop closes node id's server.
func (c *iamCluster) stop(id string) {
	if s := c.nodes[id]; s != nil {
		s.Close()
		delete(c.nodes, id)
	}
}

func (c *iamCluster) close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
	for _, conn := range c.conns {
		conn.Close()
	}
	for id := range c.nodes {
		c.stop(id)
	}
}

// dial connects to node id, sending tok (if any) with every call.
func (c *iamCluster) dial(id, tok string) *grpc.ClientConn {
	c.t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if tok != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(tok)))
	}
	conn, err := grpc.NewClient(c.nodes[id].Addr(), opts...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.conns = append(c.conns, conn)
	return conn
}

// data is the official client's table t through node id with tok.
func (c *iamCluster) data(id, tok string) *bigtable.Table {
	c.t.Helper()
	cl, err := bigtable.NewClientWithConfig(context.Background(), testProject, testInstance, bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}},
		option.WithGRPCConn(c.dial(id, tok)), option.WithoutAuthentication())
	if err != nil {
		c.t.Fatal(err)
	}
	c.closers = append(c.closers, cl.Close)
	return cl.Open("t")
}

// instanceAdmin is the official instance admin client through node id
// with tok.
func (c *iamCluster) instanceAdmin(id, tok string) *bigtable.InstanceAdminClient {
	c.t.Helper()
	a, err := bigtable.NewInstanceAdminClient(context.Background(), testProject, option.WithGRPCConn(c.dial(id, tok)), option.WithoutAuthentication())
	if err != nil {
		c.t.Fatal(err)
	}
	c.closers = append(c.closers, a.Close)
	return a
}

// admin is the official admin client through node id with tok.
func (c *iamCluster) admin(id, tok string) *bigtable.AdminClient {
	c.t.Helper()
	a, err := bigtable.NewAdminClient(context.Background(), testProject, testInstance, option.WithGRPCConn(c.dial(id, tok)), option.WithoutAuthentication())
	if err != nil {
		c.t.Fatal(err)
	}
	c.closers = append(c.closers, a.Close)
	return a
}

// tableAdmin is the Table Admin API (IAM calls) through node id with tok.
func (c *iamCluster) tableAdmin(id, tok string) adminpb.BigtableTableAdminClient {
	return adminpb.NewBigtableTableAdminClient(c.dial(id, tok))
}

// createTable creates table t with family f through node id.
func (c *iamCluster) createTable(id, tok string, splits ...string) {
	c.t.Helper()
	if err := c.admin(id, tok).CreateTableFromConf(context.Background(), &bigtable.TableConf{TableID: "t", SplitKeys: splits,
		ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
		c.t.Fatal(err)
	}
}
