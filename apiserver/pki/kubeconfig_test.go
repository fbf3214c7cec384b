package pki

import (
	"crypto/x509"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// TestAdminKubeconfig loads the kubeconfig as kubectl would and checks that
// it reaches the server with a certificate of the admin user that the
// cluster CA trusts.
func TestAdminKubeconfig(t *testing.T) {
	for _, alg := range []v1alpha1.KeyAlgorithm{KeyAlgorithmECDSAP256, KeyAlgorithmRSA2048} {
		t.Run(string(alg), func(t *testing.T) {
			ca, err := NewSelfSignedCA("kubernetes", alg, 10*year, now)
			if err != nil {
				t.Fatal(err)
			}
			admin, err := NewSignedCert(ca, AdminCertConfig(), alg, year, now)
			if err != nil {
				t.Fatal(err)
			}
			keyPEM, err := admin.KeyPEM()
			if err != nil {
				t.Fatal(err)
			}
			bundle := TrustBundle(now, ca.Cert())
			out, err := AdminKubeconfig("tenant-a", "https://api.tenant-a.example.com:6443", bundle, admin.CertPEM(), keyPEM)
			if err != nil {
				t.Fatal(err)
			}

			cfg, err := clientcmd.Load(out)
			if err != nil {
				t.Fatalf("the kubeconfig does not load: %v", err)
			}
			if cfg.CurrentContext != "kubernetes-admin@tenant-a" {
				t.Errorf("current context %q", cfg.CurrentContext)
			}
			rest, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
			if err != nil {
				t.Fatalf("the kubeconfig does not make a client config: %v", err)
			}
			if rest.Host != "https://api.tenant-a.example.com:6443" {
				t.Errorf("server %q", rest.Host)
			}
			cas, err := certutil.ParseCertsPEM(rest.CAData)
			if err != nil || len(cas) != 1 || !cas[0].Equal(ca.Cert()) {
				t.Fatalf("the CA data is not the cluster CA: %v", err)
			}
			client, err := ParseKeyPair(rest.CertData, rest.KeyData)
			if err != nil {
				t.Fatalf("the client certificate and key do not parse as a pair: %v", err)
			}
			if err := verify(t, rest.CAData, client.Cert(), now, x509.ExtKeyUsageClientAuth, ""); err != nil {
				t.Errorf("the client certificate does not verify against the CA: %v", err)
			}
			if u, g := client.Cert().Subject.CommonName, client.Cert().Subject.Organization; u != AdminCommonName || len(g) != 1 || g[0] != SystemMastersGroup {
				t.Errorf("user %q groups %q, want %q [%q]", u, g, AdminCommonName, SystemMastersGroup)
			}
		})
	}
}

func TestAdminKubeconfigRejects(t *testing.T) {
	ca := mustCA(t, "kubernetes", year, now)
	admin := mustCert(t, ca, AdminCertConfig(), day, now)
	other := mustCert(t, ca, AdminCertConfig(), day, now)
	keyPEM, err := admin.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := other.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	bundle := TrustBundle(now, ca.Cert())
	tests := []struct {
		name    string
		cluster string
		server  string
		ca      []byte
		key     []byte
		wantErr string
	}{
		{name: "no cluster name", server: "https://api:6443", ca: bundle, key: keyPEM, wantErr: "no cluster name"},
		{name: "plain http", cluster: "c", server: "http://api:6443", ca: bundle, key: keyPEM, wantErr: "not an https:// URL"},
		{name: "no host", cluster: "c", server: "https://", ca: bundle, key: keyPEM, wantErr: "not an https:// URL"},
		{name: "no CA", cluster: "c", server: "https://api:6443", key: keyPEM, wantErr: "reading the CA bundle"},
		{name: "key of another certificate", cluster: "c", server: "https://api:6443", ca: bundle, key: otherKey, wantErr: "does not belong"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := AdminKubeconfig(tt.cluster, tt.server, tt.ca, admin.CertPEM(), tt.key)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Errorf("the error shows key material: %v", err)
			}
		})
	}
}
