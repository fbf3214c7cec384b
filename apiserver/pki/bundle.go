package pki

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// TrustBundle encodes the CAs to trust at now as a PEM bundle: every CA not
// yet expired, each once, newest (latest NotBefore) first. Expired CAs are
// pruned. This is how library-go rotates a signer: old and new CAs are
// trusted side by side until the old one expires or is dropped, so that a
// certificate signed by either verifies during the overlap. Nil entries are
// ignored; the result is empty when no CA remains.
func TrustBundle(now time.Time, cas ...*x509.Certificate) []byte {
	kept := make([]*x509.Certificate, 0, len(cas))
	for _, ca := range cas {
		if ca == nil || now.After(ca.NotAfter) {
			continue
		}
		if slices.ContainsFunc(kept, func(c *x509.Certificate) bool { return c.Equal(ca) }) {
			continue
		}
		kept = append(kept, ca)
	}
	slices.SortStableFunc(kept, func(a, b *x509.Certificate) int {
		if c := b.NotBefore.Compare(a.NotBefore); c != 0 {
			return c
		}
		if c := b.NotAfter.Compare(a.NotAfter); c != 0 {
			return c
		}
		return bytes.Compare(a.Raw, b.Raw)
	})
	var buf bytes.Buffer
	for _, ca := range kept {
		buf.Write(pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: ca.Raw}))
	}
	return buf.Bytes()
}

// CATrust is the bundle of a CA that signs now: signer, next (the CA that
// signs once a rotation switches; nil outside one) and, while keepPrevious,
// every CA the bundle trusted before, each until it expires. keepPrevious
// holds while a rotation still trusts the CA it replaces, and always for a
// CA the operator does not rotate (a user's own CA that the user swaps).
// It is the one place a CA bundle is composed.
func CATrust(now time.Time, signer, next *x509.Certificate, previous []*x509.Certificate, keepPrevious bool) []byte {
	trusted := []*x509.Certificate{signer, next}
	if keepPrevious {
		trusted = append(trusted, previous...)
	}
	return TrustBundle(now, trusted...)
}
