package cli

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/ebbtable/ebbtable/server"
	"github.com/spf13/pflag"
)

// securityFlags are serve's flags for TLS, tokens, peers and resource
// bounds (docs/security.md).
type securityFlags struct {
	tlsCert, tlsKey, tlsClientCA, peerCA string
	tokenFile, peerCredFile              string
	metricsOpen, insecure                bool
	peerAllow                            []string

	maxConnections    int
	maxStreamsPerConn uint32
	maxInflight       string
	nodeCredFile      string
	maxChangeStreams  int
	maxRow            string
	memoryLimit       string
}

func (f *securityFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate: serve TLS on --addr and --http-addr, and present it to peers (SIGHUP re-reads it)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert (SIGHUP re-reads it)")
	fl.StringVar(&f.tlsClientCA, "tls-client-ca", "", "PEM CA bundle: require every client and peer to present a certificate it signed (mutual TLS; SIGHUP re-reads it)")
	fl.StringVar(&f.peerCA, "peer-ca", "", "PEM CA bundle peers' certificates are checked against when this process dials them (default --tls-client-ca, else the system's roots; SIGHUP re-reads it)")
	fl.StringVar(&f.tokenFile, "auth-token-file", "", "token file, lines of TOKEN ROLE [INSTANCE...] [as=MEMBER...] (roles viewer, reader, user, admin; IAM members; # comments): every call needs a token (SIGHUP re-reads it)")
	fl.StringVar(&f.peerCredFile, "peer-credential-file", "", "file holding the secret the clusters of an instance present to each other (header x-ebbtable-peer); the only credential for cluster-to-cluster calls")
	fl.StringVar(&f.nodeCredFile, "node-credential-file", "", "file holding the secret the nodes of one cluster (--etcd) present to each other (header x-ebbtable-node) on moves, backups and a peer's pulls; required with --auth-token-file in cluster mode")
	fl.BoolVar(&f.metricsOpen, "metrics-open", false, "leave /metrics open without a token when --auth-token-file is set")
	fl.BoolVar(&f.insecure, "insecure", false, "allow a non-loopback --addr or --http-addr without TLS and tokens (logged as a warning on every start)")
	fl.StringSliceVar(&f.peerAllow, "peer-allow", nil, "peer addresses this process may dial (HOST:PORT, HOST or CIDR, comma-separated); empty: loopback only. The --join address is always allowed")
	fl.IntVar(&f.maxConnections, "max-connections", server.DefaultMaxConnections, "most open connections on --addr; more wait to be accepted")
	fl.Uint32Var(&f.maxStreamsPerConn, "max-streams-per-conn", server.DefaultMaxStreamsPerConn, "most concurrent calls on one connection")
	fl.StringVar(&f.maxInflight, "max-inflight-bytes", "512MiB", "most request bytes of the calls being served; a call beyond gets RESOURCE_EXHAUSTED")
	fl.IntVar(&f.maxChangeStreams, "max-change-streams", server.DefaultMaxChangeStreams, "most open change-stream tails (ReadChangeStream, ebbtable watch); more get RESOURCE_EXHAUSTED")
	fl.StringVar(&f.memoryLimit, "memory-limit", "0", "soft limit on the process's Go memory (as GOMEMLIMIT, which wins when set): the runtime collects harder near it instead of growing the heap --go-gc-percent allows; 0: none")
	fl.StringVar(&f.maxRow, "max-row-bytes", "256MiB", "most cell bytes a read may select from one row; a bigger row fails with FAILED_PRECONDITION saying how to read it in parts")
}

func (f *securityFlags) options() (server.SecurityOptions, error) {
	inflight, err := parseBytes("--max-inflight-bytes", f.maxInflight)
	if err != nil {
		return server.SecurityOptions{}, err
	}
	maxRow, err := parseBytes("--max-row-bytes", f.maxRow)
	if err != nil {
		return server.SecurityOptions{}, err
	}
	if f.memoryLimit != "0" {
		if _, err := parseBytes("--memory-limit", f.memoryLimit); err != nil {
			return server.SecurityOptions{}, err
		}
	}
	if f.maxConnections <= 0 || f.maxStreamsPerConn == 0 || f.maxChangeStreams <= 0 {
		return server.SecurityOptions{}, usagef("--max-connections, --max-streams-per-conn and --max-change-streams must be positive")
	}
	for _, a := range f.peerAllow {
		if strings.TrimSpace(a) == "" {
			return server.SecurityOptions{}, usagef("--peer-allow has an empty entry")
		}
	}
	return server.SecurityOptions{
		TLSCert: f.tlsCert, TLSKey: f.tlsKey, TLSClientCA: f.tlsClientCA, PeerCA: f.peerCA,
		TokenFile: f.tokenFile, PeerCredentialFile: f.peerCredFile, NodeCredentialFile: f.nodeCredFile,
		MetricsOpen: f.metricsOpen, Insecure: f.insecure, PeerAllow: f.peerAllow,
		MaxConnections: f.maxConnections, MaxStreamsPerConn: f.maxStreamsPerConn,
		MaxInflightBytes: inflight, MaxChangeStreams: f.maxChangeStreams, MaxRowBytes: maxRow,
	}, nil
}

// setMemoryLimit applies --memory-limit (validated by options), unless the
// GOMEMLIMIT environment variable is set.
func (f *securityFlags) setMemoryLimit() {
	if f.memoryLimit == "0" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if n, err := parseBytes("--memory-limit", f.memoryLimit); err == nil {
		debug.SetMemoryLimit(n)
	}
}

// parseBytes reads a positive size with a unit (B, KiB, MiB, GiB).
func parseBytes(flag, v string) (int64, error) {
	b, err := parseBallast(v)
	if err != nil || b.Percent != 0 || b.Bytes <= 0 {
		return 0, usagef("%s %q: want a positive size such as 512MiB", flag, v)
	}
	return b.Bytes, nil
}

// reloadOnSIGHUP turns SIGHUP into reload requests until ctx ends.
func reloadOnSIGHUP(ctx context.Context) <-chan struct{} {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP)
	out := make(chan struct{}, 1)
	go func() {
		defer signal.Stop(sig)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out
}
