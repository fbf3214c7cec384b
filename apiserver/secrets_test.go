package apiserver

import (
	"strings"
	"testing"
	"time"

	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

func TestDesiredPKISecrets_ProvideEveryFileTheDeploymentMounts(t *testing.T) {
	c, d, _, _ := desiredObjects(t, "minimal")
	now := time.Now()
	alg := c.Spec.Certificates.KeyAlgorithm
	ca := must(pki.NewSelfSignedCA("kubernetes", alg, 24*time.Hour, now))
	fpCA := must(pki.NewSelfSignedCA("front-proxy-ca", alg, 24*time.Hour, now))
	sa := must(pki.NewServiceAccountKey(alg))
	admin := must(pki.NewSignedCert(ca, pki.AdminCertConfig(), alg, time.Hour, now))
	p := PKISecrets{
		CA: ca, CABundle: pki.TrustBundle(now, ca.Cert()),
		Serving:       must(pki.NewSignedCert(ca, pki.ServingCertConfig(c.SANs.DNSNames, c.SANs.IPs), alg, time.Hour, now)),
		KubeletClient: must(pki.NewSignedCert(ca, pki.KubeletClientCertConfig(), alg, time.Hour, now)),
		FrontProxyCA:  fpCA, FrontProxyCABundle: pki.TrustBundle(now, fpCA.Cert()),
		FrontProxyClient:         must(pki.NewSignedCert(fpCA, pki.FrontProxyClientCertConfig(), alg, time.Hour, now)),
		ServiceAccountSigningKey: must(sa.PrivateKeyPEM()),
		ServiceAccountPublicKeys: must(pki.PublicKeysPEM(sa.Public())),
		AdminKubeconfig:          must(pki.AdminKubeconfig(c.Name, c.Endpoint, pki.TrustBundle(now, ca.Cert()), admin.CertPEM(), must(admin.KeyPEM()))),
	}
	secrets, err := desiredPKISecrets(c, p)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]map[string]bool{}
	for _, s := range secrets {
		keys[s.Name] = map[string]bool{}
		for k, v := range s.Data {
			if len(v) == 0 {
				t.Errorf("Secret %s has an empty %s", s.Name, k)
			}
			keys[s.Name][k] = true
		}
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.Secret == nil || src.Secret.Name == "etcd-client" {
				continue
			}
			for _, item := range src.Secret.Items {
				if !keys[src.Secret.Name][item.Key] {
					t.Errorf("the Deployment mounts %s/%s but desiredPKISecrets does not provide it", src.Secret.Name, item.Key)
				}
			}
		}
	}
	if !keys[AdminKubeconfigSecretName(c.Name)][KubeconfigKey] {
		t.Error("no admin kubeconfig Secret")
	}

	p.Serving = nil
	if _, err := desiredPKISecrets(c, p); err == nil || !strings.Contains(err.Error(), ServingSecretName(c.Name)) {
		t.Fatalf("a missing certificate must be an error naming its Secret, got %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
