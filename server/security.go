package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/ebbtable/ebbtable/auth"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// SecurityOptions are TLS, authentication, who peers may be, and the
// resource bounds (docs/security.md).
type SecurityOptions struct {
	// TLSCert and TLSKey are PEM files: with both set, the gRPC port, the
	// HTTP port and peer links use TLS. Reload re-reads them.
	TLSCert, TLSKey string
	// TLSClientCA is a PEM bundle: clients (peers included) must present
	// a certificate it signed (mutual TLS).
	TLSClientCA string
	// PeerCA is the PEM bundle peer certificates are checked against when
	// this process dials a peer; default TLSClientCA, else the system's.
	PeerCA string
	// TokenFile turns on client authentication (see package auth).
	TokenFile string
	// PeerCredentialFile holds the secret clusters of the instance send
	// each other in auth.PeerHeader.
	PeerCredentialFile string
	// NodeCredentialFile holds the secret the nodes of one cluster (scale-
	// out) send each other in auth.NodeHeader; with TokenFile in cluster
	// mode it is required.
	NodeCredentialFile string
	// MetricsOpen leaves /metrics (and only it) open when tokens are on.
	MetricsOpen bool
	// Insecure allows a non-loopback address without TLS and tokens.
	Insecure bool
	// PeerAllow lists the peer addresses this process may dial: HOST:PORT,
	// HOST (any port) or a CIDR. Empty: loopback addresses only. The
	// --join address is always allowed.
	PeerAllow []string
	// Reload, when it receives, re-reads the certificate, the key and the
	// token file.
	Reload <-chan struct{}

	// MaxConnections bounds open client connections on the gRPC port.
	MaxConnections int
	// MaxStreamsPerConn bounds concurrent calls on one connection.
	MaxStreamsPerConn uint32
	// MaxInflightBytes bounds the request bytes of calls being served;
	// a call beyond it fails with RESOURCE_EXHAUSTED.
	MaxInflightBytes int64
	// MaxChangeStreams bounds open change-stream tails (ReadChangeStream
	// and ebbtable's Watch).
	MaxChangeStreams int
	// MaxRowBytes bounds the cell bytes one row of a read may select
	// (table.ReadRequest.MaxRowBytes).
	MaxRowBytes int64
}

// Defaults of the resource bounds.
const (
	DefaultMaxConnections    = 1024
	DefaultMaxStreamsPerConn = 100
	DefaultMaxInflightBytes  = 512 << 20
	DefaultMaxChangeStreams  = 4096
)

func (o *SecurityOptions) ensureDefaults() {
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.MaxStreamsPerConn == 0 {
		o.MaxStreamsPerConn = DefaultMaxStreamsPerConn
	}
	if o.MaxInflightBytes == 0 {
		o.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if o.MaxChangeStreams == 0 {
		o.MaxChangeStreams = DefaultMaxChangeStreams
	}
}

// security is a running server's TLS material, authenticator and bounds.
type security struct {
	opts SecurityOptions
	auth *auth.Authenticator
	cert atomic.Pointer[tls.Certificate]
	// The CA pools: nil pointers when not configured (no client
	// certificates asked for; peers checked against the system's roots).
	clientCA atomic.Pointer[x509.CertPool]
	peerCA   atomic.Pointer[x509.CertPool]
	peerCred string
	nodeCred string
	allow    []string // PeerAllow plus the --join address

	inflight atomic.Int64
	meters   meters
	wire     wireStash   // bulk writes' request bytes (mutaterowswire.go)
	okResps  okResponses // the shared all-OK MutateRows response (mutaterowsresp.go)
	streams  atomic.Int64
	refused  *prometheus.CounterVec
	denied   *prometheus.CounterVec
	// iam checks a request against the IAM policies it meets, once the
	// token allowed it (Server.checkIAM; nil: not checked).
	iam func(ctx context.Context, p auth.Principal, method string, req any) error
	// httpIAM checks an HTTP request needing role need against every IAM
	// policy (Server.consoleIAM; nil: not checked).
	httpIAM func(p auth.Principal, need auth.Role) error
}

func newSecurity(o *Options) (*security, error) {
	so := o.Security
	so.ensureDefaults()
	sec := &security{opts: so, allow: slices.Clone(so.PeerAllow)}
	if o.Join != "" {
		sec.allow = append(sec.allow, o.Join)
	}
	if (so.TLSCert == "") != (so.TLSKey == "") {
		return nil, errors.New("ebbtable: TLS needs both a certificate and a key (--tls-cert, --tls-key)")
	}
	if so.TLSClientCA != "" && so.TLSCert == "" {
		return nil, errors.New("ebbtable: --tls-client-ca needs --tls-cert and --tls-key")
	}
	if err := sec.reloadCert(); err != nil {
		return nil, err
	}
	if err := sec.reloadCAs(); err != nil {
		return nil, err
	}
	var err error
	if so.PeerCredentialFile != "" {
		if sec.peerCred, err = auth.ReadPeerCredential(so.PeerCredentialFile); err != nil {
			return nil, fmt.Errorf("ebbtable: peer credential: %w", err)
		}
	}
	if so.NodeCredentialFile != "" {
		if sec.nodeCred, err = auth.ReadNodeCredential(so.NodeCredentialFile); err != nil {
			return nil, fmt.Errorf("ebbtable: node credential: %w", err)
		}
	}
	if o.Cluster != nil && so.TokenFile != "" && sec.nodeCred == "" {
		// Moves, backups and a peer's pulls need node-to-node calls, and
		// no client token is sent on them.
		return nil, errors.New("ebbtable: cluster mode with --auth-token-file needs --node-credential-file (the secret the nodes of the cluster present to each other)")
	}
	if sec.auth, err = auth.New(auth.Options{TokenFile: so.TokenFile, PeerCredential: sec.peerCred, NodeCredential: sec.nodeCred}); err != nil {
		return nil, err
	}
	if err := checkExposure(o); err != nil {
		return nil, err
	}
	sec.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbtable_requests_refused_total",
		Help: "Calls refused by a resource bound (inflight_bytes, change_streams)."}, []string{"bound"})
	sec.denied = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbtable_auth_refused_total",
		Help: "Calls and HTTP requests refused by authentication (unauthenticated) or authorization (permission_denied)."}, []string{"code"})
	o.Registry.MustRegister(sec.refused, sec.denied,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ebbtable_inflight_request_bytes", Help: "Request bytes of the calls being served."},
			func() float64 { return float64(sec.inflight.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ebbtable_open_change_streams", Help: "Open change-stream tails."},
			func() float64 { return float64(sec.streams.Load()) }))
	return sec, nil
}

func readPool(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ebbtable: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("ebbtable: CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// tlsOn says whether the ports and peer links use TLS.
func (sec *security) tlsOn() bool { return sec.opts.TLSCert != "" }

// reloadCert (re-)reads the certificate and key. New connections get the
// new certificate; open ones keep theirs.
func (sec *security) reloadCert() error {
	if !sec.tlsOn() {
		return nil
	}
	c, err := tls.LoadX509KeyPair(sec.opts.TLSCert, sec.opts.TLSKey)
	if err != nil {
		return fmt.Errorf("ebbtable: TLS certificate: %w", err)
	}
	sec.cert.Store(&c)
	return nil
}

// peerCAFile is the CA bundle peers' certificates are checked against.
func (sec *security) peerCAFile() string {
	if sec.opts.PeerCA != "" {
		return sec.opts.PeerCA
	}
	return sec.opts.TLSClientCA
}

// reloadCAs (re-)reads the client and peer CA bundles; on an error the
// pools in use stay.
func (sec *security) reloadCAs() error {
	client, err := readPool(sec.opts.TLSClientCA)
	if err != nil {
		return err
	}
	peer, err := readPool(sec.peerCAFile())
	if err != nil {
		return err
	}
	if client != nil {
		sec.clientCA.Store(client)
	}
	if peer != nil {
		sec.peerCA.Store(peer)
	}
	return nil
}

// reload re-reads the certificate, the key, the CA bundles and the token
// file; what fails to load keeps its old value.
func (sec *security) reload() error {
	return errors.Join(sec.reloadCert(), sec.reloadCAs(), sec.auth.Reload())
}

// verifyChain checks a certificate chain (leaf first, as sent) against
// roots (nil: the system's) for usage, and for name (a host name or IP)
// when not "".
func verifyChain(raw [][]byte, roots *x509.CertPool, name string, usage x509.ExtKeyUsage) error {
	if len(raw) == 0 {
		return errors.New("ebbtable: no certificate presented")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return fmt.Errorf("ebbtable: certificate: %w", err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: name, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// serverTLS is the TLS configuration of both ports.
func (sec *security) serverTLS() *tls.Config {
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return sec.cert.Load(), nil },
	}
	if sec.opts.TLSClientCA != "" {
		// Verified here rather than through ClientCAs, so a reload
		// reaches new connections.
		cfg.ClientAuth = tls.RequireAnyClientCert
		cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyChain(raw, sec.clientCA.Load(), "", x509.ExtKeyUsageClientAuth)
		}
	}
	return cfg
}

// serverOptions are the gRPC server options security adds.
func (sec *security) serverOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{grpc.MaxConcurrentStreams(sec.opts.MaxStreamsPerConn), grpc.InTapHandle(sec.tap),
		grpc.ForceServerCodecV2(newMeteredCodec(sec))}
	if sec.tlsOn() {
		opts = append(opts, grpc.Creds(credentials.NewTLS(sec.serverTLS())))
	}
	return opts
}

// listen wraps the gRPC listener with the connection bound.
func (sec *security) listen(lis net.Listener) net.Listener {
	return netutil.LimitListener(lis, sec.opts.MaxConnections)
}

// listenHTTP wraps the HTTP listener with TLS, when on.
func (sec *security) listenHTTP(lis net.Listener) net.Listener {
	if !sec.tlsOn() {
		return lis
	}
	cfg := sec.serverTLS()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	return tls.NewListener(lis, cfg)
}

// peerDialOptions are how this process dials the peer at addr: TLS with
// its own certificate (for mutual TLS) when on, and the peer credential.
func (sec *security) peerDialOptions(addr string, maxBytes int) []grpc.DialOption {
	creds := insecure.NewCredentials()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if sec.tlsOn() {
		creds = credentials.NewTLS(&tls.Config{
			MinVersion: tls.VersionTLS12,
			// The peer's chain, and that it names host, are checked in
			// VerifyConnection against the peer CA in use now (a reload
			// reaches new links).
			InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				raw := make([][]byte, len(cs.PeerCertificates))
				for i, c := range cs.PeerCertificates {
					raw[i] = c.Raw
				}
				return verifyChain(raw, sec.peerCA.Load(), host, x509.ExtKeyUsageServerAuth)
			},
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return sec.cert.Load(), nil
			},
		})
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxBytes), grpc.MaxCallSendMsgSize(maxBytes)),
	}
	if sec.peerCred != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(peerCredential{sec.peerCred, sec.tlsOn()}))
	}
	return opts
}

// nodeDialOptions are how this node dials another node of its cluster: as
// a peer (TLS, its certificate, the peer credential), plus the node
// credential.
func (sec *security) nodeDialOptions(addr string, maxBytes int) []grpc.DialOption {
	opts := sec.peerDialOptions(addr, maxBytes)
	if sec.nodeCred != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(nodeCredential{sec.nodeCred, sec.tlsOn()}))
	}
	return opts
}

// nodeCredential sends the node credential in auth.NodeHeader.
type nodeCredential struct {
	secret string
	tls    bool
}

func (p nodeCredential) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{auth.NodeHeader: p.secret}, nil
}

// RequireTransportSecurity: as peerCredential's.
func (p nodeCredential) RequireTransportSecurity() bool { return p.tls }

// peerCredential sends the peer credential in auth.PeerHeader.
type peerCredential struct {
	secret string
	tls    bool
}

func (p peerCredential) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{auth.PeerHeader: p.secret}, nil
}

// RequireTransportSecurity: on a plaintext link (loopback, or --insecure)
// the credential still goes, in the clear; docs/security.md says so.
func (p peerCredential) RequireTransportSecurity() bool { return p.tls }

// allowPeer says whether this process may dial addr as a peer.
func (sec *security) allowPeer(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: peer address %q: %v", errInvalid, addr, err)
	}
	if len(sec.opts.PeerAllow) == 0 && loopbackHost(host) {
		return nil
	}
	ip := net.ParseIP(host)
	for _, a := range sec.allow {
		switch {
		case a == addr, a == host:
			return nil
		case strings.Contains(a, "/") && ip != nil:
			if _, n, err := net.ParseCIDR(a); err == nil && n.Contains(ip) {
				return nil
			}
		}
	}
	return status.Errorf(codes.PermissionDenied, "ebbtable: peer address %s is not in --peer-allow (%s); add it there to let this cluster dial it", addr, allowList(sec.opts.PeerAllow))
}

func allowList(l []string) string {
	if len(l) == 0 {
		return "empty: loopback addresses only"
	}
	return strings.Join(l, ", ")
}

// loopbackHost says whether host names only this machine.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	if host == "" {
		return false
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// checkExposure refuses to listen beyond loopback without TLS and tokens,
// unless Insecure; with Insecure it warns on every start.
func checkExposure(o *Options) error {
	so := o.Security
	protected := so.TLSCert != "" && so.TokenFile != ""
	for _, a := range []struct{ flag, addr string }{{"--addr", o.Addr}, {"--http-addr", o.HTTPAddr}} {
		if a.addr == "off" || a.addr == "" {
			continue
		}
		host, _, err := net.SplitHostPort(a.addr)
		if err != nil || loopbackHost(host) || protected {
			continue
		}
		if !so.Insecure {
			return fmt.Errorf("ebbtable: refusing to listen on %s (%s) without TLS and tokens: anyone who reaches it could read, write and delete everything. Give --tls-cert, --tls-key and --auth-token-file (docs/security.md), listen on a loopback address, or add --insecure to accept the risk", a.addr, a.flag)
		}
		o.Logger.Warn("INSECURE: listening beyond loopback without TLS and tokens (--insecure); anyone who reaches this port can call every RPC", "flag", a.flag, "addr", a.addr,
			"tls", so.TLSCert != "", "tokens", so.TokenFile != "")
	}
	return nil
}

// ---- gRPC interceptors ----

// authError maps auth's errors to the codes Bigtable gives.
func (sec *security) authError(err error) error {
	code, label := codes.PermissionDenied, "permission_denied"
	if errors.Is(err, auth.ErrUnauthenticated) {
		code, label = codes.Unauthenticated, "unauthenticated"
	}
	sec.denied.WithLabelValues(label).Inc()
	return status.Error(code, err.Error())
}

// credentialsOf reads the bearer token and the peer credential from the
// call's metadata, when the authenticator looks at them: a lookup of a
// header the call lacks walks all of the call's headers.
func (sec *security) credentialsOf(ctx context.Context, method string) auth.Call {
	// Read by key: FromIncomingContext would copy the whole header map.
	c := auth.Call{Method: method}
	if !sec.auth.ReadsHeaders() {
		return c
	}
	for _, v := range metadata.ValueFromIncomingContext(ctx, "authorization") {
		if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			c.Bearer = strings.TrimSpace(v[7:])
		}
	}
	if v := metadata.ValueFromIncomingContext(ctx, auth.PeerHeader); len(v) > 0 {
		c.Peer = v[0]
	}
	if v := metadata.ValueFromIncomingContext(ctx, auth.NodeHeader); len(v) > 0 {
		c.Node = v[0]
	}
	return c
}

// serveUnary runs the security steps of a unary call and then h: the
// token, the request's bytes in flight (n and tooMuch from admit, which
// the interceptor ran first), a limited token's instances, IAM. The
// principal goes into the context only when there is one (principalOf
// reads the zero principal from a context without it).
func (sec *security) serveUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler, tooMuch error) (any, error) {
	p, err := sec.auth.Check(sec.credentialsOf(ctx, info.FullMethod))
	if err != nil {
		return nil, sec.authError(err)
	}
	if tooMuch != nil {
		return nil, tooMuch
	}
	// The request's names are walked only for a token limited to some
	// instances: not on every call of an open server.
	if p.Limited() {
		if err := p.AllowsInstance(info.FullMethod, instancesOf(req)); err != nil {
			return nil, sec.authError(err)
		}
	}
	if err := sec.checkIAM(ctx, p, info.FullMethod, req); err != nil {
		return nil, err
	}
	if p != (auth.Principal{}) {
		ctx = withPrincipal(ctx, p)
	}
	return h(ctx, req)
}

// serveStream runs the security steps of a streaming call and then h: the
// token, the change-stream bound, and per received request its bytes in
// flight, a limited token's instances and IAM (guardedStream).
func (sec *security) serveStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	p, err := sec.auth.Check(sec.credentialsOf(ss.Context(), info.FullMethod))
	if err != nil {
		return sec.authError(err)
	}
	if isTail(info.FullMethod) {
		if sec.streams.Add(1) > int64(sec.opts.MaxChangeStreams) {
			sec.streams.Add(-1)
			sec.refused.WithLabelValues("change_streams").Inc()
			return status.Errorf(codes.ResourceExhausted, "ebbtable: %d change streams are open, the most --max-change-streams allows; close one or raise the bound", sec.opts.MaxChangeStreams)
		}
		defer sec.streams.Add(-1)
	}
	w := &guardedStream{ServerStream: ss, sec: sec, p: p, method: info.FullMethod}
	defer func() {
		sec.inflight.Add(-w.held)
		if w.bulk != nil {
			// The bytes of a call refused before its handler took them.
			if wire := sec.wire.take(w.bulk); wire != nil {
				wire.release()
			}
		}
	}()
	return h(srv, w)
}

// isTail says whether a method is a change-stream tail: a call that stays
// open.
func isTail(method string) bool {
	return method == "/google.bigtable.v2.Bigtable/ReadChangeStream" || method == MethodWatch
}

// guardedStream checks the instances each received request names, and
// counts its bytes in flight until the call ends.
type guardedStream struct {
	grpc.ServerStream
	sec    *security
	p      auth.Principal
	method string
	held   int64
	bulk   *btpb.MutateRowsRequest // the MutateRows request received, if any
}

func (g *guardedStream) RecvMsg(m any) error {
	if err := g.ServerStream.RecvMsg(m); err != nil {
		// The codec may have taken m (counted its bytes in flight, kept a
		// bulk write's bytes and gRPC's buffer) before the receive
		// failed: a call of one request reads once more, for the end of
		// its requests, which fails when the client sends another or goes
		// away. The call's end gives them back.
		if mt, ok := g.sec.meters.take(m); ok {
			g.held += mt.n
		}
		if r, ok := m.(*btpb.MutateRowsRequest); ok {
			g.bulk = r
		}
		return err
	}
	n, err := g.sec.admit(m)
	g.held += n
	if r, ok := m.(*btpb.MutateRowsRequest); ok {
		g.bulk = r
	}
	if err != nil {
		return err
	}
	if g.p.Limited() {
		if err := g.p.AllowsInstance(g.method, instancesOf(m)); err != nil {
			return g.sec.authError(err)
		}
	}
	return g.sec.checkIAM(g.ServerStream.Context(), g.p, g.method, m)
}

// checkIAM runs the IAM step: a denial is counted and answers
// PERMISSION_DENIED; a failure to read the policies keeps its own status.
func (sec *security) checkIAM(ctx context.Context, p auth.Principal, method string, req any) error {
	if sec.iam == nil || p.Token == nil {
		return nil
	}
	err := sec.iam(ctx, p, method, req)
	if errors.Is(err, auth.ErrDenied) {
		return sec.authError(err)
	}
	return err
}

// tap runs when a call's headers arrive, before gRPC reads its request:
// while the request bytes in flight are at the bound, a new call is refused
// before its body is buffered (health checks excepted). The interceptors
// count the request once it is read (acquire). It also marks a call that
// carries none of ebbtable's own headers (markPlainCall).
func (sec *security) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if cur := sec.inflight.Load(); cur >= sec.opts.MaxInflightBytes && !strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.Health/") {
		sec.refused.WithLabelValues("inflight_bytes").Inc()
		return ctx, status.Errorf(codes.ResourceExhausted, "ebbtable: %d request bytes are in flight, the most --max-inflight-bytes allows; retry later", cur)
	}
	return markPlainCall(ctx, info.Header), nil
}

// acquire counts n request bytes in flight, or refuses the call when that
// would pass the bound.
func (sec *security) acquire(n int64) error {
	limit := sec.opts.MaxInflightBytes
	for {
		cur := sec.inflight.Load()
		if cur+n > limit {
			sec.refused.WithLabelValues("inflight_bytes").Inc()
			return status.Errorf(codes.ResourceExhausted, "ebbtable: %d request bytes are in flight and this request's %d would pass --max-inflight-bytes %d; retry later", cur, n, limit)
		}
		if sec.inflight.CompareAndSwap(cur, cur+n) {
			return nil
		}
	}
}

// tryAcquire counts n more bytes in flight when that stays within the
// bound, and reports whether it did; refusing counts no refusal.
func (sec *security) tryAcquire(n int64) bool {
	for {
		cur := sec.inflight.Load()
		if cur+n > sec.opts.MaxInflightBytes {
			return false
		}
		if sec.inflight.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// ---- HTTP ----

// httpHandler puts the tokens in front of the whole HTTP mux (metrics,
// health, the web console): /healthz and /readyz stay open, /metrics needs
// viewer (or nothing with MetricsOpen), GET and HEAD elsewhere reader,
// anything else admin; where IAM policies exist, the token must be granted
// on every resource they govern (Server.consoleIAM). The token comes as `Authorization: Bearer TOKEN`, or
// as the password of HTTP basic authentication (what a browser prompts
// for). Tokens limited to some instances are refused: the HTTP port shows
// every instance.
func (sec *security) httpHandler(next http.Handler) http.Handler {
	if !sec.auth.TokensOn() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		need := auth.Reader
		switch {
		case r.URL.Path == "/healthz" || r.URL.Path == "/readyz":
			next.ServeHTTP(w, r)
			return
		case r.URL.Path == "/metrics":
			if sec.opts.MetricsOpen {
				next.ServeHTTP(w, r)
				return
			}
			need = auth.Viewer
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			need = auth.Admin
		}
		bearer := ""
		if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
			bearer = strings.TrimSpace(h[7:])
		} else if _, pw, ok := r.BasicAuth(); ok {
			bearer = pw
		}
		p, err := sec.auth.CheckToken(bearer, need, r.Method+" "+r.URL.Path)
		if err == nil && p.Token != nil && !p.Token.Unrestricted() {
			err = fmt.Errorf("%w: the HTTP port shows every instance; the token (line %d) is limited to some", auth.ErrDenied, p.Token.Line)
		}
		if err == nil && p.Token != nil && r.URL.Path != "/metrics" && sec.httpIAM != nil {
			err = sec.httpIAM(p, need)
		}
		if err != nil {
			if errors.Is(err, auth.ErrUnauthenticated) {
				sec.denied.WithLabelValues("unauthenticated").Inc()
				w.Header().Set("WWW-Authenticate", `Basic realm="ebbtable", charset="UTF-8"`)
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
			sec.denied.WithLabelValues("permission_denied").Inc()
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		if bearer != "" {
			// What the console asks of other nodes (its change tail's
			// partitions) carries the caller's token, as a forwarded
			// call does (consolechanges.go).
			r = r.WithContext(metadata.NewIncomingContext(r.Context(), metadata.Pairs("authorization", "Bearer "+bearer)))
		}
		next.ServeHTTP(w, r)
	})
}

// watchReload re-reads the certificate, key and token file each time
// SecurityOptions.Reload receives (the serve command feeds it SIGHUP).
func (s *Server) watchReload() {
	for {
		select {
		case <-s.stopping:
			return
		case _, ok := <-s.opts.Security.Reload:
			if !ok {
				return
			}
			if err := s.Reload(); err != nil {
				s.log.Error("reload failed; the old certificate and tokens stay", "err", err)
				continue
			}
			s.log.Info("reloaded", "tls", s.sec.tlsOn(), "tokens", s.sec.auth.TokensOn())
		}
	}
}

// Reload re-reads the TLS certificate and key and the token file. What fails
// to load keeps its old value.
func (s *Server) Reload() error { return s.sec.reload() }
