package pki

import (
	"crypto/x509"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// now is the fixed clock of the tests.
var now = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

const (
	day  = 24 * time.Hour
	year = 365 * day
)

func mustCA(t testing.TB, name string, validity time.Duration, at time.Time) *KeyPair {
	t.Helper()
	ca, err := NewSelfSignedCA(name, "", validity, at)
	if err != nil {
		t.Fatalf("issuing CA %s: %v", name, err)
	}
	return ca
}

func mustCert(t testing.TB, ca *KeyPair, cfg CertConfig, validity time.Duration, at time.Time) *KeyPair {
	t.Helper()
	kp, err := NewSignedCert(ca, cfg, "", validity, at)
	if err != nil {
		t.Fatalf("issuing %s: %v", cfg.CommonName, err)
	}
	return kp
}

// verify checks leaf against the CAs of a PEM bundle at a time, for a
// usage and optionally a host name.
func verify(t testing.TB, bundle []byte, leaf *x509.Certificate, at time.Time, usage x509.ExtKeyUsage, host string) error {
	t.Helper()
	roots := x509.NewCertPool()
	if len(bundle) > 0 {
		var err error
		if roots, err = certutil.NewPoolFromBytes(bundle); err != nil {
			t.Fatalf("reading the CA bundle: %v", err)
		}
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:       roots,
		CurrentTime: at,
		DNSName:     host,
		KeyUsages:   []x509.ExtKeyUsage{usage},
	})
	return err
}

func bundleOf(t testing.TB, pemBytes []byte) []*x509.Certificate {
	t.Helper()
	if len(pemBytes) == 0 {
		return nil
	}
	certs, err := certutil.ParseCertsPEM(pemBytes)
	if err != nil {
		t.Fatalf("parsing bundle: %v", err)
	}
	return certs
}
