package auth

import (
	"errors"
	"testing"
)

// TestNodeCredential: the node credential opens the methods the nodes of
// a cluster call on each other and nothing else; the peer credential no
// longer opens them; a wrong node credential is unauthenticated.
func TestNodeCredential(t *testing.T) {
	const nodeCred = "node-credential-0123456789"
	a, err := New(Options{TokenFile: writeTokens(t, tokAdmin+" admin\n"+tokReader+" reader\n"), PeerCredential: peerCred, NodeCredential: nodeCred})
	if err != nil {
		t.Fatal(err)
	}
	const ingest = "/ebbtable.cluster.v1.Cluster/IngestSpan"
	const pull = "/ebbtable.admin.v1.EbbAdmin/Pull"
	const join = "/ebbtable.admin.v1.EbbAdmin/Join"
	const read = "/google.bigtable.v2.Bigtable/ReadRows"
	for _, c := range []struct {
		call Call
		want error
	}{
		{Call{Method: ingest, Node: nodeCred}, nil},
		{Call{Method: ingest, Bearer: tokAdmin}, nil},
		{Call{Method: ingest, Peer: peerCred}, ErrUnauthenticated},
		{Call{Method: ingest, Node: "wrong-credential-0123456789"}, ErrUnauthenticated},
		{Call{Method: ingest, Bearer: tokReader}, ErrDenied},
		{Call{Method: ingest}, ErrUnauthenticated},
		{Call{Method: pull, Node: nodeCred}, nil},
		{Call{Method: pull, Peer: peerCred}, nil},
		{Call{Method: join, Node: nodeCred}, ErrUnauthenticated},
		{Call{Method: read, Node: nodeCred}, ErrUnauthenticated},
		{Call{Method: read, Node: nodeCred, Bearer: tokReader}, nil},
	} {
		p, err := a.Check(c.call)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s node=%q peer=%q bearer=%q: %v, want %v", c.call.Method, c.call.Node, c.call.Peer, c.call.Bearer, err, c.want)
		}
		if err == nil && c.call.Node != "" && c.call.Bearer == "" && !p.Node {
			t.Errorf("%s: principal %+v, want a node", c.call.Method, p)
		}
	}
}
