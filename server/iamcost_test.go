package server

import (
	"crypto/tls"
	"flag"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/iam"
	"github.com/ebbtable/ebbtable/auth"
)

var iamCost = flag.Bool("iam.cost", false, "TestIAMCost: time point reads with tokens off, tokens on and no policy, and policies on the table and instance")

// TestIAMCost measures what the IAM step costs a point read through the
// official client over TLS, as ratios against a server without tokens
// measured in the same run (docs/security.md). Off unless -iam.cost.
func TestIAMCost(t *testing.T) {
	if !*iamCost {
		t.Skip("-iam.cost not given")
	}
	const n = 3000
	median := func(read func() error) time.Duration {
		d := make([]time.Duration, n)
		for i := range d {
			start := time.Now()
			if err := read(); err != nil {
				t.Fatal(err)
			}
			d[i] = time.Since(start)
		}
		slices.Sort(d)
		return d[n/2]
	}
	// Without tokens.
	certs := newCerts(t, "cost")
	srv := startSecure(t, SecurityOptions{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey})
	c, a := mustClients(t, srv.Addr(), &tls.Config{RootCAs: caPool(t, certs.CA)}, "")
	e := &iamEnv{ctx: t.Context()}
	if err := a.CreateTable(e.ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateColumnFamily(e.ctx, "t1", "f"); err != nil {
		t.Fatal(err)
	}
	m := bigtable.NewMutation()
	m.Set("f", "c", 1000, []byte("v"))
	if err := c.Open("t1").Apply(e.ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	e.data = map[string]*bigtable.Client{"": c}
	median(func() error { return e.read("", "t1") }) // warm up
	off := median(func() error { return e.read("", "t1") })

	s := newIAMEnv(t)
	// The IAM step alone, as the interceptor runs it for a ReadRows.
	alice, err := s.srv.sec.auth.CheckToken(tokAlice, auth.Reader, "cost")
	if err != nil {
		t.Fatal(err)
	}
	req := &btpb.ReadRowsRequest{TableName: tableName("t1")}
	const readRows = "/google.bigtable.v2.Bigtable/ReadRows"
	step := func() error { return s.srv.checkIAM(alice, readRows, req) }
	median(step)
	stepNone := median(step)
	median(func() error { return s.read(tokAlice, "t1") })
	none := median(func() error { return s.read(tokAlice, "t1") })
	s.set(t, s.inst.InstanceIAM(testInstance), map[iam.RoleName][]string{btAdmin: {"user:root@example.com"}, btReader: {"user:bob@example.com"}})
	s.set(t, s.root.TableIAM("t1"), map[iam.RoleName][]string{btAdmin: {"user:root@example.com"}, btReader: {"user:alice@example.com"}})
	pol := median(func() error { return s.read(tokAlice, "t1") })
	stepPol := median(step)
	t.Logf("the IAM step of a ReadRows alone: no policy %v, table and instance policies %v", stepNone, stepPol)
	t.Logf("median point read over TLS, %d reads each: tokens off %v; tokens on, no policy %v (%.2fx); table and instance policies %v (%.2fx)",
		n, off, none, float64(none)/float64(off), pol, float64(pol)/float64(off))
}
