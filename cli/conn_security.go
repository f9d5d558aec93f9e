package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// connSecurity are the client flags for a server run with TLS or tokens
// (docs/security.md).
type connSecurity struct {
	tls        bool
	caFile     string
	certFile   string
	keyFile    string
	serverName string
	tokenFile  string
}

// register adds the TLS and token flags.
func (f *connSecurity) register(cmd *cobra.Command) {
	fl := cmd.PersistentFlags()
	fl.BoolVar(&f.tls, "tls", false, "connect with TLS, checking the server's certificate against the system's roots (see --tls-ca)")
	fl.StringVar(&f.caFile, "tls-ca", "", "connect with TLS, checking the server's certificate against this PEM bundle (default $EBBTABLE_TLS_CA)")
	fl.StringVar(&f.certFile, "tls-cert", "", "client certificate (PEM) for a server that requires mutual TLS")
	fl.StringVar(&f.keyFile, "tls-key", "", "the client certificate's key (PEM)")
	fl.StringVar(&f.serverName, "tls-server-name", "", "the name the server's certificate must carry (default: the host of --addr)")
	fl.StringVar(&f.tokenFile, "token-file", "", "file whose first line is the bearer token to send (default $EBBTABLE_TOKEN, the token itself)")
}

// dialOptions are the transport and per-call credentials these flags ask
// for: plaintext with no token by default, as the emulator is dialled.
func (f *connSecurity) dialOptions(addr string) ([]grpc.DialOption, error) {
	ca := f.caFile
	if ca == "" {
		ca = os.Getenv("EBBTABLE_TLS_CA")
	}
	var opts []grpc.DialOption
	secure := f.tls || ca != "" || f.certFile != ""
	if secure {
		cfg, err := f.tlsConfig(ca)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	token, err := f.token()
	if err != nil {
		return nil, err
	}
	if token != "" {
		host, _, _ := net.SplitHostPort(addr)
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: token, needTLS: !loopback(host)}))
	}
	return opts, nil
}

func (f *connSecurity) tlsConfig(ca string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.serverName}
	if ca != "" {
		b, err := os.ReadFile(ca)
		if err != nil {
			return nil, usagef("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, usagef("--tls-ca %s holds no PEM certificate", ca)
		}
		cfg.RootCAs = pool
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return nil, usagef("--tls-cert and --tls-key go together")
	}
	if f.certFile != "" {
		c, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
		if err != nil {
			return nil, usagef("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

// token is the bearer token from --token-file or $EBBTABLE_TOKEN.
func (f *connSecurity) token() (string, error) {
	if f.tokenFile == "" {
		return strings.TrimSpace(os.Getenv("EBBTABLE_TOKEN")), nil
	}
	b, err := os.ReadFile(f.tokenFile)
	if err != nil {
		return "", usagef("--token-file: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if line = strings.TrimSpace(line); line == "" {
		return "", usagef("--token-file %s: the first line is empty", f.tokenFile)
	}
	return line, nil
}

// bearer sends `authorization: Bearer TOKEN` on every call. Beyond
// loopback it insists on TLS, so a token never crosses a network in the
// clear.
type bearer struct {
	token   string
	needTLS bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.needTLS }

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
