package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/auth"
	"github.com/ebbtable/ebbtable/clock"
	"github.com/ebbtable/ebbtable/internal/testkit"
	"github.com/ebbtable/ebbtable/server/ebbadminpb"
	"golang.org/x/oauth2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/credentials/oauth"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Tokens of the test token file, one per role, and one limited to another
// instance.
const (
	tokViewer  = "viewer-token-0123456789"
	tokReader  = "reader-token-0123456789"
	tokUser    = "user-token-0123456789ab"
	tokAdmin   = "admin-token-0123456789a"
	tokOther   = "other-user-token-012345"
	peerSecret = "peer-secret-0123456789ab"
)

var roleTokens = map[auth.Role]string{auth.Viewer: tokViewer, auth.Reader: tokReader, auth.User: tokUser, auth.Admin: tokAdmin}

// securityFiles writes the token file and the peer credential file.
func securityFiles(t *testing.T) (tokens, peer string) {
	t.Helper()
	dir := t.TempDir()
	tokens, peer = filepath.Join(dir, "tokens"), filepath.Join(dir, "peer")
	body := "# test tokens\n" + tokViewer + " viewer\n" + tokReader + " reader\n" + tokUser + " user\n" + tokAdmin + " admin\n" + tokOther + " user other\n"
	if err := os.WriteFile(tokens, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(peer, []byte(peerSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tokens, peer
}

// startSecure starts a server on loopback with the given security options.
func startSecure(t *testing.T, so SecurityOptions, more ...envOption) *Server {
	t.Helper()
	o := Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: t.TempDir(), Clock: clock.Real{}, Security: so}
	for _, f := range more {
		f(&o)
	}
	srv, err := New(o)
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

func plainConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<28), grpc.MaxCallSendMsgSize(1<<28)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// callAny calls a method with an empty request, whatever its types (an
// empty message decodes as any request; the response's fields are kept as
// unknown ones), and reads a stream to its end.
func callAny(ctx context.Context, conn *grpc.ClientConn, method string, m grpc.MethodInfo) error {
	if !m.IsServerStream && !m.IsClientStream {
		return conn.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{})
	}
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: m.IsServerStream, ClientStreams: m.IsClientStream}, method)
	if err != nil {
		return err
	}
	if err := st.SendMsg(&emptypb.Empty{}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	for {
		if err := st.RecvMsg(&emptypb.Empty{}); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func bearerMD(token string) []string { return []string{"authorization", "Bearer " + token} }

// TestEveryMethodIsGuarded goes over every method the server registers (so
// RPCs added later are covered without listing them): with no credentials
// it answers UNAUTHENTICATED, with an unknown token too, with a role one
// short of the method's PERMISSION_DENIED, and the right role (or the peer
// credential for cluster-to-cluster calls) gets past authorization. The
// peer credential opens no client method, and no client token a peer one.
func TestEveryMethodIsGuarded(t *testing.T) {
	t.Parallel()
	tokens, peer := securityFiles(t)
	srv := startSecure(t, SecurityOptions{TokenFile: tokens, PeerCredentialFile: peer})
	conn := plainConn(t, srv.Addr())
	ctx := context.Background()
	n := 0
	for svc, info := range srv.grpc.GetServiceInfo() {
		for _, m := range info.Methods {
			full := "/" + svc + "/" + m.Name
			need := auth.Need(full)
			n++
			call := func(md ...string) codes.Code {
				return status.Code(callAny(metadata.AppendToOutgoingContext(ctx, md...), conn, full, m))
			}
			t.Run(strings.TrimPrefix(full, "/"), func(t *testing.T) {
				if need.Open {
					if got := call(); got == codes.Unauthenticated || got == codes.PermissionDenied {
						t.Fatalf("open method answered %v", got)
					}
					return
				}
				if got := call(); got != codes.Unauthenticated {
					t.Errorf("no credentials: %v, want Unauthenticated", got)
				}
				if got := call(bearerMD("unknown-token-0123456789")...); got != codes.Unauthenticated {
					t.Errorf("unknown token: %v, want Unauthenticated", got)
				}
				right := bearerMD(roleTokens[need.Role])
				switch {
				case need.Role == auth.None: // peer only
					right = []string{auth.PeerHeader, peerSecret}
					if got := call(bearerMD(tokAdmin)...); got != codes.PermissionDenied {
						t.Errorf("admin token on a peer method: %v, want PermissionDenied", got)
					}
					if got := call(auth.PeerHeader, tokAdmin); got != codes.Unauthenticated {
						t.Errorf("a token as the peer credential: %v, want Unauthenticated", got)
					}
				case need.Role > auth.Viewer:
					if got := call(bearerMD(roleTokens[need.Role-1])...); got != codes.PermissionDenied {
						t.Errorf("role %v: %v, want PermissionDenied", need.Role-1, got)
					}
				}
				if !need.Peer {
					if got := call(auth.PeerHeader, peerSecret); got != codes.Unauthenticated {
						t.Errorf("peer credential on a client method: %v, want Unauthenticated", got)
					}
				}
				if got := call(right...); got == codes.Unauthenticated || got == codes.PermissionDenied {
					t.Errorf("right credentials: %v", got)
				}
			})
		}
	}
	if n < 80 {
		t.Fatalf("only %d methods registered", n)
	}
}

// TestTokenLimitedToInstances: a token listing instances may touch those
// only, in unary and streaming calls alike.
func TestTokenLimitedToInstances(t *testing.T) {
	t.Parallel()
	tokens, _ := securityFiles(t)
	srv := startSecure(t, SecurityOptions{TokenFile: tokens})
	raw := btpb.NewBigtableClient(plainConn(t, srv.Addr()))
	ctx := metadata.AppendToOutgoingContext(context.Background(), bearerMD(tokOther)...)
	mut := &btpb.MutateRowRequest{RowKey: []byte("r"), Mutations: []*btpb.Mutation{{Mutation: &btpb.Mutation_DeleteFromRow_{DeleteFromRow: &btpb.Mutation_DeleteFromRow{}}}}}
	mut.TableName = tableName("t")
	if _, err := raw.MutateRow(ctx, mut); status.Code(err) != codes.PermissionDenied {
		t.Errorf("MutateRow on another instance: %v", err)
	}
	mut.TableName = "projects/" + testProject + "/instances/other/tables/t"
	if _, err := raw.MutateRow(ctx, mut); status.Code(err) != codes.NotFound {
		t.Errorf("MutateRow on its own instance: %v, want NotFound (past authorization)", err)
	}
	st, err := raw.ReadRows(ctx, &btpb.ReadRowsRequest{TableName: tableName("t")})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("ReadRows on another instance: %v", err)
	}
	// ListInstances names no instance: not for a limited token.
	var out emptypb.Empty
	if err := plainConn(t, srv.Addr()).Invoke(ctx, "/google.bigtable.admin.v2.BigtableInstanceAdmin/ListInstances", &emptypb.Empty{}, &out); status.Code(err) != codes.PermissionDenied {
		t.Errorf("ListInstances with a limited token: %v", err)
	}
}

// tlsClients connects the official clients to a server with TLS: TLS
// credentials and, when token is set, the token as each call's bearer
// credential. The connection is dialled here and handed to the clients:
// given an endpoint and a token source themselves, they would also ask
// whether they run on Google Cloud (a DNS lookup and a call to the
// metadata server, off this machine), and tests talk to loopback only.
// The data client primes its connection (PingAndWarm), so a refused
// connection or credential fails here.
func tlsClients(t *testing.T, addr string, tlsCfg *tls.Config, token string) (*bigtable.Client, *bigtable.AdminClient, error) {
	t.Helper()
	ctx := context.Background()
	conn := dialTLS(t, addr, tlsCfg, token)
	opts := []option.ClientOption{option.WithGRPCConn(conn), option.WithoutAuthentication()}
	admin, err := bigtable.NewAdminClient(ctx, testProject, testInstance, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	client, err := bigtable.NewClientWithConfig(ctx, testProject, testInstance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, opts...)
	if err != nil {
		return nil, admin, err
	}
	t.Cleanup(func() { client.Close() })
	// Prime the connection as the client does with an endpoint of its own.
	if _, err := btpb.NewBigtableClient(conn).PingAndWarm(ctx, &btpb.PingAndWarmRequest{Name: "projects/" + testProject + "/instances/" + testInstance}); err != nil {
		return nil, admin, err
	}
	return client, admin, nil
}

func mustClients(t *testing.T, addr string, tlsCfg *tls.Config, token string) (*bigtable.Client, *bigtable.AdminClient) {
	t.Helper()
	c, a, err := tlsClients(t, addr, tlsCfg, token)
	if err != nil {
		t.Fatal(err)
	}
	return c, a
}

func caPool(t *testing.T, path string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatal("no CA in", path)
	}
	return pool
}

func newCerts(t *testing.T, prefix string) testkit.Certs {
	t.Helper()
	c, err := testkit.NewCerts(t.TempDir(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestOfficialClientOverTLSWithToken: the official Go client, with an
// endpoint option, TLS credentials and a token source, creates a table,
// writes and reads; a reader token cannot write; no token, no call.
func TestOfficialClientOverTLSWithToken(t *testing.T) {
	t.Parallel()
	certs := newCerts(t, "s")
	tokens, _ := securityFiles(t)
	srv := startSecure(t, SecurityOptions{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey, TokenFile: tokens})
	cfg := &tls.Config{RootCAs: caPool(t, certs.CA)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	client, admin := mustClients(t, srv.Addr(), cfg, tokAdmin)
	if err := admin.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "t", "f"); err != nil {
		t.Fatal(err)
	}
	m := bigtable.NewMutation()
	m.Set("f", "c", 1000, []byte("v"))
	if err := client.Open("t").Apply(ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	readerClient, readerAdmin := mustClients(t, srv.Addr(), cfg, tokReader)
	row, err := readerClient.Open("t").ReadRow(ctx, "r")
	if err != nil || len(row["f"]) != 1 || string(row["f"][0].Value) != "v" {
		t.Fatalf("reader reads %v, %v", row, err)
	}
	if err := readerClient.Open("t").Apply(ctx, "r", m); status.Code(err) != codes.PermissionDenied {
		t.Errorf("reader writes: %v, want PermissionDenied", err)
	}
	if err := readerAdmin.DeleteTable(ctx, "t"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("reader deletes a table: %v, want PermissionDenied", err)
	}
	_, anonAdmin, err := tlsClients(t, srv.Addr(), cfg, "")
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("data client without a token: %v, want Unauthenticated", err)
	}
	if _, err := anonAdmin.Tables(ctx); status.Code(err) != codes.Unauthenticated {
		t.Errorf("admin client without a token: %v, want Unauthenticated", err)
	}
	// A client that does not trust the server's CA cannot connect.
	other := newCerts(t, "o")
	if _, _, err := tlsClients(t, srv.Addr(), &tls.Config{RootCAs: caPool(t, other.CA)}, tokAdmin); status.Code(err) != codes.Unavailable {
		t.Errorf("a client trusting another CA: %v, want Unavailable", err)
	}
}

// TestMutualTLS: with --tls-client-ca, a client must present a certificate
// the CA signed.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	certs := newCerts(t, "m")
	srv := startSecure(t, SecurityOptions{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey, TLSClientCA: certs.CA})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool := caPool(t, certs.CA)
	cert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	_, admin := mustClients(t, srv.Addr(), &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}, "")
	if err := admin.CreateTable(ctx, "t"); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if _, _, err := tlsClients(t, srv.Addr(), &tls.Config{RootCAs: pool}, ""); status.Code(err) != codes.Unavailable || !refusedHandshake(err) {
		t.Errorf("a client without a certificate: %v", err)
	}
	// A certificate another CA signed is refused; after the CA file
	// changes and a reload, it is the one accepted.
	other := newCerts(t, "x")
	otherCert, err := tls.LoadX509KeyPair(other.ClientCert, other.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	handshake := func(c tls.Certificate) error {
		conn, err := tls.Dial("tcp", srv.Addr(), &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{c}, NextProtos: []string{"h2"}})
		if err != nil {
			return err
		}
		defer conn.Close()
		// TLS 1.3: the server's verdict on the client certificate
		// arrives with the first read.
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
			return nil
		}
		if err == nil {
			return nil
		}
		if strings.Contains(err.Error(), "certificate") {
			return err
		}
		return nil // the server's HTTP/2 preface, or its close after it: accepted
	}
	if err := handshake(cert); err != nil {
		t.Fatalf("the CA's own client certificate: %v", err)
	}
	if err := handshake(otherCert); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}
	b, err := os.ReadFile(other.CA)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certs.CA, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := handshake(otherCert); err != nil {
		t.Errorf("after the reload, the new CA's certificate: %v", err)
	}
	if err := handshake(cert); err == nil {
		t.Error("after the reload, the old CA's certificate is still accepted")
	}
}

// TestTLSCertificateReload: Reload (SIGHUP in serve) puts a new
// certificate on new connections.
func TestTLSCertificateReload(t *testing.T) {
	t.Parallel()
	first, second := newCerts(t, "a"), newCerts(t, "b")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	install := func(c testkit.Certs) {
		for src, dst := range map[string]string{c.ServerCert: certFile, c.ServerKey: keyFile} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(first)
	srv := startSecure(t, SecurityOptions{TLSCert: certFile, TLSKey: keyFile})
	handshake := func(ca string) error {
		conn, err := tls.Dial("tcp", srv.Addr(), &tls.Config{RootCAs: caPool(t, ca), NextProtos: []string{"h2"}})
		if err == nil {
			conn.Close()
		}
		return err
	}
	if err := handshake(first.CA); err != nil {
		t.Fatalf("first certificate: %v", err)
	}
	install(second)
	if err := handshake(first.CA); err != nil {
		t.Fatalf("before the reload: %v", err)
	}
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := handshake(second.CA); err != nil {
		t.Errorf("after the reload, the new CA: %v", err)
	}
	if err := handshake(first.CA); err == nil {
		t.Error("after the reload, the old certificate is still served")
	}
	// A broken file keeps the certificate in use.
	if err := os.WriteFile(keyFile, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err == nil {
		t.Error("a broken key reloaded")
	}
	if err := handshake(second.CA); err != nil {
		t.Errorf("after a failed reload: %v", err)
	}
}

// TestJoinRefusedOutsidePeerAllow: a Join naming an address outside
// --peer-allow is refused before anything dials it.
func TestJoinRefusedOutsidePeerAllow(t *testing.T) {
	t.Parallel()
	srv := startSecure(t, SecurityOptions{})
	conn := plainConn(t, srv.Addr())
	_, err := ebbadminpb.NewEbbAdminClient(conn).Join(context.Background(), &ebbadminpb.JoinRequest{Cluster: "evil", Addr: "192.0.2.1:8086"})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "--peer-allow") {
		t.Fatalf("Join to a non-loopback address: %v", err)
	}
	if len(srv.peers.list()) != 0 {
		t.Fatalf("peer registered: %v", srv.peers.list())
	}
}

func TestPeerAllow(t *testing.T) {
	sec := &security{}
	sec.opts.PeerAllow = []string{"10.0.0.0/8", "db.example:9000", "peer.example"}
	sec.allow = append(sec.opts.PeerAllow, "seed.example:1")
	for addr, want := range map[string]bool{
		"10.1.2.3:8086": true, "11.1.2.3:8086": false, "db.example:9000": true, "db.example:9001": false,
		"peer.example:1": true, "seed.example:1": true, "127.0.0.1:8086": false,
	} {
		if got := sec.allowPeer(addr) == nil; got != want {
			t.Errorf("%s: allowed %v, want %v", addr, got, want)
		}
	}
	empty := &security{}
	if empty.allowPeer("127.0.0.1:1") != nil || empty.allowPeer("[::1]:1") != nil || empty.allowPeer("localhost:1") != nil {
		t.Error("loopback refused with an empty --peer-allow")
	}
	if empty.allowPeer("192.0.2.1:1") == nil {
		t.Error("a remote address allowed with an empty --peer-allow")
	}
}

// TestExposedPlaintextRefused: a non-loopback address without TLS and
// tokens is refused unless Insecure, which warns.
func TestExposedPlaintextRefused(t *testing.T) {
	var logs strings.Builder
	o := Options{Addr: "0.0.0.0:8086", HTTPAddr: "off", Logger: slogTo(&logs)}
	if err := checkExposure(&o); err == nil || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("exposed plaintext: %v", err)
	}
	o.HTTPAddr, o.Addr = "0.0.0.0:8087", "127.0.0.1:0"
	if err := checkExposure(&o); err == nil || !strings.Contains(err.Error(), "--http-addr") {
		t.Fatalf("exposed HTTP port: %v", err)
	}
	o.Security.Insecure = true
	if err := checkExposure(&o); err != nil || !strings.Contains(logs.String(), "INSECURE") {
		t.Fatalf("--insecure: %v, logs %q", err, logs.String())
	}
	o.Security = SecurityOptions{TLSCert: "c", TLSKey: "k", TokenFile: "t"}
	if err := checkExposure(&o); err != nil {
		t.Fatalf("TLS and tokens: %v", err)
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:8086", "[::1]:8086"} {
		o := Options{Addr: addr, HTTPAddr: "off", Logger: slogTo(&logs)}
		if err := checkExposure(&o); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// TestPeersOverMutualTLSWithPeerCredential: two clusters with mutual TLS,
// tokens and the peer credential join and replicate; their links use the
// same certificates, and no client token is needed between them.
func TestPeersOverMutualTLSWithPeerCredential(t *testing.T) {
	t.Parallel()
	certs := newCerts(t, "p")
	tokens, peer := securityFiles(t)
	so := SecurityOptions{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey, TLSClientCA: certs.CA, TokenFile: tokens, PeerCredentialFile: peer}
	cluster := func(id, join string) envOption {
		return func(o *Options) { o.ClusterID, o.Join = id, join }
	}
	a := startSecure(t, so, cluster("a", ""))
	cert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: caPool(t, certs.CA), Certificates: []tls.Certificate{cert}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ac, aa := mustClients(t, a.Addr(), cfg, tokAdmin)
	if err := aa.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", ColumnFamilies: map[string]bigtable.Family{"f": {GCPolicy: bigtable.NoGcPolicy()}}}); err != nil {
		t.Fatal(err)
	}
	m := bigtable.NewMutation()
	m.Set("f", "c", 1000, []byte("before"))
	if err := ac.Open("t").Apply(ctx, "r1", m); err != nil {
		t.Fatal(err)
	}
	b := startSecure(t, so, cluster("b", a.Addr()))
	bc, _ := mustClients(t, b.Addr(), cfg, tokReader)
	m2 := bigtable.NewMutation()
	m2.Set("f", "c", 1000, []byte("after"))
	if err := ac.Open("t").Apply(ctx, "r2", m2); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b has both rows", func() (bool, string) {
		n := 0
		err := bc.Open("t").ReadRows(ctx, bigtable.InfiniteRange(""), func(bigtable.Row) bool { n++; return true })
		return err == nil && n == 2, fmt.Sprintf("%d rows, %v", n, err)
	})
}

// TestPeerCredentialRequiredToJoin: a process whose peer credential differs
// cannot join.
func TestPeerCredentialRequiredToJoin(t *testing.T) {
	t.Parallel()
	tokens, peer := securityFiles(t)
	a := startSecure(t, SecurityOptions{TokenFile: tokens, PeerCredentialFile: peer}, func(o *Options) { o.ClusterID = "a" })
	wrong := filepath.Join(t.TempDir(), "peer")
	if err := os.WriteFile(wrong, []byte("another-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: t.TempDir(), ClusterID: "b", Join: a.Addr(),
		Security: SecurityOptions{TokenFile: tokens, PeerCredentialFile: wrong}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Start(); status.Code(errors.Unwrap(err)) != codes.Unauthenticated && !strings.Contains(fmt.Sprint(err), "Unauthenticated") {
		t.Fatalf("join with the wrong peer credential: %v", err)
	}
}

// TestPeerWithAnotherCAIsRefused: a process dialling a peer whose
// certificate its peer CA did not sign does not join.
func TestPeerWithAnotherCAIsRefused(t *testing.T) {
	t.Parallel()
	certs, other := newCerts(t, "q"), newCerts(t, "r")
	a := startSecure(t, SecurityOptions{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey}, func(o *Options) { o.ClusterID = "a" })
	srv, err := New(Options{Addr: "127.0.0.1:0", HTTPAddr: "off", DataDir: t.TempDir(), ClusterID: "b", Join: a.Addr(),
		Security: SecurityOptions{TLSCert: other.ServerCert, TLSKey: other.ServerKey, PeerCA: other.CA}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Start(); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("join through a certificate of another CA: %v", err)
	}
}

// refusedHandshake says whether err is a TLS handshake the server refused
// for want of a client certificate: TLS 1.3 sends that alert after the
// client's first write, which may meet the closed connection instead.
func refusedHandshake(err error) bool {
	for _, s := range []string{"certificate required", "broken pipe", "connection reset by peer"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// dialTLS dials addr with TLS and, when token is set, the token as a
// bearer credential on every call.
func dialTLS(t *testing.T, addr string, tlsCfg *tls.Config, token string) *grpc.ClientConn {
	t.Helper()
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg))}
	if token != "" {
		dopts = append(dopts, grpc.WithPerRPCCredentials(oauth.TokenSource{TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token})}))
	}
	conn, err := grpc.NewClient(addr, dopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
