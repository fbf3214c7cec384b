package pki

import (
	"net"
	"testing"
	"time"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// BenchmarkFullPKI measures generating the whole PKI of one control plane:
// cluster CA, serving certificate, kubelet client certificate, front-proxy
// CA and client certificate, service-account key, admin certificate and
// kubeconfig, all PEM-encoded.
func BenchmarkFullPKI(b *testing.B) {
	dnsNames := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "api.example.com"}
	ips := []net.IP{net.ParseIP("10.96.0.1"), net.ParseIP("192.0.2.10")}
	for _, alg := range []v1alpha1.KeyAlgorithm{KeyAlgorithmECDSAP256, KeyAlgorithmRSA2048} {
		b.Run(string(alg), func(b *testing.B) {
			for b.Loop() {
				if err := fullPKI(alg, dnsNames, ips); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func fullPKI(alg v1alpha1.KeyAlgorithm, dnsNames []string, ips []net.IP) error {
	ca, err := NewSelfSignedCA("kubernetes", alg, 10*year, now)
	if err != nil {
		return err
	}
	frontProxyCA, err := NewSelfSignedCA("front-proxy-ca", alg, 10*year, now)
	if err != nil {
		return err
	}
	leaves := []struct {
		ca  *KeyPair
		cfg CertConfig
	}{
		{ca, ServingCertConfig(dnsNames, ips)},
		{ca, KubeletClientCertConfig()},
		{frontProxyCA, FrontProxyClientCertConfig()},
		{ca, AdminCertConfig()},
	}
	var admin *KeyPair
	for _, leaf := range leaves {
		kp, err := NewSignedCert(leaf.ca, leaf.cfg, alg, year, now)
		if err != nil {
			return err
		}
		if _, err := kp.KeyPEM(); err != nil {
			return err
		}
		admin = kp
	}
	sa, err := NewServiceAccountKey(alg)
	if err != nil {
		return err
	}
	if _, err := sa.PrivateKeyPEM(); err != nil {
		return err
	}
	if _, err := sa.PublicKeyPEM(); err != nil {
		return err
	}
	adminKey, err := admin.KeyPEM()
	if err != nil {
		return err
	}
	_, err = AdminKubeconfig("tenant", "https://api.example.com:6443", TrustBundle(now, ca.Cert()), admin.CertPEM(), adminKey)
	return err
}

// BenchmarkCredential measures answering one AdminCredentialRequest, or
// renewing one admin kubeconfig: a key, a certificate signed by the
// tenant's CA and the kubeconfig around them.
func BenchmarkCredential(b *testing.B) {
	for _, alg := range []v1alpha1.KeyAlgorithm{KeyAlgorithmECDSAP256, KeyAlgorithmRSA2048} {
		b.Run(string(alg), func(b *testing.B) {
			ca, err := NewSelfSignedCA("kubernetes", alg, 10*year, now)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, _, err := Credential(ca, "tenant", "https://tenant.example.com:443", ca.CertPEM(), "alice", []string{"platform:oncall"}, alg, time.Hour, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
