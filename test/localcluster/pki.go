package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// certValidity is long enough for any test run and short enough that a
// forgotten state directory does not hold a long-lived CA.
const certValidity = 30 * 24 * time.Hour

// certSpec describes a certificate that a CA of the cluster signs.
type certSpec struct {
	// name is the file name without extension: name.crt and name.key.
	name         string
	commonName   string
	organization []string
	dnsNames     []string
	ips          []net.IP
	usages       []x509.ExtKeyUsage
}

// pki generates and loads the certificates of the cluster under dir. Every
// file is generated once and reused by later calls to Up.
type pki struct {
	dir string
}

func (p pki) path(name, ext string) string { return filepath.Join(p.dir, name+"."+ext) }

// CertFile is the path of the certificate called name.
func (p pki) CertFile(name string) string { return p.path(name, "crt") }

// KeyFile is the path of the private key called name.
func (p pki) KeyFile(name string) string { return p.path(name, "key") }

// ensureCA creates the self-signed CA called name unless it exists.
func (p pki) ensureCA(name, commonName string) error {
	if exists(p.CertFile(name)) && exists(p.KeyFile(name)) {
		return nil
	}
	key, err := newKey()
	if err != nil {
		return fmt.Errorf("generating the key of CA %s: %w", name, err)
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: commonName}, key)
	if err != nil {
		return fmt.Errorf("self-signing CA %s: %w", name, err)
	}
	return p.write(name, ca, key)
}

// ensureSigned creates the certificate of spec, signed by the CA called
// caName, unless it exists.
func (p pki) ensureSigned(caName string, spec certSpec) error {
	if exists(p.CertFile(spec.name)) && exists(p.KeyFile(spec.name)) {
		return nil
	}
	caCert, caKey, err := p.load(caName)
	if err != nil {
		return err
	}
	key, err := newKey()
	if err != nil {
		return fmt.Errorf("generating the key of %s: %w", spec.name, err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(math.MaxInt64))
	if err != nil {
		return fmt.Errorf("choosing a serial number for %s: %w", spec.name, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.commonName, Organization: spec.organization},
		DNSNames:     spec.dnsNames,
		IPAddresses:  spec.ips,
		NotBefore:    now.Add(-time.Minute).UTC(),
		NotAfter:     now.Add(certValidity).UTC(),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  spec.usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("signing %s with CA %s: %w", spec.name, caName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("parsing the new certificate %s: %w", spec.name, err)
	}
	return p.write(spec.name, cert, key)
}

// ensureKey creates the private key called name unless it exists: the
// service account signing key, which kube-apiserver also verifies with.
func (p pki) ensureKey(name string) error {
	if exists(p.KeyFile(name)) {
		return nil
	}
	key, err := newKey()
	if err != nil {
		return fmt.Errorf("generating key %s: %w", name, err)
	}
	return writeKey(p.KeyFile(name), key)
}

func (p pki) load(name string) (*x509.Certificate, crypto.Signer, error) {
	certs, err := certutil.CertsFromFile(p.CertFile(name))
	if err != nil {
		return nil, nil, fmt.Errorf("reading certificate %s: %w (remove the state directory and run Up again)", p.CertFile(name), err)
	}
	key, err := keyutil.PrivateKeyFromFile(p.KeyFile(name))
	if err != nil {
		return nil, nil, fmt.Errorf("reading private key %s: %w (remove the state directory and run Up again)", p.KeyFile(name), err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("private key %s cannot sign: remove the state directory and run Up again", p.KeyFile(name))
	}
	return certs[0], signer, nil
}

// write writes the key first, so that a certificate file on disk always has
// its key.
func (p pki) write(name string, cert *x509.Certificate, key crypto.Signer) error {
	if err := writeKey(p.KeyFile(name), key); err != nil {
		return err
	}
	certPEM, err := certutil.EncodeCertificates(cert)
	if err != nil {
		return fmt.Errorf("encoding certificate %s: %w", name, err)
	}
	if err := certutil.WriteCert(p.CertFile(name), certPEM); err != nil {
		return fmt.Errorf("writing certificate %s: %w", p.CertFile(name), err)
	}
	return nil
}

func writeKey(path string, key crypto.Signer) error {
	pemBytes, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return fmt.Errorf("encoding private key %s: %w", path, err)
	}
	if err := keyutil.WriteKey(path, pemBytes); err != nil {
		return fmt.Errorf("writing private key %s: %w", path, err)
	}
	return nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}
