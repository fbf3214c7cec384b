package tenants

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	"github.com/apiserver-operator/apiserver-operator/controllers/controllertest"
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
	r := &Reconciler{Ownership: ownershipKey, Client: counting, APIReader: env.Client, Scheme: env.Scheme, Clock: clock.RealClock{}}
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
// revoke-ca, on a tenant whose earlier CA rotation keeps its old CA until
// it expires, ends that overlap and runs a rotation of its own whose new
// CA is generated after the request; once that CA signs everywhere the
// bundle holds it alone. Credentials handed out before (an
// AdminCredentialRequest's, signed by the CA that signed then) are no
// longer trusted; a request made during the revocation waits and is
// answered by the new CA, as the admin kubeconfig is.
func TestApiServerConfigReconciler_RevokingTheCAEndsEveryCredentialItSigned(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "revoked", nil)
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)
	waitForPhase(t, cfg, d, rotation.CA.Name, "Stable")
	caSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.CASecretName("revoked")}}
	first := parseCert(t, get(t, caSecret).Data[corev1.TLSCertKey])
	// An ordinary rotation: its old CA stays trusted until it expires.
	annotate(t, cfg, v1alpha1.RotateCAAnnotation, "1")
	waitForPhase(t, cfg, d, rotation.CA.Name, "SignWithNew")
	second := parseCert(t, get(t, caSecret).Data[corev1.TLSCertKey])

	credential := func(name string, want string) *x509.Certificate {
		t.Helper()
		acr := controllertest.CredentialRequest(ns, name, "revoked", "ops", 3600, "ops")
		// Created once: a second call waits for another answer.
		if err := env.Client.Create(ctx, acr); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		var cert *x509.Certificate
		eventually(t, 60*time.Second, "request "+name+" is "+want, func() error {
			got := get(t, &v1alpha1.AdminCredentialRequest{ObjectMeta: acr.ObjectMeta})
			if c := controllertest.RequestReady(got); c == nil || c.Reason != want {
				actAsDeploymentController(t, d)
				return fmt.Errorf("Ready is %v", c)
			}
			if want != v1alpha1.ReasonCredentialIssued {
				return nil
			}
			s := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: got.Status.SecretName}})
			kp := pki.KubeconfigKeyPair(s.Data[apiserver.KubeconfigKey])
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
		for _, c := range mustCerts(t, get(t, caSecret).Data[apiserver.CABundleKey]) {
			pool.AddCert(c)
		}
		_, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	before := credential("before", v1alpha1.ReasonCredentialIssued)
	if err := before.CheckSignatureFrom(second); err != nil || trusted(before) != nil {
		t.Fatalf("the credential is not signed by the CA that signs (%v) or not trusted (%v)", err, trusted(before))
	}

	annotate(t, cfg, v1alpha1.RevokeCAAnnotation, "leak-1")
	credential("during", v1alpha1.ReasonTenantNotServing)
	if c := controllertest.RequestReady(get(t, &v1alpha1.AdminCredentialRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "during"}})); !strings.Contains(c.Message, "being revoked") {
		t.Errorf("a request during the revocation waits with %q", c.Message)
	}
	// The ordinary rotation's overlap ends, then the revocation's own
	// rotation runs: done when the bundle holds one CA, neither of the two.
	var third *x509.Certificate
	eventually(t, 60*time.Second, "the revocation ends with a bundle of a new CA alone", func() error {
		bundle := mustCerts(t, get(t, caSecret).Data[apiserver.CABundleKey])
		if phase := storedPhase(t, cfg, rotation.CA.Name); phase != "Stable" || len(bundle) != 1 || bundle[0].Equal(first) || bundle[0].Equal(second) {
			actAsDeploymentController(t, d)
			return fmt.Errorf("phase %s, %d CAs in the bundle", phase, len(bundle))
		}
		third = bundle[0]
		return nil
	})
	if err := trusted(before); err == nil {
		t.Error("a credential the revoked CA signed is still trusted")
	}
	during := credential("during", v1alpha1.ReasonCredentialIssued)
	if err := during.CheckSignatureFrom(third); err != nil {
		t.Errorf("the request made during the revocation was answered by another CA than the new one: %v", err)
	}
	eventually(t, 20*time.Second, "the admin kubeconfig is signed by the new CA", func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.AdminKubeconfigSecretName("revoked")}, s); err != nil {
			return err
		}
		kp := pki.KubeconfigKeyPair(s.Data[apiserver.KubeconfigKey])
		if kp == nil {
			return fmt.Errorf("no admin certificate")
		}
		return kp.Cert().CheckSignatureFrom(third)
	})
}
