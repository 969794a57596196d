package cluster

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

// TLSFiles are the PEM files of a cluster run with Options.TLS, under
// <dir>/tls: one CA, the certificate every node presents to clients and to
// the other nodes' routes (for 127.0.0.1 and localhost), and the client
// certificate every skein process and test client presents (tls.conf
// verifies both sides).
type TLSFiles struct {
	CA         string `json:"ca"`
	NodeCert   string `json:"nodeCert"`
	NodeKey    string `json:"nodeKey"`
	ClientCert string `json:"clientCert"`
	ClientKey  string `json:"clientKey"`
}

// writeTLS makes a CA and the node and client certificates under dir, each
// valid for a day.
func writeTLS(dir string) (*TLSFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f := &TLSFiles{
		CA:         filepath.Join(dir, "ca.pem"),
		NodeCert:   filepath.Join(dir, "node.pem"),
		NodeKey:    filepath.Join(dir, "node-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "skein cluster test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	if err := writePEM(f.CA, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	leaf := func(name string, usage []x509.ExtKeyUsage, certFile, keyFile string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(keyFile, "PRIVATE KEY", keyDER)
	}
	// A node is a server to clients and to the routes others dial, and a
	// client of the routes it dials.
	if err := leaf("skein node", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, f.NodeCert, f.NodeKey); err != nil {
		return nil, fmt.Errorf("node certificate: %w", err)
	}
	if err := leaf("skein client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, f.ClientCert, f.ClientKey); err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	return f, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// nodeTLSEnv is what tls.conf reads from a node's environment.
func (f *TLSFiles) nodeTLSEnv() []string {
	if f == nil {
		return nil
	}
	return []string{"NATS_TLS_CERT=" + f.NodeCert, "NATS_TLS_KEY=" + f.NodeKey, "NATS_TLS_CA=" + f.CA}
}

// skeinArgs are the flags of skein serve and skein provision that make
// their connections TLS ones, with the client certificate.
func (f *TLSFiles) skeinArgs() []string {
	if f == nil {
		return nil
	}
	return []string{"--nats-tls-ca=" + f.CA, "--nats-tls-cert=" + f.ClientCert, "--nats-tls-key=" + f.ClientKey}
}

// nodeConf is the configuration file the nodes run: node.conf, or
// node-tls.conf (node.conf and tls.conf) with TLS.
func (f *TLSFiles) nodeConf() string {
	if f == nil {
		return "node.conf"
	}
	return "node-tls.conf"
}

// scheme is the scheme of the cluster's client URLs.
func (f *TLSFiles) scheme() string {
	if f == nil {
		return "nats"
	}
	return "tls"
}
