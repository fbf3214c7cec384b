package controllers

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
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

func TestApiServerConfigReconciler_WritesEachObjectOncePerPassThroughARotation(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "once", func(s *v1alpha1.ApiServerConfigSpec) {
		s.MasterCount = ptr.To[int32](2)
		s.Encryption = &v1alpha1.EncryptionSpec{Provider: "secretbox"}
		s.Certificates.RotationOverlap = &metav1.Duration{Duration: time.Second}
	})
	// Only this test's reconciler takes it: the manager's takes only
	// tenants without a watch filter.
	cfg.Labels = map[string]string{apiserver.WatchFilterLabel: "write-once"}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	counting := &countingClient{Client: env.Client}
	r := &ApiServerConfigReconciler{Client: counting, APIReader: env.Client, Scheme: env.Scheme, Clock: clock.RealClock{}}
	deployment := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.DeploymentName(cfg.Name)}}
	// pass runs one pass, then acts as the Deployment controller, and
	// returns what the pass wrote, object by object (the ApiServerConfig's
	// own status and finalizer left out), and whether it moved the
	// service-account key's rotation.
	pass := func() (map[string]int, bool) {
		t.Helper()
		before := rotationPhase(t, cfg, rotation.ServiceAccountKey.Name)
		counting.reset()
		if _, err := r.Reconcile(ctx, reconcileRequest(cfg)); err != nil {
			t.Fatal(err)
		}
		writes := counting.reset()
		for obj, n := range writes {
			if strings.Contains(obj, "ApiServerConfig") {
				delete(writes, obj)
				continue
			}
			if n > 1 {
				t.Fatalf("one pass wrote %s %d times (all its writes: %v)", obj, n, writes)
			}
		}
		actAsDeploymentController(t, deployment)
		return writes, rotationPhase(t, cfg, rotation.ServiceAccountKey.Name) != before
	}
	for i := 0; ; i++ {
		if writes, _ := pass(); len(writes) == 0 {
			break
		}
		if i == 10 {
			t.Fatal("the tenant did not converge in 10 passes")
		}
	}

	// At once: the tenant moves to another operator instance (every
	// object's labels change, no pod's) and its key is to rotate.
	current := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	patch := client.MergeFrom(current.DeepCopy())
	current.Labels[apiserver.WatchFilterLabel] = "write-once-moved"
	current.Annotations = map[string]string{v1alpha1.RotateServiceAccountKeyAnnotation: "1"}
	if err := env.Client.Patch(ctx, current, patch); err != nil {
		t.Fatal(err)
	}
	var phases []string
	movedAndRolled := 0
	for range 60 {
		writes, moved := pass()
		phase := rotationPhase(t, cfg, rotation.ServiceAccountKey.Name)
		if moved {
			phases = append(phases, phase)
			if writes["Deployment "+deployment.Name] == 1 {
				movedAndRolled++
			}
		}
		if len(phases) > 0 && phase == string(rotation.Stable) {
			break
		}
		if len(writes) == 0 {
			time.Sleep(200 * time.Millisecond) // the overlap passes
		}
	}
	if want := []string{"TrustNew", "SignWithNew", "PruneOld", "Stable"}; !slices.Equal(phases, want) {
		t.Fatalf("the rotation went through %v, want %v", phases, want)
	}
	if movedAndRolled == 0 {
		t.Fatal("no pass both moved the rotation and applied the Deployment it changed")
	}
}

// TestApiServerConfigReconciler_RevokingTheCAEndsEveryCredentialItSigned:
// revoke-ca runs a CA rotation whose old CA leaves the bundle as soon as
// the new one signs everywhere, instead of when it expires: a credential
// handed out before (an AdminCredentialRequest's) is no longer trusted,
// while the admin kubeconfig and the credentials asked for after are.
func TestApiServerConfigReconciler_RevokingTheCAEndsEveryCredentialItSigned(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "revoked", nil)
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)
	waitForPhase(t, cfg, d, rotation.CA.Name, "Stable")
	credential := func(name string) *x509.Certificate {
		t.Helper()
		acr := credentialRequest(ns, name, "revoked", "ops", 3600, "ops")
		if err := env.Client.Create(ctx, acr); err != nil {
			t.Fatal(err)
		}
		var cert *x509.Certificate
		eventually(t, 30*time.Second, "request "+name+" is answered", func() error {
			s := &corev1.Secret{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: AdminCredentialSecretName(name)}, s); err != nil {
				return err
			}
			kp := adminFromKubeconfig(s.Data[apiserver.KubeconfigKey])
			if kp == nil {
				return fmt.Errorf("Secret %s holds no credential", s.Name)
			}
			cert = kp.Cert()
			return nil
		})
		return cert
	}
	trusted := func(cert *x509.Certificate) error {
		pool := x509.NewCertPool()
		for _, c := range mustCerts(t, get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.CASecretName("revoked")}}).Data[apiserver.CABundleKey]) {
			pool.AddCert(c)
		}
		_, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	before := credential("before")
	if err := trusted(before); err != nil {
		t.Fatalf("the credential is not trusted to begin with: %v", err)
	}

	annotate(t, cfg, v1alpha1.RevokeCAAnnotation, "leak-1")
	waitForPhase(t, cfg, d, rotation.CA.Name, "TrustNew")
	if err := trusted(before); err != nil {
		t.Fatalf("while the new CA propagates, the old one must stay trusted: %v", err)
	}
	// SignWithNew, whose overlap the revocation ends once the reissued
	// leaves rolled out, PruneOld, then Stable.
	waitForPhase(t, cfg, d, rotation.CA.Name, "Stable")
	caSecret := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.CASecretName("revoked")}})
	if bundle := mustCerts(t, caSecret.Data[apiserver.CABundleKey]); len(bundle) != 1 || !bundle[0].Equal(parseCert(t, caSecret.Data[corev1.TLSCertKey])) {
		t.Fatalf("after the revocation the bundle holds %d CAs, want only the one that signs", len(bundle))
	}
	if err := trusted(before); err == nil {
		t.Error("a credential the revoked CA signed is still trusted")
	}
	eventually(t, 20*time.Second, "the admin kubeconfig is signed by the new CA", func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.AdminKubeconfigSecretName("revoked")}, s); err != nil {
			return err
		}
		kp := adminFromKubeconfig(s.Data[apiserver.KubeconfigKey])
		if kp == nil {
			return fmt.Errorf("no admin certificate")
		}
		return trusted(kp.Cert())
	})
	if err := trusted(credential("after")); err != nil {
		t.Errorf("a credential asked for after the revocation is not trusted: %v", err)
	}
}
