package pki

import (
	"crypto/x509"
	"testing"
	"time"
)

func TestTrustBundle(t *testing.T) {
	oldCA := mustCA(t, "kubernetes", 2*year, now)
	newCA := mustCA(t, "kubernetes", 2*year, now.Add(year))
	newest := mustCA(t, "kubernetes", 2*year, now.Add(18*30*day))
	tests := []struct {
		name string
		at   time.Time
		cas  []*x509.Certificate
		want []*x509.Certificate
	}{
		{name: "one CA", at: now, cas: []*x509.Certificate{oldCA.Cert()}, want: []*x509.Certificate{oldCA.Cert()}},
		{name: "newest first", at: now.Add(18 * 30 * day), cas: []*x509.Certificate{oldCA.Cert(), newest.Cert(), newCA.Cert()}, want: []*x509.Certificate{newest.Cert(), newCA.Cert(), oldCA.Cert()}},
		{name: "duplicates dropped", at: now.Add(year), cas: []*x509.Certificate{newCA.Cert(), oldCA.Cert(), newCA.Cert(), nil, oldCA.Cert()}, want: []*x509.Certificate{newCA.Cert(), oldCA.Cert()}},
		{name: "expired CA pruned", at: now.Add(2*year + time.Second), cas: []*x509.Certificate{oldCA.Cert(), newCA.Cert()}, want: []*x509.Certificate{newCA.Cert()}},
		{name: "still trusted at its last instant", at: oldCA.Cert().NotAfter, cas: []*x509.Certificate{oldCA.Cert(), newCA.Cert()}, want: []*x509.Certificate{newCA.Cert(), oldCA.Cert()}},
		{name: "all expired", at: now.Add(10 * year), cas: []*x509.Certificate{oldCA.Cert(), newCA.Cert()}},
		{name: "none", at: now},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := bundleOf(t, TrustBundle(tt.at, tt.cas...))
			if len(got) != len(tt.want) {
				t.Fatalf("bundle holds %d CAs, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if !got[i].Equal(tt.want[i]) {
					t.Errorf("CA %d is %s (NotBefore %s), want %s (NotBefore %s)", i,
						got[i].Subject.CommonName, got[i].NotBefore, tt.want[i].Subject.CommonName, tt.want[i].NotBefore)
				}
			}
		})
	}
}

// TestTrustBundleOverlap follows a CA rotation as a client sees it: while
// old and new CAs are both in the bundle, leaves of both verify; once the
// old CA expires the bundle drops it and only leaves of the new CA verify.
func TestTrustBundleOverlap(t *testing.T) {
	oldCA := mustCA(t, "kubernetes", 2*year, now)
	rotatedAt := RenewAt(oldCA.Cert(), 80)
	newCA := mustCA(t, "kubernetes", 2*year, rotatedAt)
	oldLeaf := mustCert(t, oldCA, AdminCertConfig(), year, rotatedAt.Add(-day))
	newLeaf := mustCert(t, newCA, AdminCertConfig(), year, rotatedAt)

	during := rotatedAt.Add(30 * day)
	bundle := TrustBundle(during, oldCA.Cert(), newCA.Cert())
	for name, leaf := range map[string]*KeyPair{"old CA's leaf": oldLeaf, "new CA's leaf": newLeaf} {
		if err := verify(t, bundle, leaf.Cert(), during, x509.ExtKeyUsageClientAuth, ""); err != nil {
			t.Errorf("during the overlap, the %s does not verify: %v", name, err)
		}
	}
	if err := verify(t, TrustBundle(during, newCA.Cert()), oldLeaf.Cert(), during, x509.ExtKeyUsageClientAuth, ""); err == nil {
		t.Error("the old CA's leaf verifies against a bundle without the old CA")
	}

	after := oldCA.Cert().NotAfter.Add(time.Minute)
	bundle = TrustBundle(after, oldCA.Cert(), newCA.Cert())
	if got := bundleOf(t, bundle); len(got) != 1 || !got[0].Equal(newCA.Cert()) {
		t.Fatalf("after the old CA expired, the bundle holds %d CAs, want only the new one", len(got))
	}
	if err := verify(t, bundle, newLeaf.Cert(), after, x509.ExtKeyUsageClientAuth, ""); err != nil {
		t.Errorf("after the old CA expired, the new CA's leaf does not verify: %v", err)
	}
}
