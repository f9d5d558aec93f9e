package auth

import (
	"testing"
)

// TestReadsHeaders: where ReadsHeaders is false, no method's answer depends
// on the call's credentials, so the server may leave the headers unread;
// where any credential is set, it is true.
func TestReadsHeaders(t *testing.T) {
	calls := []Call{{}, {Bearer: tokAdmin}, {Bearer: "unknown"}, {Peer: peerCred}, {Peer: "wrong"}, {Node: "node-0123456789"}, {Node: "wrong"}}
	names := []string{"/unlisted/Method"}
	for m := range methods {
		names = append(names, m)
	}
	off, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if off.ReadsHeaders() {
		t.Fatal("an authenticator with no credentials reads headers")
	}
	for _, m := range names {
		p0, err0 := off.Check(Call{Method: m})
		for _, c := range calls {
			c.Method = m
			p, err := off.Check(c)
			if p != p0 || (err == nil) != (err0 == nil) {
				t.Errorf("%s with %+v: %+v, %v; without credentials %+v, %v", m, c, p, err, p0, err0)
			}
		}
	}
	for _, o := range []Options{{TokenFile: writeTokens(t, tokAdmin+" admin\n")}, {PeerCredential: peerCred}, {NodeCredential: "node-0123456789"}} {
		a, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		if !a.ReadsHeaders() {
			t.Errorf("%+v: ReadsHeaders is false", o)
		}
	}
}
