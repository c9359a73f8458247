package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
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
	// servingCA signs servingCert, the certificate kube-apiserver presents
	// to clients that connect to 127.0.0.1 (--tls-cert-file,
	// --tls-private-key-file). Clients trust servingCA; because the files
	// outlive the apiserver, a restarted apiserver is trusted by the
	// clients of the previous one.
	servingCA   string
	servingCert string
	servingKey  string
	// tokenFile (--token-auth-file) holds adminToken, a bearer token of an
	// admin in system:masters. Like the serving certificate it survives a
	// restart of the apiserver, unlike the apiserver's loopback token.
	tokenFile  string
	adminToken string
}

func ensurePKI(dir string) (pkiFiles, error) {
	p := pkiFiles{
		dir:                  dir,
		serviceAccountKey:    filepath.Join(dir, "sa.key"),
		frontProxyCA:         filepath.Join(dir, "front-proxy-ca.crt"),
		frontProxyClientCert: filepath.Join(dir, "front-proxy-client.crt"),
		frontProxyClientKey:  filepath.Join(dir, "front-proxy-client.key"),
		servingCA:            filepath.Join(dir, "serving-ca.crt"),
		servingCert:          filepath.Join(dir, "serving.crt"),
		servingKey:           filepath.Join(dir, "serving.key"),
		tokenFile:            filepath.Join(dir, "tokens.csv"),
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
	if err := ensureServing(p); err != nil {
		return p, fmt.Errorf("serving certificates: %w", err)
	}
	token, err := ensureAdminToken(p.tokenFile)
	if err != nil {
		return p, fmt.Errorf("admin token: %w", err)
	}
	p.adminToken = token
	return p, nil
}

// ensureServing writes a serving CA and a serving certificate for
// 127.0.0.1 and localhost signed by it, unless all three files exist.
func ensureServing(p pkiFiles) error {
	if exists(p.servingCA) && exists(p.servingCert) && exists(p.servingKey) {
		return nil
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating CA key: %w", err)
	}
	ca, err := cert.NewSelfSignedCACert(cert.Config{CommonName: "kgc-sandbox-serving-ca"}, caKey)
	if err != nil {
		return fmt.Errorf("creating CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating serving key: %w", err)
	}
	der, err := signCert(ca, caKey, key.Public(), "kgc-sandbox-apiserver", x509.ExtKeyUsageServerAuth,
		[]net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"})
	if err != nil {
		return err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return fmt.Errorf("encoding serving key: %w", err)
	}
	if err := writeCert(p.servingCA, ca.Raw); err != nil {
		return err
	}
	if err := writeCert(p.servingCert, der); err != nil {
		return err
	}
	if err := keyutil.WriteKey(p.servingKey, keyPEM); err != nil {
		return fmt.Errorf("writing %s: %w", p.servingKey, err)
	}
	return nil
}

// adminUser is the identity of the admin token, in group system:masters
// (every permission, whatever RBAC says).
const adminUser = "kgc-sandbox-admin"

// ensureAdminToken returns the admin token in path, first writing a new
// random one if the file does not exist. The file has kube-apiserver's
// --token-auth-file format: token,user,uid,"group,...".
func ensureAdminToken(path string) (string, error) {
	if data, err := os.ReadFile(path); err == nil {
		token, _, ok := strings.Cut(string(data), ",")
		if !ok || token == "" {
			return "", fmt.Errorf("%s: no token in %q", path, data)
		}
		return token, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("generating token: %w", err)
	}
	token := hex.EncodeToString(raw)
	line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", token, adminUser, adminUser)
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return token, nil
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
	clientDER, err := signCert(ca, caKey, clientKey.Public(), frontProxyClientName, x509.ExtKeyUsageClientAuth, nil, nil)
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

// signCert issues a certificate for commonName with one extended key usage
// (client or server authentication) and the given subject alternative
// names, valid (like the CA from cert.NewSelfSignedCACert) for ten years,
// with an hour of slack for clock skew.
func signCert(ca *x509.Certificate, caKey crypto.Signer, pub crypto.PublicKey, commonName string,
	usage x509.ExtKeyUsage, ips []net.IP, dnsNames []string) ([]byte, error) {
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
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  ips,
		DNSNames:     dnsNames,
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
