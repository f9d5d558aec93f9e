package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/ebbtable/ebbtable/auth"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestScaleOutIAMMove: IAM policies a node kept on its own disk are
// copied into etcd when it starts in cluster mode, once: an instance
// policy set on a node serving alone is enforced through another node
// once that directory joins the cluster; a table policy a cluster node
// kept in its metadata (as before cluster-wide IAM) is copied when it
// starts again, not again after etcd's is dropped, and not at all if the
// table was made again while the node was down.
func TestScaleOutIAMMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newIAMCluster(t, true, "n1", "n2")
	c.createTable("n1", tokAdmin)
	if err := writeScale(t, c.data("n1", tokAdmin), "r", "v"); err != nil {
		t.Fatal(err)
	}
	bind := func(role string, toks ...string) *iampb.Binding {
		b := &iampb.Binding{Role: role}
		for _, tk := range toks {
			b.Members = append(b.Members, auth.TokenMember(tk))
		}
		return b
	}
	policyOf := func(id, res string) *iampb.Policy {
		t.Helper()
		p, err := c.tableAdmin(id, tokAdmin).GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: res})
		if err != nil {
			t.Fatalf("policy of %s through %s: %v", res, id, err)
		}
		return p
	}
	userN1, readerN1 := c.data("n1", tokUser), c.data("n1", tokReader)

	// A directory that served alone, with an instance policy.
	alone := filepath.Join(c.dir, "alone")
	srv, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: alone,
		Security: SecurityOptions{TokenFile: c.tokens, PeerCredentialFile: c.peer}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		srv.Close()
		t.Fatal(err)
	}
	c.nodes["alone"] = srv
	if _, err := c.tableAdmin("alone", tokAdmin).SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: scaleInstance, Policy: &iampb.Policy{
		Bindings: []*iampb.Binding{bind("roles/bigtable.admin", tokAdmin), bind("roles/bigtable.reader", tokReader)}}}); err != nil {
		t.Fatal(err)
	}
	c.stop("alone")
	if _, err := userN1.ReadRow(ctx, "r"); err != nil {
		t.Fatalf("user read with no policy in the cluster: %v", err)
	}

	// It joins as n3: its instance policy is the cluster's, enforced by n1.
	c.start("n3", alone)
	if p := policyOf("n1", scaleInstance); len(p.GetBindings()) != 2 {
		t.Fatalf("instance policy through n1 after n3 joined: %v", p)
	}
	eventually(t, "n1 to refuse the user token (the instance policy binds the reader only)", func() (bool, string) {
		_, err := userN1.ReadRow(ctx, "r")
		return status.Code(err) == codes.PermissionDenied, fmt.Sprint(err)
	})
	if _, err := readerN1.ReadRow(ctx, "r"); err != nil {
		t.Fatalf("reader through n1: %v", err)
	}

	// A table policy in n2's metadata, as a node kept it before
	// cluster-wide IAM: copied when n2 starts again on a directory not
	// yet moved.
	n2dir := c.dirs["n2"]
	local, _ := proto.Marshal(&iampb.Policy{Etag: []byte("local"), Bindings: []*iampb.Binding{bind("roles/bigtable.admin", tokAdmin), bind("roles/bigtable.user", tokUser)}})
	if err := c.nodes["n2"].putMeta(kindIAM, testInstanceName, "tables/t", local); err != nil {
		t.Fatal(err)
	}
	if p := policyOf("n1", scaleTable); len(p.GetBindings()) != 0 {
		t.Fatalf("table policy through n1 before n2 restarts: %v", p)
	}
	restartN2 := func(moved bool) {
		t.Helper()
		c.stop("n2")
		if !moved {
			if err := os.Remove(filepath.Join(n2dir, clusterIAMMovedFile)); err != nil {
				t.Fatal(err)
			}
		}
		c.start("n2", n2dir)
	}
	restartN2(false)
	if p := policyOf("n1", scaleTable); string(p.GetEtag()) != "local" {
		t.Fatalf("table policy through n1 after n2 restarted: %v, want n2's", p)
	}
	eventually(t, "n1 to pass the user token (the table policy binds it)", func() (bool, string) {
		_, err := userN1.ReadRow(ctx, "r")
		return err == nil, fmt.Sprint(err)
	})

	// Once: dropped from etcd, it is not copied again.
	if err := c.nodes["n1"].dropClusterIAM(scaleTable); err != nil {
		t.Fatal(err)
	}
	restartN2(true)
	if p := policyOf("n1", scaleTable); len(p.GetBindings()) != 0 {
		t.Fatalf("table policy through n1 after n2 restarted on a moved directory: %v", p)
	}

	// Not onto a table made again while n2 was down.
	c.stop("n2")
	if err := os.Remove(filepath.Join(n2dir, clusterIAMMovedFile)); err != nil {
		t.Fatal(err)
	}
	a := c.admin("n1", tokAdmin)
	if err := a.DeleteTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	c.createTable("n1", tokAdmin)
	c.start("n2", n2dir)
	if p := policyOf("n1", scaleTable); len(p.GetBindings()) != 0 {
		t.Fatalf("policy of a table made again while n2 was down, after n2 started: %v", p)
	}
}
