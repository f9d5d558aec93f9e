package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Certs are PEM files of a throwaway certificate authority and what it
// signed, for TLS tests on loopback.
type Certs struct {
	// CA is the authority's certificate.
	CA string
	// ServerCert and ServerKey name 127.0.0.1, ::1 and localhost; they
	// also serve as a client certificate (peers present them).
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client certificate.
	ClientCert, ClientKey string
}

// NewCerts writes a fresh authority and its certificates under dir, with
// file names starting with prefix.
func NewCerts(dir, prefix string) (Certs, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Certs{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: prefix + " test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Certs{}, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Certs{}, err
	}
	c := Certs{CA: filepath.Join(dir, prefix+"ca.pem")}
	if err := writePEM(c.CA, "CERTIFICATE", caDER); err != nil {
		return Certs{}, err
	}
	issue := func(serial int64, name string, usage x509.ExtKeyUsage, withSANs bool) (string, string, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return "", "", err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage, x509.ExtKeyUsageClientAuth},
		}
		if withSANs {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return "", "", err
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return "", "", err
		}
		cp, kp := filepath.Join(dir, prefix+name+".pem"), filepath.Join(dir, prefix+name+"-key.pem")
		if err := writePEM(cp, "CERTIFICATE", der); err != nil {
			return "", "", err
		}
		return cp, kp, writePEM(kp, "EC PRIVATE KEY", kder)
	}
	if c.ServerCert, c.ServerKey, err = issue(2, "server", x509.ExtKeyUsageServerAuth, true); err != nil {
		return Certs{}, fmt.Errorf("server certificate: %w", err)
	}
	if c.ClientCert, c.ClientKey, err = issue(3, "client", x509.ExtKeyUsageClientAuth, false); err != nil {
		return Certs{}, fmt.Errorf("client certificate: %w", err)
	}
	return c, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
