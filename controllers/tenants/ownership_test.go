package tenants

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/controllers/ownership"
)

// plantedCA is a CA Secret a namespace's user made, with the labels (and
// owner, when given) of the operator's: its key is the user's.
func plantedCA(t *testing.T, cfg, owner *v1alpha1.ApiServerConfig) (*corev1.Secret, *x509.Certificate) {
	t.Helper()
	ca, err := pki.NewSelfSignedCA("kubernetes", v1alpha1.KeyAlgorithm("ECDSAP256"), 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: apiserver.CASecretName(cfg.Name),
			Labels: map[string]string{apiserver.NameLabel: cfg.Name, "app.kubernetes.io/managed-by": apiserver.FieldOwner}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: ca.CertPEM(), corev1.TLSPrivateKeyKey: key, apiserver.CABundleKey: ca.CertPEM()},
	}
	if owner != nil {
		s.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ApiServerConfig",
			Name: owner.Name, UID: owner.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	}
	return s, ca.Cert()
}

// signedBy reports whether the certificate of Secret name in cfg's
// namespace exists and was signed by ca.
func signedBy(t *testing.T, cfg *v1alpha1.ApiServerConfig, name string, ca *x509.Certificate) bool {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: cfg.Namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return false
		}
		t.Fatal(err)
	}
	certs, err := certutil.ParseCertsPEM(s.Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(certs[0].RawIssuer, ca.RawSubject) && certs[0].CheckSignatureFrom(ca) == nil
}

// A namespace's user who can write Secrets but not the operator's key
// plants a CA for a tenant: with the operator's labels before the tenant
// exists, with its labels and controller reference after, or by replacing
// the key in the tenant's own CA Secret. None of them is ever used: the
// tenant is Stalled, NameConflict, naming the Secret, and nothing the
// planted key would sign is issued.
func TestApiServerConfigReconciler_APlantedLabelledCAIsNeverUsed(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "forged", nil)

	// Before the tenant: the labels of the operator, no owner (what
	// Retain keeps looks the same).
	early, earlyCA := plantedCA(t, cfg, nil)
	if err := env.Client.Create(ctx, early); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	msg := waitForNameConflict(t, cfg, "Secret "+ns+"/"+early.Name)
	if !strings.Contains(msg, "no valid proof") {
		t.Errorf("the conflict does not say why the Secret is not the tenant's: %q", msg)
	}
	if signedBy(t, cfg, apiserver.ServingSecretName(cfg.Name), earlyCA) || signedBy(t, cfg, apiserver.KubeletClientSecretName(cfg.Name), earlyCA) {
		t.Fatal("the operator issued certificates with the planted CA")
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName(cfg.Name)}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the tenant got a Deployment with a planted CA (%v)", err)
	}
	now := get(t, early.DeepCopy())
	if now.ResourceVersion != early.ResourceVersion {
		t.Errorf("the planted Secret was written to: resourceVersion %s → %s", early.ResourceVersion, now.ResourceVersion)
	}

	// Once it is gone the tenant makes its own CA, proven.
	if err := env.Client.Delete(ctx, early); err != nil {
		t.Fatal(err)
	}
	touch(t, cfg)
	d := waitForDeployment(t, cfg)
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	own := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.CASecretName(cfg.Name)}})
	if !ownershipKey.Proven(cfg.Name, got.UID, own) || !ownershipKey.Proven(cfg.Name, got.UID, d) {
		t.Fatalf("the tenant's CA and Deployment carry no valid proof: %q, %q", own.Annotations[apiserver.ProofAnnotation], d.Annotations[apiserver.ProofAnnotation])
	}
	eventually(t, 20*time.Second, "status says the tenant's objects are proven", func() error {
		if got = get(t, got); !got.Status.ObjectsProven {
			return fmt.Errorf("status.objectsProven is false")
		}
		return nil
	})

	// After: a CA of the same labels and a controller reference to the
	// tenant (its uid is readable), in place of the tenant's own.
	if err := env.Client.Delete(ctx, own); err != nil {
		t.Fatal(err)
	}
	late, lateCA := plantedCA(t, cfg, got)
	if err := env.Client.Create(ctx, late); err != nil {
		t.Fatal(err)
	}
	touch(t, cfg)
	waitForNameConflict(t, cfg, "Secret "+ns+"/"+late.Name)
	for _, leaf := range []string{apiserver.ServingSecretName(cfg.Name), apiserver.KubeletClientSecretName(cfg.Name)} {
		if signedBy(t, cfg, leaf, lateCA) {
			t.Fatalf("the operator issued %s with the planted CA", leaf)
		}
	}
	if err := env.Client.Delete(ctx, late); err != nil {
		t.Fatal(err)
	}

	// The tenant's own CA Secret, its key replaced (labels, owner and
	// proof kept).
	touch(t, cfg)
	eventually(t, 30*time.Second, "the tenant has a CA of its own again", func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.CASecretName(cfg.Name)}, s); err != nil {
			return err
		}
		if !ownershipKey.Proven(cfg.Name, got.UID, s) {
			return fmt.Errorf("the CA Secret carries no valid proof")
		}
		own = s
		return nil
	})
	swapped, swappedCA := plantedCA(t, cfg, got)
	patch := client.MergeFrom(own.DeepCopy())
	own.Data = swapped.Data
	if err := env.Client.Patch(ctx, own, patch); err != nil {
		t.Fatal(err)
	}
	touch(t, cfg)
	waitForNameConflict(t, cfg, "Secret "+ns+"/"+own.Name)
	if signedBy(t, cfg, apiserver.ServingSecretName(cfg.Name), swappedCA) {
		t.Fatal("the operator issued the serving certificate with the swapped key")
	}
}

// A tenant whose objects were written without a proof the operator's key
// checks (a release before proofs, or a key lost and made again) is held,
// nothing overwritten, until a platform admin clears
// status.objectsProven: the next pass then takes them as the release
// before proofs did (they were created before the key), proves them and
// sets status.objectsProven again, and nothing rolls.
func TestApiServerConfigReconciler_ObjectsWrittenBeforeTheKeyAreTakenOnceAndNothingRolls(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "upgraded", nil)
	// Only this test's reconcilers take it.
	cfg.Labels = map[string]string{apiserver.WatchFilterLabel: "ownership-upgrade"}
	reconcilerWith := func(key *apiserver.Ownership) *Reconciler {
		return &Reconciler{Ownership: key, Client: env.Client, APIReader: env.Client, Scheme: env.Scheme,
			Clock: reconciler.Clock, CATrustPropagation: time.Second, Reach: reconciler.Reach,
			ResizePolicy: reconciler.ResizePolicy, AutoSizingInterval: reconciler.AutoSizingInterval}
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.DeploymentName(cfg.Name)}}
	// pass runs one pass, then acts as the Deployment controller.
	pass := func(r *Reconciler) *v1alpha1.ApiServerConfig {
		t.Helper()
		if _, err := r.Reconcile(ctx, reconcileRequest(cfg)); err != nil {
			var conflict *ownership.NameConflict
			if !errors.As(err, &conflict) {
				t.Fatal(err)
			}
		}
		if env.Client.Get(ctx, client.ObjectKeyFromObject(d), &appsv1.Deployment{}) == nil {
			actAsDeploymentController(t, d)
		}
		return get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	}
	// settle runs passes until the tenant is Ready and a pass changes
	// its Deployment no more (the first key's rotations rest).
	settle := func(r *Reconciler) *v1alpha1.ApiServerConfig {
		t.Helper()
		generation := int64(-1)
		for i := 0; ; i++ {
			got := pass(r)
			now := get(t, d.DeepCopy()).Generation
			if c := conditionOf(got, v1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue && now == generation {
				return got
			}
			generation = now
			if i == 30 {
				t.Fatalf("not settled after 30 passes: %v", got.Status.Conditions)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	keyAt := func(fill byte, since time.Time) *apiserver.Ownership {
		o, err := apiserver.NewOwnership(bytes.Repeat([]byte{fill}, apiserver.OwnershipKeyBytes), since)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	before := reconcilerWith(keyAt(7, time.Now().Add(-time.Hour)))
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if got := settle(before); !got.Status.ObjectsProven {
		t.Fatal("status.objectsProven is false after a pass that applied everything")
	}
	d = get(t, d)
	ca := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.CASecretName(cfg.Name)}})

	// A Secret of the tenant's that no pass writes now (the etcd user's
	// certificate of a datastore it left), as a release before proofs
	// left it.
	leftover := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.EtcdUserSecretName(cfg.Name),
		Labels:          map[string]string{apiserver.NameLabel: cfg.Name, "app.kubernetes.io/managed-by": apiserver.FieldOwner},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(get(t, cfg.DeepCopy()), v1alpha1.GroupVersion.WithKind("ApiServerConfig"))}},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: []byte("cert"), corev1.TLSPrivateKeyKey: []byte("key")}}
	if err := env.Client.Create(ctx, leftover); err != nil {
		t.Fatal(err)
	}

	// The key is another now, made a second after every object.
	time.Sleep(time.Second)
	after := reconcilerWith(keyAt(9, time.Now()))
	got := pass(after)
	if c := conditionOf(got, v1alpha1.ConditionStalled); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonNameConflict || !strings.Contains(c.Message, "no valid proof") {
		t.Fatalf("with another key, Stalled is %v, want NameConflict", c)
	}
	if now := get(t, ca.DeepCopy()); now.ResourceVersion != ca.ResourceVersion {
		t.Fatal("with another key, the operator wrote to the CA Secret it cannot prove")
	}

	// The platform admin's recovery (and what an upgrade from a release
	// without proofs meets): status.objectsProven cleared.
	patch := client.MergeFrom(got.DeepCopy())
	got.Status.ObjectsProven = false
	if err := env.Client.Status().Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	if got = settle(after); !got.Status.ObjectsProven {
		t.Fatal("status.objectsProven is false after the recovery")
	}
	for _, name := range []string{apiserver.CASecretName(cfg.Name), apiserver.ServingSecretName(cfg.Name), apiserver.ServiceAccountSecretName(cfg.Name), leftover.Name} {
		if s := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); !after.Ownership.Proven(cfg.Name, got.UID, s) {
			t.Errorf("Secret %s is not proven with the new key", name)
		}
	}
	now := get(t, d.DeepCopy())
	if !after.Ownership.Proven(cfg.Name, got.UID, now) {
		t.Error("the Deployment is not proven with the new key")
	}
	// The proof is an annotation of the Deployment, which is a new
	// generation (annotations are copied to its ReplicaSets), not a new
	// pod template: no pod is replaced.
	if a, b := mustJSON(t, d.Spec), mustJSON(t, now.Spec); a != b {
		t.Errorf("the Deployment's spec changed: the apiservers roll\n%s\n%s", a, b)
	}
	if s := get(t, ca.DeepCopy()); !bytes.Equal(s.Data[corev1.TLSCertKey], ca.Data[corev1.TLSCertKey]) {
		t.Error("the tenant has another CA")
	}

	// From then on, what was written before the key is no longer taken.
	planted, _ := plantedCA(t, cfg, got)
	if err := env.Client.Delete(ctx, get(t, ca.DeepCopy())); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, planted); err != nil {
		t.Fatal(err)
	}
	if c := conditionOf(pass(after), v1alpha1.ConditionStalled); c == nil || c.Reason != v1alpha1.ReasonNameConflict {
		t.Fatalf("a CA planted after the recovery: Stalled is %v, want NameConflict", c)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A pod with the labels of a tenant's apiservers that its Deployment did
// not make (no owner, or another) is not the tenant's: its status is not
// reported as the tenant's, nor read for anything. The tenant's own pod,
// made by a ReplicaSet of its Deployment, is.
func TestApiServerConfigReconciler_APlantedPodIsNotTheTenants(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "pods", nil)
	createReady(t, cfg)
	sw := watchStatus(t, ns, cfg.Name)
	scaleToTwoWithOneReady(t, cfg)
	// Planted first, and first by name.
	planted := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods-apiserver-a", Labels: apiserver.SelectorLabels(cfg.Name)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-apiserver", Image: "k"}}},
	}
	if err := env.Client.Create(ctx, planted); err != nil {
		t.Fatal(err)
	}
	unschedulable(t, planted, "planted")
	own := createAPIServerPod(t, cfg, "pods-apiserver-x")
	const why = "0/3 nodes are available: 3 Insufficient memory."
	unschedulable(t, own, why)
	msg := sw.waitFor(t, 30*time.Second, kstatus.FailedStatus)
	if !strings.Contains(msg, "Pod pods-apiserver-x cannot be scheduled: "+why) || strings.Contains(msg, "planted") {
		t.Fatalf("Stalled says %q, want the tenant's own pod and not the planted one", msg)
	}
}

// A pod anyone may create with the labels of a tenant's apiservers is held
// in the operator's cache as little as the reconciler reads of a pod: its
// annotations, labels, volumes and environment beyond those cost nothing.
func TestApiServerConfigReconciler_ALookAlikePodCostsTheCacheLittle(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	labels := apiserver.SelectorLabels("lookalike")
	for i := range 100 {
		labels[fmt.Sprintf("padding-%03d", i)] = strings.Repeat("x", 63)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lookalike-apiserver-a", Labels: labels, Annotations: map[string]string{
			"padding":                         strings.Repeat("y", 200<<10),
			apiserver.ConfigHashAnnotation:    "0123456789abcdef",
			"kubectl.kubernetes.io/last-note": "z",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "kube-apiserver", Image: "k",
			Env: []corev1.EnvVar{{Name: "PADDING", Value: strings.Repeat("e", 100<<10)}},
		}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	stored := mustJSON(t, pod)
	cached := &corev1.Pod{}
	for i := 0; ; i++ {
		err := reconciler.Client.Get(ctx, client.ObjectKeyFromObject(pod), cached)
		if err == nil {
			break
		}
		if i == 100 {
			t.Fatalf("the pod never reached the operator's cache: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	held := mustJSON(t, cached)
	if len(held) > 2<<10 {
		t.Errorf("the cache holds %d bytes of a pod of %d, want at most 2 KiB: %s", len(held), len(stored), held)
	}
	for k, v := range apiserver.SelectorLabels("lookalike") {
		if cached.Labels[k] != v {
			t.Errorf("the cached pod lost its selector label %s: %v", k, cached.Labels)
		}
	}
	if cached.Annotations[apiserver.ConfigHashAnnotation] != "0123456789abcdef" || len(cached.Annotations) != 1 {
		t.Errorf("the cached pod's annotations are %v, want its config hash alone", cached.Annotations)
	}
	if len(cached.Spec.Containers) != 1 || cached.Spec.Containers[0].Name != "kube-apiserver" {
		t.Errorf("the cached pod's containers are %+v, want kube-apiserver's name", cached.Spec.Containers)
	}
	t.Logf("A look-alike pod of %d bytes is held in %d", len(stored), len(held))
}

// A Secret or Deployment anyone may write with the operator's labels is
// held in the operator's cache without its data or template unless it
// carries the operator's proof: look-alikes cost their identity, while the
// tenant's own objects are read whole.
func TestApiServerConfigReconciler_LookAlikeSecretsAndDeploymentsCostTheCacheLittle(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "held", nil)
	createReady(t, cfg)
	labels := map[string]string{"app.kubernetes.io/managed-by": apiserver.FieldOwner, apiserver.NameLabel: cfg.Name}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held-lookalike", Labels: labels, Annotations: map[string]string{"padding": strings.Repeat("a", 100<<10)}},
		Data:       map[string][]byte{"tls.key": bytes.Repeat([]byte("k"), 900<<10)},
	}
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held-lookalike", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"lookalike": "yes"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"lookalike": "yes"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i",
					Env: []corev1.EnvVar{{Name: "PADDING", Value: strings.Repeat("e", 500<<10)}}}}},
			},
		},
	}
	for _, o := range []client.Object{secret, deployment} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cached := func(o client.Object) client.Object {
		t.Helper()
		into := o.DeepCopyObject().(client.Object)
		for i := 0; ; i++ {
			err := reconciler.Client.Get(ctx, client.ObjectKeyFromObject(o), into)
			if err == nil && (o.GetResourceVersion() == "" || into.GetResourceVersion() == o.GetResourceVersion()) {
				return into
			}
			if i == 100 {
				t.Fatalf("%s never reached the operator's cache: %v", o.GetName(), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, o := range []client.Object{secret, deployment} {
		held := cached(o)
		if n := len(mustJSON(t, held)); n > 2<<10 {
			t.Errorf("the cache holds %d bytes of the look-alike %T %s, want at most 2 KiB", n, o, o.GetName())
		}
		if held.GetLabels()[apiserver.NameLabel] != cfg.Name || len(held.GetAnnotations()) != 0 {
			t.Errorf("the cached look-alike %T keeps labels %v and annotations %d, want the operator's labels and no annotation", o, held.GetLabels(), len(held.GetAnnotations()))
		}
	}
	// The tenant's own CA, proven, is held whole: its key is there.
	ca := cached(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.CASecretName(cfg.Name)}})
	if s := ca.(*corev1.Secret); len(s.Data[corev1.TLSPrivateKeyKey]) == 0 || s.Annotations[apiserver.ProofAnnotation] == "" {
		t.Errorf("the tenant's own CA Secret is held without its key or its proof: keys %v", slices.Collect(maps.Keys(s.Data)))
	}
	own := cached(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.DeploymentName(cfg.Name)}})
	if d := own.(*appsv1.Deployment); len(d.Spec.Template.Spec.Containers) == 0 {
		t.Error("the tenant's own Deployment is held without its pod template")
	}
}
