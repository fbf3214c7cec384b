package pki

import (
	"crypto/x509"
	"net"
	"strings"
	"time"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// DefaultRenewalPercent is the share of its validity after which a
// certificate is renewed when no percentage is configured (library-go
// rotates at 80%).
const DefaultRenewalPercent int32 = 80

// Reason says why a certificate must be (re)issued.
type Reason string

// Reasons returned by NeedsRenewal.
const (
	// ReasonMissing: there is no certificate yet.
	ReasonMissing Reason = "Missing"
	// ReasonIssuerChanged: the certificate is not signed by the expected
	// CA, for example after the signer rotated.
	ReasonIssuerChanged Reason = "IssuerChanged"
	// ReasonSubjectChanged: the CommonName or the Organizations differ
	// from the expected user and groups.
	ReasonSubjectChanged Reason = "SubjectChanged"
	// ReasonSANsChanged: the DNS names or IP addresses differ from the
	// expected ones.
	ReasonSANsChanged Reason = "SANsChanged"
	// ReasonKeyAlgorithmChanged: the certificate's key is not of the
	// configured algorithm (spec.certificates.keyAlgorithm changed).
	ReasonKeyAlgorithmChanged Reason = "KeyAlgorithmChanged"
	// ReasonExpiring: the certificate has reached its renewal time.
	ReasonExpiring Reason = "Expiring"
)

// Requirements is what a certificate must still match to be kept.
type Requirements struct {
	// CommonName is the expected subject CN; empty skips the subject check
	// (CommonName and Organization), as for a CA.
	CommonName string
	// Organization are the expected groups, compared as a set.
	Organization []string
	// DNSNames are the expected DNS SANs, compared as a set, ignoring case.
	DNSNames []string
	// IPs are the expected IP SANs, compared as a set by value (an IPv4
	// address in 4-byte and 16-byte form is the same address).
	IPs []net.IP
	// Issuer is the CA that should have signed the certificate; nil skips
	// the check.
	Issuer *x509.Certificate
	// KeyAlgorithm is the expected algorithm of the certificate's key;
	// empty skips the check.
	KeyAlgorithm v1alpha1.KeyAlgorithm
}

// RenewAt is when cert (not nil) is due for renewal: NotBefore plus
// renewalPercent of its validity window. A renewalPercent outside 1..100
// means DefaultRenewalPercent. Controllers can report it as a
// certificate's renewAfter and requeue for it.
func RenewAt(cert *x509.Certificate, renewalPercent int32) time.Time {
	p := time.Duration(renewalPercent)
	if p < 1 || p > 100 {
		p = time.Duration(DefaultRenewalPercent)
	}
	window := cert.NotAfter.Sub(cert.NotBefore)
	// Divide first: a ten-year window in nanoseconds times 100 overflows.
	return cert.NotBefore.Add(window/100*p + window%100*p/100)
}

// NeedsRenewal says whether cert must be issued again, and why: it is
// missing, no longer signed by want.Issuer, its subject, SANs or key
// algorithm differ from want, or now has reached RenewAt(cert,
// renewalPercent). Several reasons may hold; the first in that order is
// returned. The Reason is empty when the certificate can be kept.
func NeedsRenewal(cert *x509.Certificate, now time.Time, renewalPercent int32, want Requirements) (bool, Reason) {
	switch {
	case cert == nil:
		return true, ReasonMissing
	case want.Issuer != nil && cert.CheckSignatureFrom(want.Issuer) != nil:
		return true, ReasonIssuerChanged
	case want.CommonName != "" && (cert.Subject.CommonName != want.CommonName ||
		!sameSet(cert.Subject.Organization, want.Organization, identity)):
		return true, ReasonSubjectChanged
	case !sameSet(cert.DNSNames, want.DNSNames, strings.ToLower) ||
		!sameSet(ipStrings(cert.IPAddresses), ipStrings(want.IPs), identity):
		return true, ReasonSANsChanged
	case want.KeyAlgorithm != "" && KeyAlgorithmOf(cert.PublicKey) != want.KeyAlgorithm:
		return true, ReasonKeyAlgorithmChanged
	case !now.Before(RenewAt(cert, renewalPercent)):
		return true, ReasonExpiring
	}
	return false, ""
}

func identity(s string) string { return s }

// sameSet reports whether a and b hold the same elements once normalized,
// regardless of order and repeats.
func sameSet(a, b []string, normalize func(string) string) bool {
	set := make(map[string]bool, len(a))
	for _, s := range a {
		set[normalize(s)] = true
	}
	other := make(map[string]bool, len(b))
	for _, s := range b {
		n := normalize(s)
		if !set[n] {
			return false
		}
		other[n] = true
	}
	return len(set) == len(other)
}

// ipStrings writes addresses in canonical text form, which is the same for
// the 4-byte and 16-byte forms of an IPv4 address.
func ipStrings(ips []net.IP) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}
