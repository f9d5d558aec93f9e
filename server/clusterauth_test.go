package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/ebbtable/ebbtable/auth"
	"github.com/ebbtable/ebbtable/server/clusterpb"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// bearer sends a token on a plaintext loopback link (tests only).
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// TestClusterNodeCredential: with tokens on, the nodes of a cluster
// authenticate to each other with the node credential. Forwarded data
// calls carry the client's token; a move ships its span to a node that
// holds the same node credential, and a node with another one refuses it
// (UNAUTHENTICATED). The Cluster service's node methods take the node
// credential or an admin token, never the peer credential another cluster
// holds; a node's part of a peer's pull takes the node credential. Cluster
// mode with tokens and no node credential does not start.
func TestClusterNodeCredential(t *testing.T) {
	t.Parallel()
	tokens, peer := securityFiles(t)
	dir := t.TempDir()
	node, other := filepath.Join(dir, "node"), filepath.Join(dir, "other")
	const nodeSecret, otherSecret = "node-secret-0123456789abc", "other-node-secret-0123456"
	for p, v := range map[string]string{node: nodeSecret, other: otherSecret} {
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	etcd, prefix := sharedEtcd.Start(t)
	shared := t.TempDir()
	start := func(id, cred string) *Server {
		t.Helper()
		srv, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: filepath.Join(dir, id),
			Security: SecurityOptions{TokenFile: tokens, PeerCredentialFile: peer, NodeCredentialFile: cred},
			Cluster:  &ClusterOptions{Etcd: []string{etcd}, Prefix: prefix, NodeID: id, LeaseTTL: 2 * time.Second, SharedStorage: "file://" + shared}})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			srv.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		return srv
	}
	if _, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: filepath.Join(dir, "bare"),
		Security: SecurityOptions{TokenFile: tokens, PeerCredentialFile: peer},
		Cluster:  &ClusterOptions{Etcd: []string{etcd}, Prefix: prefix, NodeID: "bare"}}); err == nil || !strings.Contains(err.Error(), "--node-credential-file") {
		t.Fatalf("cluster mode with tokens and no node credential: %v", err)
	}
	n1, n2, n3 := start("n1", node), start("n2", node), start("n3", other)
	eventually(t, "three nodes", func() (bool, string) { return len(n1.ClusterMember().Nodes()) == 3, "" })

	conn, err := grpc.NewClient(n1.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearer(tokAdmin)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	opts := []option.ClientOption{option.WithGRPCConn(conn), option.WithoutAuthentication()}
	admin, err := bigtable.NewAdminClient(ctx, testProject, testInstance, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	client, err := bigtable.NewClientWithConfig(ctx, testProject, testInstance, bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: []string{"g", "n", "t"},
		ColumnFamilies: map[string]bigtable.Family{"f": {}}}); err != nil {
		t.Fatal(err)
	}
	ops := clusterpb.NewClusterClient(conn)
	tabs, err := ops.ListTablets(ctx, &clusterpb.ListTabletsRequest{Table: scaleTable})
	if err != nil {
		t.Fatal(err)
	}
	// Writes through n1 reach every owner with the client's token.
	for _, l := range letters() {
		if err := writeScale(t, client.Open("t"), l, "v-"+l); err != nil {
			t.Fatalf("write %s through n1: %v", l, err)
		}
	}
	var onN1 *clusterpb.Tablet
	for _, tb := range tabs.Tablets {
		if tb.Owner == "n1" {
			onN1 = tb
		}
	}
	if onN1 == nil {
		t.Fatalf("n1 owns no tablet: %+v", tabs.Tablets)
	}
	// n3 holds another node credential: it refuses n1's span.
	_, err = ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: onN1.Id, To: "n3"})
	if c := status.Code(err); c != codes.Unauthenticated && c != codes.PermissionDenied {
		t.Fatalf("move to a node with another node credential: %v, want UNAUTHENTICATED", err)
	}
	// n2 holds the same one: the move goes through.
	if _, err := ops.MoveTablet(ctx, &clusterpb.MoveTabletRequest{Table: scaleTable, Tablet: onN1.Id, To: "n2"}); err != nil {
		t.Fatalf("move to n2: %v", err)
	}
	for _, l := range letters() {
		row, err := client.Open("t").ReadRow(ctx, l)
		if err != nil || len(row["f"]) != 1 || string(row["f"][0].Value) != "v-"+l {
			t.Fatalf("read %s after the move: %v %v", l, row, err)
		}
	}

	// The node methods, called directly on n2.
	raw, err := grpc.NewClient(n2.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ingest := func(md ...string) codes.Code {
		_, err := clusterpb.NewClusterClient(raw).IngestSpan(metadata.AppendToOutgoingContext(ctx, md...), &clusterpb.IngestSpanRequest{Table: scaleTable})
		return status.Code(err)
	}
	for _, c := range []struct {
		name string
		md   []string
		want codes.Code
	}{
		{"no credentials", nil, codes.Unauthenticated},
		{"the peer credential (another cluster)", []string{auth.PeerHeader, peerSecret}, codes.Unauthenticated},
		{"another node credential", []string{auth.NodeHeader, otherSecret}, codes.Unauthenticated},
		{"a user token", bearerMD(tokUser), codes.PermissionDenied},
	} {
		if got := ingest(c.md...); got != c.want {
			t.Errorf("IngestSpan with %s: %v, want %v", c.name, got, c.want)
		}
	}
	if got := ingest(auth.NodeHeader, nodeSecret); got == codes.Unauthenticated || got == codes.PermissionDenied {
		t.Errorf("IngestSpan with the node credential: %v", got)
	}
	pull := func(md ...string) codes.Code {
		md = append(md, metaReplLocal, "1")
		_, err := ebbadminpb.NewEbbAdminClient(raw).Pull(metadata.AppendToOutgoingContext(ctx, md...), &ebbadminpb.PullRequest{Cluster: "x"})
		return status.Code(err)
	}
	if got := pull(); got != codes.Unauthenticated {
		t.Errorf("a node's part of a pull without credentials: %v", got)
	}
	if got := pull(auth.NodeHeader, otherSecret); got != codes.Unauthenticated {
		t.Errorf("a node's part of a pull with another node credential: %v", got)
	}
	if got := pull(auth.NodeHeader, nodeSecret); got == codes.Unauthenticated || got == codes.PermissionDenied {
		t.Errorf("a node's part of a pull with the node credential: %v", got)
	}
	_ = n3
}
