package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// frontProxyClientName is the common name of the certificate the aggregator
// presents to aggregated API servers; kube-apiserver only trusts request
// headers from clients with this name.
const frontProxyClientName = "front-proxy-client"

// pkiFiles names the key material Start generates. Files that already exist
// (a kept Dir) are reused, so tokens and certificates issued earlier stay
// valid across restarts.
type pkiFiles struct {
	// dir also receives kube-apiserver's self-signed serving certificate,
	// which the apiserver generates there itself.
	dir string
	// serviceAccountKey signs and verifies service account tokens.
	serviceAccountKey string
	// frontProxyCA verifies the aggregator's client certificate
	// (--requestheader-client-ca-file); aggregated servers trust it too.
	frontProxyCA string
	// frontProxyClientCert/Key are the aggregator's client credentials
	// (--proxy-client-cert-file, --proxy-client-key-file).
	frontProxyClientCert string
	frontProxyClientKey  string
}

func ensurePKI(dir string) (pkiFiles, error) {
	p := pkiFiles{
		dir:                  dir,
		serviceAccountKey:    filepath.Join(dir, "sa.key"),
		frontProxyCA:         filepath.Join(dir, "front-proxy-ca.crt"),
		frontProxyClientCert: filepath.Join(dir, "front-proxy-client.crt"),
		frontProxyClientKey:  filepath.Join(dir, "front-proxy-client.key"),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, fmt.Errorf("creating %s: %w", dir, err)
	}
	// LoadOrGenerateKeyFile writes an ECDSA P-256 key with mode 0600 when
	// the file is missing.
	if _, _, err := keyutil.LoadOrGenerateKeyFile(p.serviceAccountKey); err != nil {
		return p, fmt.Errorf("service account key: %w", err)
	}
	if err := ensureFrontProxy(p); err != nil {
		return p, fmt.Errorf("front-proxy certificates: %w", err)
	}
	return p, nil
}

// ensureFrontProxy writes a front-proxy CA and a client certificate signed
// by it, unless all three files already exist. The CA key is not kept: a
// new client certificate comes with a new CA.
func ensureFrontProxy(p pkiFiles) error {
	if exists(p.frontProxyCA) && exists(p.frontProxyClientCert) && exists(p.frontProxyClientKey) {
		return nil
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating CA key: %w", err)
	}
	ca, err := cert.NewSelfSignedCACert(cert.Config{CommonName: "kgc-sandbox-front-proxy-ca"}, caKey)
	if err != nil {
		return fmt.Errorf("creating CA certificate: %w", err)
	}
	clientKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating client key: %w", err)
	}
	clientDER, err := signClientCert(ca, caKey, clientKey.Public(), frontProxyClientName)
	if err != nil {
		return err
	}
	clientKeyPEM, err := keyutil.MarshalPrivateKeyToPEM(clientKey)
	if err != nil {
		return fmt.Errorf("encoding client key: %w", err)
	}
	if err := writeCert(p.frontProxyCA, ca.Raw); err != nil {
		return err
	}
	if err := writeCert(p.frontProxyClientCert, clientDER); err != nil {
		return err
	}
	if err := keyutil.WriteKey(p.frontProxyClientKey, clientKeyPEM); err != nil {
		return fmt.Errorf("writing %s: %w", p.frontProxyClientKey, err)
	}
	return nil
}

// signClientCert issues a client-authentication certificate for commonName,
// valid (like the CA from cert.NewSelfSignedCACert) for ten years, with an
// hour of slack for clock skew.
func signClientCert(ca *x509.Certificate, caKey crypto.Signer, pub crypto.PublicKey, commonName string) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, big.NewInt(math.MaxInt64))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, pub, caKey)
	if err != nil {
		return nil, fmt.Errorf("signing %s certificate: %w", commonName, err)
	}
	return der, nil
}

func writeCert(path string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der})
	if err := cert.WriteCert(path, data); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
