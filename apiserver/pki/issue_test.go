package pki

import (
	"crypto/x509"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

func TestNewSelfSignedCA(t *testing.T) {
	tests := []struct {
		alg          v1alpha1.KeyAlgorithm
		wantKeyUsage x509.KeyUsage
	}{
		{alg: KeyAlgorithmECDSAP256, wantKeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature},
		{alg: KeyAlgorithmRSA2048, wantKeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment},
	}
	for _, tt := range tests {
		t.Run(string(tt.alg), func(t *testing.T) {
			ca, err := NewSelfSignedCA("kubernetes", tt.alg, 10*year, now)
			if err != nil {
				t.Fatal(err)
			}
			c := ca.Cert()
			if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
				t.Errorf("basic constraints: CA=%v valid=%v maxPathLen=%d zero=%v, want CA:true, pathlen:0",
					c.IsCA, c.BasicConstraintsValid, c.MaxPathLen, c.MaxPathLenZero)
			}
			if c.KeyUsage != tt.wantKeyUsage {
				t.Errorf("KeyUsage = %b, want %b", c.KeyUsage, tt.wantKeyUsage)
			}
			if len(c.SubjectKeyId) == 0 {
				t.Error("no SubjectKeyId")
			}
			if want := "kubernetes@" + "1772366400"; c.Subject.CommonName != want {
				t.Errorf("CommonName = %q, want %q", c.Subject.CommonName, want)
			}
			if !c.NotBefore.Equal(now.Add(-5*time.Minute)) || !c.NotAfter.Equal(now.Add(10*year)) {
				t.Errorf("validity %s..%s, want %s..%s", c.NotBefore, c.NotAfter, now.Add(-5*time.Minute), now.Add(10*year))
			}
			if err := c.CheckSignatureFrom(c); err != nil {
				t.Errorf("not self-signed: %v", err)
			}
			// A leaf certificate signed by the CA verifies; a CA under it
			// would break pathlen 0, which Verify enforces.
			leaf := mustCert(t, ca, AdminCertConfig(), year, now)
			if err := verify(t, TrustBundle(now, c), leaf.Cert(), now, x509.ExtKeyUsageClientAuth, ""); err != nil {
				t.Errorf("leaf does not verify: %v", err)
			}
		})
	}
}

func TestNewSelfSignedCARejects(t *testing.T) {
	if _, err := NewSelfSignedCA("kubernetes", "DSA", year, now); err == nil || !strings.Contains(err.Error(), `"DSA"`) {
		t.Errorf("unknown algorithm: error = %v, want one naming DSA", err)
	}
	if _, err := NewSelfSignedCA("kubernetes", "", 0, now); err == nil {
		t.Error("zero validity: no error")
	}
	if _, err := NewSelfSignedCA("", "", year, now); err == nil {
		t.Error("no name: no error")
	}
}

func TestServingCertificate(t *testing.T) {
	dnsNames := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "api.example.com", "*.apps.example.com"}
	ips := []net.IP{net.ParseIP("10.96.0.1"), net.ParseIP("fd00:10:96::1"), net.IPv4(192, 0, 2, 10)}
	for _, alg := range []v1alpha1.KeyAlgorithm{KeyAlgorithmECDSAP256, KeyAlgorithmRSA2048} {
		t.Run(string(alg), func(t *testing.T) {
			ca, err := NewSelfSignedCA("kubernetes", alg, 10*year, now)
			if err != nil {
				t.Fatal(err)
			}
			serving, err := NewSignedCert(ca, ServingCertConfig(dnsNames, ips), alg, year, now)
			if err != nil {
				t.Fatal(err)
			}
			bundle := TrustBundle(now, ca.Cert())
			hosts := []string{"kubernetes", "kubernetes.default.svc.cluster.local", "api.example.com", "console.apps.example.com", "10.96.0.1", "fd00:10:96::1", "192.0.2.10"}
			for _, host := range hosts {
				if err := verify(t, bundle, serving.Cert(), now, x509.ExtKeyUsageServerAuth, host); err != nil {
					t.Errorf("serving certificate does not verify for %s: %v", host, err)
				}
			}
			for _, host := range []string{"evil.example.com", "10.96.0.2", "kubernetes.default.svc.cluster.remote"} {
				if err := verify(t, bundle, serving.Cert(), now, x509.ExtKeyUsageServerAuth, host); err == nil {
					t.Errorf("serving certificate verifies for %s, which is not among its names", host)
				}
			}
			if err := verify(t, bundle, serving.Cert(), now, x509.ExtKeyUsageClientAuth, ""); err == nil {
				t.Error("the serving certificate verifies as a client certificate")
			}
			if !slices.Equal(serving.Cert().AuthorityKeyId, ca.Cert().SubjectKeyId) {
				t.Error("AuthorityKeyId is not the CA's SubjectKeyId")
			}
			if serving.Cert().IsCA {
				t.Error("the serving certificate is a CA")
			}
			if got := KeyAlgorithmOf(serving.Cert().PublicKey); got != alg {
				t.Errorf("key algorithm %s, want %s", got, alg)
			}
			if !serving.Cert().NotBefore.Equal(now.Add(-ClockSkew)) {
				t.Errorf("NotBefore %s is not backdated by %s", serving.Cert().NotBefore, ClockSkew)
			}
			if serving.Cert().SerialNumber.Sign() <= 0 || serving.Cert().SerialNumber.BitLen() > 128 {
				t.Errorf("serial %s is not a positive 128-bit number", serving.Cert().SerialNumber)
			}
		})
	}
}

func TestClientCertificates(t *testing.T) {
	clusterCA := mustCA(t, "kubernetes", 10*year, now)
	frontProxyCA := mustCA(t, "front-proxy-ca", 10*year, now)
	tests := []struct {
		name       string
		ca         *KeyPair
		cfg        CertConfig
		wantUser   string
		wantGroups []string
	}{
		{name: "kubelet client", ca: clusterCA, cfg: KubeletClientCertConfig(), wantUser: "kube-apiserver-kubelet-client", wantGroups: []string{"kubeadm:cluster-admins"}},
		{name: "front-proxy client", ca: frontProxyCA, cfg: FrontProxyClientCertConfig(), wantUser: "front-proxy-client"},
		{name: "admin", ca: clusterCA, cfg: AdminCertConfig(), wantUser: "kubernetes-admin", wantGroups: []string{"system:masters"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kp := mustCert(t, tt.ca, tt.cfg, year, now)
			c := kp.Cert()
			if c.Subject.CommonName != tt.wantUser || !slices.Equal(c.Subject.Organization, tt.wantGroups) {
				t.Errorf("user %q groups %q, want %q %q", c.Subject.CommonName, c.Subject.Organization, tt.wantUser, tt.wantGroups)
			}
			bundle := TrustBundle(now, tt.ca.Cert())
			if err := verify(t, bundle, c, now, x509.ExtKeyUsageClientAuth, ""); err != nil {
				t.Errorf("does not verify as a client certificate: %v", err)
			}
			if err := verify(t, bundle, c, now, x509.ExtKeyUsageServerAuth, ""); err == nil {
				t.Error("a client certificate verifies for server authentication")
			}
			if len(c.DNSNames)+len(c.IPAddresses) != 0 {
				t.Errorf("a client certificate has SANs %v %v", c.DNSNames, c.IPAddresses)
			}
		})
	}
	t.Run("front-proxy client is not trusted by the cluster CA", func(t *testing.T) {
		kp := mustCert(t, frontProxyCA, FrontProxyClientCertConfig(), year, now)
		if err := verify(t, TrustBundle(now, clusterCA.Cert()), kp.Cert(), now, x509.ExtKeyUsageClientAuth, ""); err == nil {
			t.Error("the front-proxy client certificate verifies against the cluster CA: it would authenticate as a user")
		}
	})
}

// TestEtcdClientCertificate issues the etcd client certificate from an
// etcd CA a user supplies as PEM, as in a kubernetes.io/tls Secret.
func TestEtcdClientCertificate(t *testing.T) {
	userCA, err := NewSelfSignedCA("etcd-ca", KeyAlgorithmRSA2048, 5*year, now.Add(-year))
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := userCA.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	etcdCA, err := ParseKeyPair(userCA.CertPEM(), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	client, err := NewSignedCert(etcdCA, EtcdClientCertConfig(), KeyAlgorithmECDSAP256, year, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(t, userCA.CertPEM(), client.Cert(), now, x509.ExtKeyUsageClientAuth, ""); err != nil {
		t.Errorf("etcd client certificate does not verify against the user's etcd CA: %v", err)
	}
	if client.Cert().Subject.CommonName != EtcdClientCommonName {
		t.Errorf("CommonName %q, want %q", client.Cert().Subject.CommonName, EtcdClientCommonName)
	}
}

func TestNewSignedCertValidity(t *testing.T) {
	ca := mustCA(t, "kubernetes", 2*year, now)
	tests := []struct {
		name         string
		validity     time.Duration
		at           time.Time
		wantNotAfter time.Time
	}{
		{name: "within the CA's life", validity: year, at: now, wantNotAfter: now.Add(year)},
		{name: "clamped to the CA's NotAfter", validity: year, at: now.Add(18 * 30 * day), wantNotAfter: ca.Cert().NotAfter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kp := mustCert(t, ca, AdminCertConfig(), tt.validity, tt.at)
			if !kp.Cert().NotAfter.Equal(tt.wantNotAfter) {
				t.Errorf("NotAfter = %s, want %s", kp.Cert().NotAfter, tt.wantNotAfter)
			}
			if !kp.Cert().NotBefore.Equal(tt.at.Add(-ClockSkew)) {
				t.Errorf("NotBefore = %s, want %s", kp.Cert().NotBefore, tt.at.Add(-ClockSkew))
			}
		})
	}
}

func TestNewSignedCertRejects(t *testing.T) {
	ca := mustCA(t, "kubernetes", year, now)
	leaf := mustCert(t, ca, AdminCertConfig(), day, now)
	tests := []struct {
		name     string
		ca       *KeyPair
		cfg      CertConfig
		alg      v1alpha1.KeyAlgorithm
		validity time.Duration
		at       time.Time
		wantErr  string
	}{
		{name: "no CA", cfg: AdminCertConfig(), validity: day, at: now, wantErr: "no CA"},
		{name: "signer is not a CA", ca: leaf, cfg: AdminCertConfig(), validity: day, at: now, wantErr: "is not a CA"},
		{name: "CA expired", ca: ca, cfg: AdminCertConfig(), validity: day, at: now.Add(2 * year), wantErr: "expired"},
		{name: "unknown algorithm", ca: ca, cfg: AdminCertConfig(), alg: "RSA1024", validity: day, at: now, wantErr: `"RSA1024"`},
		{name: "no validity", ca: ca, cfg: AdminCertConfig(), at: now, wantErr: "not positive"},
		{name: "no CommonName", ca: ca, cfg: CertConfig{}, validity: day, at: now, wantErr: "no CommonName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewSignedCert(tt.ca, tt.cfg, tt.alg, tt.validity, tt.at)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestSplitSANs(t *testing.T) {
	dns, ips := SplitSANs([]string{"api.example.com", "10.0.0.1", "*.example.com", "fd00::1"})
	if !slices.Equal(dns, []string{"api.example.com", "*.example.com"}) {
		t.Errorf("DNS names %v", dns)
	}
	if len(ips) != 2 || !ips[0].Equal(net.IPv4(10, 0, 0, 1)) || ips[1].String() != "fd00::1" {
		t.Errorf("IPs %v", ips)
	}
}
