package pki

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// KeyPair is a certificate and the private key of its public key.
//
// Its fields are unexported so that neither fmt nor encoding/json can print
// the key: formatted with any verb, a KeyPair shows the certificate's
// subject, issuer, serial number, validity and key algorithm, never the key.
// Its methods have value receivers so that this holds for a KeyPair as for a
// *KeyPair. Build one with NewKeyPair, ParseKeyPair or an issuing function;
// the zero KeyPair holds nothing and its methods other than String panic.
type KeyPair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// NewKeyPair pairs a certificate with its private key, and fails if the key
// is not the one the certificate was issued for.
func NewKeyPair(cert *x509.Certificate, key crypto.Signer) (*KeyPair, error) {
	if cert == nil {
		return nil, errors.New("pairing a certificate with its key: no certificate")
	}
	if key == nil {
		return nil, fmt.Errorf("pairing certificate %q with its key: no key", cert.Subject.CommonName)
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		return nil, fmt.Errorf("pairing certificate %q with its key: the private key does not belong to the certificate", cert.Subject.CommonName)
	}
	return &KeyPair{cert: cert, key: key}, nil
}

// ParseKeyPair reads a PEM certificate and a PEM private key (PKCS#1,
// SEC 1 or PKCS#8), as found in the tls.crt and tls.key of a
// kubernetes.io/tls Secret, and checks that they belong together. When
// certPEM holds a chain, its first certificate is the one paired with the
// key.
func ParseKeyPair(certPEM, keyPEM []byte) (*KeyPair, error) {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("parsing the certificate: %w", err)
	}
	parsed, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parsing the private key of certificate %q: %w", certs[0].Subject.CommonName, err)
	}
	key, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("parsing the private key of certificate %q: a %T cannot sign", certs[0].Subject.CommonName, parsed)
	}
	return NewKeyPair(certs[0], key)
}

// Cert returns the certificate.
func (kp KeyPair) Cert() *x509.Certificate { return kp.cert }

// Key returns the private key.
func (kp KeyPair) Key() crypto.Signer { return kp.key }

// CertPEM returns the certificate in PEM, as for tls.crt.
func (kp KeyPair) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: kp.cert.Raw})
}

// KeyPEM returns the private key in PEM (SEC 1 for ECDSA, PKCS#1 for RSA),
// as for tls.key. Store it in a Secret only; never log it.
func (kp KeyPair) KeyPEM() ([]byte, error) {
	out, err := keyutil.MarshalPrivateKeyToPEM(kp.key)
	if err != nil {
		return nil, fmt.Errorf("encoding the private key of certificate %q: %w", kp.cert.Subject.CommonName, err)
	}
	return out, nil
}

// String describes the certificate of the pair without its key.
func (kp KeyPair) String() string {
	if kp.cert == nil {
		return "KeyPair{}"
	}
	return fmt.Sprintf("KeyPair{subject=%q issuer=%q serial=%s notBefore=%s notAfter=%s key=%s}",
		kp.cert.Subject.String(), kp.cert.Issuer.String(), kp.cert.SerialNumber.Text(16),
		kp.cert.NotBefore.UTC().Format("2006-01-02T15:04:05Z"), kp.cert.NotAfter.UTC().Format("2006-01-02T15:04:05Z"),
		keyAlgorithmName(kp.cert.PublicKey))
}

// Format prints String for every verb, %#v and %+v included, so that no
// formatting of a KeyPair can reveal its key.
func (kp KeyPair) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprint(f, kp.String())
}

// keyAlgorithmName names a key's algorithm for humans.
func keyAlgorithmName(pub crypto.PublicKey) string {
	if alg := KeyAlgorithmOf(pub); alg != "" {
		return string(alg)
	}
	return fmt.Sprintf("%T", pub)
}
