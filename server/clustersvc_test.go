package server

import (
	"context"
	"testing"

	"github.com/ebbtable/ebbtable/server/clusterpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestClusterServiceAlone: ClusterService names the generated service, and
// a node alone (no --etcd) does not serve it: calls answer UNIMPLEMENTED.
func TestClusterServiceAlone(t *testing.T) {
	if ClusterService != clusterpb.Cluster_ServiceDesc.ServiceName {
		t.Fatalf("ClusterService %q, the generated service %q", ClusterService, clusterpb.Cluster_ServiceDesc.ServiceName)
	}
	env := newTestEnv(t)
	conn, err := grpc.NewClient(env.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = clusterpb.NewClusterClient(conn).ListNodes(context.Background(), &clusterpb.ListNodesRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("ListNodes on a node alone: %v, want UNIMPLEMENTED", err)
	}
}
