package server

import (
	"context"
	"testing"
	"time"

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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(m.LeaseID())); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "n1 to see no live node", 10*time.Second, func() (bool, string) {
		return len(m.Nodes()) == 0, ""
	})
	sc.createTable(t, "n1", "g")
	if err := writeScale(t, n1.client.Open("t"), "r", "v"); err != nil {
		t.Fatal(err)
	}
}
