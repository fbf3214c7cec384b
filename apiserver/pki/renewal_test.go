package pki

import (
	"crypto/x509"
	"net"
	"testing"
	"time"
)

func TestRenewAt(t *testing.T) {
	start := now
	tests := []struct {
		name     string
		validity time.Duration
		percent  int32
		want     time.Time
	}{
		{name: "80% of a year", validity: 100 * day, percent: 80, want: start.Add(80 * day)},
		{name: "0 means the default 80%", validity: 100 * day, percent: 0, want: start.Add(80 * day)},
		{name: "out of range means the default", validity: 100 * day, percent: 150, want: start.Add(80 * day)},
		{name: "50%", validity: 100 * day, percent: 50, want: start.Add(50 * day)},
		{name: "95% of ten years does not overflow", validity: 3650 * day, percent: 95, want: start.Add(3467*day + 12*time.Hour)},
		{name: "uneven window", validity: 10*time.Hour + 7*time.Nanosecond, percent: 80, want: start.Add(8*time.Hour + 5*time.Nanosecond)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert := &x509.Certificate{NotBefore: start, NotAfter: start.Add(tt.validity)}
			if got := RenewAt(cert, tt.percent); !got.Equal(tt.want) {
				t.Errorf("RenewAt = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestNeedsRenewal(t *testing.T) {
	ca := mustCA(t, "kubernetes", 10*year, now)
	otherCA := mustCA(t, "kubernetes-next", 10*year, now)
	dns := []string{"kubernetes", "kubernetes.default.svc", "api.example.com"}
	ips := []net.IP{net.ParseIP("10.96.0.1"), net.ParseIP("fd00::1")}
	cfg := ServingCertConfig(dns, ips)
	serving := mustCert(t, ca, cfg, 100*day, now)
	admin := mustCert(t, ca, AdminCertConfig(), 100*day, now)
	// The window runs from now-ClockSkew to now+100 days.
	window := 100*day + ClockSkew
	at := func(percent int) time.Time {
		return now.Add(-ClockSkew).Add(window / 100 * time.Duration(percent))
	}
	want := cfg.Requirements(ca.Cert(), "")

	tests := []struct {
		name       string
		cert       *x509.Certificate
		at         time.Time
		percent    int32
		want       Requirements
		wantRenew  bool
		wantReason Reason
	}{
		{name: "missing", cert: nil, at: now, want: want, wantRenew: true, wantReason: ReasonMissing},
		{name: "fresh", cert: serving.Cert(), at: now, want: want},
		{name: "79% of validity", cert: serving.Cert(), at: at(79), want: want},
		{name: "81% of validity", cert: serving.Cert(), at: at(81), want: want, wantRenew: true, wantReason: ReasonExpiring},
		{name: "81% with renewal at 90%", cert: serving.Cert(), at: at(81), percent: 90, want: want},
		{name: "expired", cert: serving.Cert(), at: now.Add(year), want: want, wantRenew: true, wantReason: ReasonExpiring},
		{
			name: "SANs reordered", cert: serving.Cert(), at: now,
			want: ServingCertConfig(
				[]string{"api.example.com", "kubernetes.default.svc", "kubernetes", "kubernetes"},
				[]net.IP{net.ParseIP("fd00::1"), net.IPv4(10, 96, 0, 1).To4()},
			).Requirements(ca.Cert(), ""),
		},
		{
			name: "IPv4 in 16-byte form", cert: serving.Cert(), at: now,
			want: ServingCertConfig(dns, []net.IP{net.IPv4(10, 96, 0, 1).To16(), net.ParseIP("fd00::1")}).Requirements(ca.Cert(), ""),
		},
		{
			name: "DNS names differ only in case", cert: serving.Cert(), at: now,
			want: ServingCertConfig([]string{"Kubernetes", "kubernetes.default.svc", "API.example.com"}, ips).Requirements(ca.Cert(), ""),
		},
		{
			name: "DNS name added", cert: serving.Cert(), at: now,
			want:      ServingCertConfig(append([]string{"api2.example.com"}, dns...), ips).Requirements(ca.Cert(), ""),
			wantRenew: true, wantReason: ReasonSANsChanged,
		},
		{
			name: "DNS name removed", cert: serving.Cert(), at: now,
			want:      ServingCertConfig(dns[:2], ips).Requirements(ca.Cert(), ""),
			wantRenew: true, wantReason: ReasonSANsChanged,
		},
		{
			name: "service IP changed", cert: serving.Cert(), at: now,
			want:      ServingCertConfig(dns, []net.IP{net.ParseIP("10.100.0.1"), net.ParseIP("fd00::1")}).Requirements(ca.Cert(), ""),
			wantRenew: true, wantReason: ReasonSANsChanged,
		},
		{
			name: "signer rotated", cert: serving.Cert(), at: now,
			want:      cfg.Requirements(otherCA.Cert(), ""),
			wantRenew: true, wantReason: ReasonIssuerChanged,
		},
		{
			name: "key algorithm changed", cert: serving.Cert(), at: now,
			want:      cfg.Requirements(ca.Cert(), KeyAlgorithmRSA2048),
			wantRenew: true, wantReason: ReasonKeyAlgorithmChanged,
		},
		{name: "admin certificate as expected", cert: admin.Cert(), at: now, want: AdminCertConfig().Requirements(ca.Cert(), "")},
		{
			name: "groups reordered", cert: admin.Cert(), at: now,
			want: Requirements{CommonName: AdminCommonName, Organization: []string{"system:masters", "system:masters"}},
		},
		{
			name: "groups changed", cert: admin.Cert(), at: now,
			want:      Requirements{CommonName: AdminCommonName, Organization: []string{ClusterAdminsGroup}},
			wantRenew: true, wantReason: ReasonSubjectChanged,
		},
		{
			name: "user changed", cert: admin.Cert(), at: now,
			want:      Requirements{CommonName: "admin", Organization: []string{SystemMastersGroup}},
			wantRenew: true, wantReason: ReasonSubjectChanged,
		},
		{name: "CA checked for expiry only", cert: ca.Cert(), at: now.Add(7 * year)},
		{name: "CA at 81%", cert: ca.Cert(), at: now.Add(8*year + 30*day), wantRenew: true, wantReason: ReasonExpiring},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			renew, reason := NeedsRenewal(tt.cert, tt.at, tt.percent, tt.want)
			if renew != tt.wantRenew || reason != tt.wantReason {
				t.Errorf("NeedsRenewal = %v, %q, want %v, %q", renew, reason, tt.wantRenew, tt.wantReason)
			}
		})
	}
}
