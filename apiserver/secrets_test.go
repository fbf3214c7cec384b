package apiserver

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
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

// TestOwnedSecrets_AreWhatIsWrittenAndMounted keeps the one list of owned
// Secrets true: what the builders write, what the pods mount of the
// operator's and what deletion, Retain and render follow are the same.
func TestOwnedSecrets_AreWhatIsWrittenAndMounted(t *testing.T) {
	cfg := sample(t, "ha")
	cfg.Spec.Encryption = &v1alpha1.EncryptionSpec{Provider: "secretbox"}
	c := complete(t, cfg, Inputs{})
	stand, err := throwawayFor(c.Spec.Certificates.KeyAlgorithm)
	if err != nil {
		t.Fatal(err)
	}
	written, err := desiredPKISecrets(c, stand.pki)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := desiredEncryptionSecret(c, EncryptionKeys{Current: EncryptionLayout{Key: stand.encryption, Resources: DefaultEncryptedResources}}, rotation.State{})
	if err != nil {
		t.Fatal(err)
	}
	written = append(written, enc)
	owned := map[string][]string{}
	for _, o := range OwnedSecrets(c.Name) {
		owned[o.Name] = o.Keys
	}
	for _, s := range written {
		keys := slices.Sorted(maps.Keys(s.Data))
		if want, ok := owned[s.Name]; !ok || !slices.Equal(keys, slices.Sorted(slices.Values(want))) {
			t.Errorf("Secret %s is written with keys %v; OwnedSecrets lists %v (listed: %v)", s.Name, keys, want, ok)
		}
		delete(owned, s.Name)
	}
	for name := range owned {
		t.Errorf("OwnedSecrets lists %s, which nothing writes", name)
	}
	for _, o := range MountedObjects(c) {
		if !o.Owned || o.Kind != KindSecret {
			continue
		}
		if !slices.ContainsFunc(OwnedSecrets(c.Name), func(s OwnedSecret) bool { return s.Name == o.Name }) {
			t.Errorf("the pods mount Secret %s as the operator's, but OwnedSecrets does not list it: deletion would leave it", o.Name)
		}
	}
}
