package controllers

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
)

func rotationPhase(t *testing.T, cfg *v1alpha1.ApiServerConfig, name string) string {
	t.Helper()
	for _, r := range get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}).Status.Rotations {
		if r.Name == name {
			return r.Phase
		}
	}
	return ""
}

func annotate(t *testing.T, cfg *v1alpha1.ApiServerConfig, key, value string) {
	t.Helper()
	current := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	patch := client.MergeFrom(current.DeepCopy())
	if current.Annotations == nil {
		current.Annotations = map[string]string{}
	}
	current.Annotations[key] = value
	if err := env.Client.Patch(context.Background(), current, patch); err != nil {
		t.Fatal(err)
	}
}

func publicKeyOf(t *testing.T, privatePEM []byte) crypto.PublicKey {
	t.Helper()
	k, err := pki.ParseServiceAccountKey(privatePEM)
	if err != nil {
		t.Fatal(err)
	}
	return k.Public()
}

// trusts reports whether the public key bundle holds key.
func trusts(t *testing.T, bundle []byte, key crypto.PublicKey) bool {
	t.Helper()
	keys, err := keyutil.ParsePublicKeysPEM(bundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.(interface{ Equal(crypto.PublicKey) bool }).Equal(key) {
			return true
		}
	}
	return false
}

// storedPhase is the phase recorded with the Secret's content (status
// follows at the end of the same pass).
func storedPhase(t *testing.T, cfg *v1alpha1.ApiServerConfig, name string) string {
	t.Helper()
	kind, secret := rotation.ServiceAccountKey, apiserver.ServiceAccountSecretName(cfg.Name)
	switch name {
	case rotation.CA.Name:
		kind, secret = rotation.CA, apiserver.CASecretName(cfg.Name)
	case rotation.EncryptionKey.Name:
		kind, secret = rotation.EncryptionKey, apiserver.EncryptionSecretName(cfg.Name)
	}
	s := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: cfg.Namespace, Name: secret}, s); err != nil {
		return ""
	}
	state, err := apiserver.RotationStateOf(kind, s)
	if err != nil {
		t.Fatal(err)
	}
	return string(state.Phase)
}

// waitForPhase drives the rollouts (as the Deployment controller would)
// until the rotation reaches phase, then waits for status to show it.
func waitForPhase(t *testing.T, cfg *v1alpha1.ApiServerConfig, d *appsv1.Deployment, name, phase string) {
	t.Helper()
	eventually(t, 30*time.Second, "the "+name+" rotation reaches "+phase, func() error {
		if got := storedPhase(t, cfg, name); got != phase {
			// Only a completed rollout moves a rotation: complete it, and
			// look again. Once the phase is reached nothing is rolled out,
			// so the rotation stays there while the test looks.
			actAsDeploymentController(t, d)
			return fmt.Errorf("phase %q", got)
		}
		return nil
	})
	eventually(t, 10*time.Second, "status shows the "+name+" rotation in "+phase, func() error {
		if got := rotationPhase(t, cfg, name); got != phase {
			return fmt.Errorf("status says %q", got)
		}
		return nil
	})
}

func TestApiServerConfigReconciler_ServiceAccountKeyRotatesInPhasesWithOverlap(t *testing.T) {
	ns := namespace(t, nil)
	cfg := tenant(ns, "sarot", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Certificates.RotationOverlap = &metav1.Duration{Duration: 2 * time.Second}
	})
	if err := env.Client.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)
	waitForPhase(t, cfg, d, rotation.ServiceAccountKey.Name, "Stable")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.ServiceAccountSecretName("sarot")}}
	oldKey := publicKeyOf(t, get(t, secret).Data[apiserver.ServiceAccountPrivateKeyKey])
	hashes := map[string]bool{get(t, d).Spec.Template.Annotations[apiserver.ConfigHashAnnotation]: true}

	annotate(t, cfg, v1alpha1.RotateServiceAccountKeyAnnotation, "1")
	checks := []struct {
		phase          string
		signsWithOld   bool
		trustsOld      bool
		expectNewHash  bool
		expectOnlyNext bool
	}{
		{"TrustNew", true, true, true, false},
		{"SignWithNew", false, true, true, false},
		{"PruneOld", false, false, true, true},
		{"Stable", false, false, false, true},
	}
	for _, c := range checks {
		waitForPhase(t, cfg, d, rotation.ServiceAccountKey.Name, c.phase)
		s := get(t, secret)
		signer := publicKeyOf(t, s.Data[apiserver.ServiceAccountPrivateKeyKey])
		if signsOld := trusts(t, mustPEM(t, signer), oldKey); signsOld != c.signsWithOld {
			t.Errorf("%s: signing with the old key is %v, want %v", c.phase, signsOld, c.signsWithOld)
		}
		// A token signed by the old key verifies while the old public key
		// is published.
		if got := trusts(t, s.Data[apiserver.ServiceAccountPublicKeysKey], oldKey); got != c.trustsOld {
			t.Errorf("%s: the old public key is trusted: %v, want %v", c.phase, got, c.trustsOld)
		}
		if !trusts(t, s.Data[apiserver.ServiceAccountPublicKeysKey], signer) {
			t.Errorf("%s: the signing key is not trusted", c.phase)
		}
		// Once the old key is pruned, the signing key is the only one
		// published: nothing else verifies tokens.
		keys, err := keyutil.ParsePublicKeysPEM(s.Data[apiserver.ServiceAccountPublicKeysKey])
		if err != nil {
			t.Fatal(err)
		}
		if c.expectOnlyNext && len(keys) != 1 {
			t.Errorf("%s: %d public keys are published, want only the signing key", c.phase, len(keys))
		}
		if !c.expectOnlyNext && len(keys) != 2 {
			t.Errorf("%s: %d public keys are published, want the old and the new", c.phase, len(keys))
		}
		hash := get(t, d).Spec.Template.Annotations[apiserver.ConfigHashAnnotation]
		if c.expectNewHash && hashes[hash] {
			t.Errorf("%s: the pods did not roll (kube-apiserver reads its keys only at start)", c.phase)
		}
		hashes[hash] = true
	}
}

func mustPEM(t *testing.T, key crypto.PublicKey) []byte {
	t.Helper()
	out, err := pki.PublicKeysPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestApiServerConfigReconciler_CARotationTrustsBothCAsAndReissuesLeaves(t *testing.T) {
	ns := namespace(t, nil)
	cfg := tenant(ns, "carot", nil)
	if err := env.Client.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)
	waitForPhase(t, cfg, d, rotation.CA.Name, "Stable")
	caSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.CASecretName("carot")}}
	oldCA := parseCert(t, get(t, caSecret).Data[corev1.TLSCertKey])
	servingSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.ServingSecretName("carot")}}
	servingHash := get(t, d).Spec.Template.Annotations[apiserver.ConfigHashAnnotation]

	annotate(t, cfg, v1alpha1.RotateCAAnnotation, "1")
	waitForPhase(t, cfg, d, rotation.CA.Name, "TrustNew")
	bundle, err := certutil.ParseCertsPEM(get(t, caSecret).Data[apiserver.CABundleKey])
	if err != nil || len(bundle) != 2 {
		t.Fatalf("in TrustNew the bundle holds %d CAs (%v), want the new and the old", len(bundle), err)
	}
	if !parseCert(t, get(t, caSecret).Data[corev1.TLSCertKey]).Equal(oldCA) {
		t.Fatal("in TrustNew the old CA must still sign")
	}
	if got := get(t, d).Spec.Template.Annotations[apiserver.ConfigHashAnnotation]; got != servingHash {
		t.Fatal("publishing a CA bundle rolled the pods; kube-apiserver re-reads it")
	}

	waitForPhase(t, cfg, d, rotation.CA.Name, "SignWithNew")
	newCA := parseCert(t, get(t, caSecret).Data[corev1.TLSCertKey])
	if newCA.Equal(oldCA) {
		t.Fatal("in SignWithNew the new CA must sign")
	}
	eventually(t, 20*time.Second, "the serving certificate is reissued by the new CA", func() error {
		return parseCert(t, get(t, servingSecret).Data[corev1.TLSCertKey]).CheckSignatureFrom(newCA)
	})
	// Certificates the old CA signed (kubeconfigs handed out) keep
	// working: the old CA stays in the bundle until it expires.
	pool := x509.NewCertPool()
	for _, c := range mustCerts(t, get(t, caSecret).Data[apiserver.CABundleKey]) {
		pool.AddCert(c)
	}
	if _, err := oldCA.Verify(x509.VerifyOptions{Roots: pool}); err != nil {
		t.Fatalf("the old CA left the bundle before it expired: %v", err)
	}
}

func parseCert(t *testing.T, pemData []byte) *x509.Certificate {
	t.Helper()
	return mustCerts(t, pemData)[0]
}

func mustCerts(t *testing.T, pemData []byte) []*x509.Certificate {
	t.Helper()
	certs, err := certutil.ParseCertsPEM(pemData)
	if err != nil || len(certs) == 0 {
		t.Fatalf("parsing certificates: %v", err)
	}
	return certs
}
