package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/internal/testkit"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A table created while no node holds its lease (every lease lapsed at
// once, as on a machine starved for longer than the TTL) waits for a node
// to register again and is placed on it, rather than failing with "no
// live node to place tablets on": the official clients do not retry a
// CreateTable that answered UNAVAILABLE.
func TestCreateTableWaitsForALiveNode(t *testing.T) {
	t.Parallel()
	sc := startScaleCluster(t, "n1")
	n1 := sc.nodes["n1"]
	m := n1.srv.ClusterMember()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{sc.etcd}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var waited atomic.Bool
	sc.knobs.takersWait.set(func(string) { waited.Store(true) })
	// n1 registers again within a third of the TTL of losing its lease; a
	// create that comes after that has nothing to wait for, so the lease
	// is revoked again until one create found no live node and waited.
	for try := 0; try < 5 && !waited.Load(); try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cli.Revoke(ctx, clientv3.LeaseID(m.LeaseID()))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "n1 to see no live node", 10*time.Second, func() (bool, string) {
			return len(m.Nodes()) == 0, ""
		})
		id := fmt.Sprintf("g%d", try)
		conf := &bigtable.TableConf{TableID: id, SplitKeys: []string{"g"}, ColumnFamilies: map[string]bigtable.Family{"f": {}}}
		if err := n1.admin.CreateTableFromConf(context.Background(), conf); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		if err := writeScale(t, n1.client.Open(id), "r", "v"); err != nil {
			t.Fatal(err)
		}
	}
	if !waited.Load() {
		t.Fatal("no create found every lease lapsed in 5 tries: the wait was never exercised")
	}
}
