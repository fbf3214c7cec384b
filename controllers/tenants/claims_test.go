package tenants

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// waitForNameConflict waits for cfg to be Stalled by a name conflict
// whose message names the object, and returns the message.
func waitForNameConflict(t *testing.T, cfg *v1alpha1.ApiServerConfig, object string) string {
	t.Helper()
	var msg string
	eventually(t, 20*time.Second, "Stalled says NameConflict for "+object, func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		c := conditionOf(got, v1alpha1.ConditionStalled)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonNameConflict || !strings.Contains(c.Message, object) {
			return fmt.Errorf("Stalled is %v; conditions %v", c, got.Status.Conditions)
		}
		if r := conditionOf(got, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse || r.Reason != v1alpha1.ReasonNameConflict {
			return fmt.Errorf("Ready is %v", r)
		}
		msg = c.Message
		return nil
	})
	return msg
}

// touch changes an annotation of cfg, which brings a pass at once.
func touch(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
	t.Helper()
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	patch := client.MergeFrom(got.DeepCopy())
	got.Annotations = map[string]string{"test/touched": time.Now().Format(time.RFC3339Nano)}
	if err := env.Client.Patch(context.Background(), got, patch); err != nil {
		t.Fatal(err)
	}
}

func TestApiServerConfigReconciler_LeavesObjectsOfItsNamesThatAreNotItsOwn(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "crowded", nil)

	// A user's own Secret happens to have the name the tenant would give
	// its CA (admission looks for the Deployment's name, not the
	// Secrets').
	theirCA := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.CASecretName(cfg.Name)},
		Data:       map[string][]byte{"tls.crt": []byte("not the tenant's"), "tls.key": []byte("not the tenant's")},
	}
	if err := env.Client.Create(ctx, theirCA); err != nil {
		t.Fatal(err)
	}
	untouched := func(obj client.Object) {
		t.Helper()
		now := get(t, obj.DeepCopyObject().(client.Object))
		if now.GetResourceVersion() != obj.GetResourceVersion() || len(now.GetOwnerReferences()) > 0 || !maps.Equal(now.GetLabels(), obj.GetLabels()) {
			t.Fatalf("%T %s was changed: resourceVersion %s → %s, owners %v, labels %v", obj, obj.GetName(),
				obj.GetResourceVersion(), now.GetResourceVersion(), now.GetOwnerReferences(), now.GetLabels())
		}
	}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	msg := waitForNameConflict(t, cfg, "Secret "+ns+"/"+theirCA.Name)
	if !strings.Contains(msg, "no ApiServerConfig") {
		t.Errorf("the conflict does not say who holds the Secret: %q", msg)
	}
	untouched(theirCA)
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	if c := conditionOf(got, v1alpha1.ConditionCertificatesReady); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("CertificatesReady is True while the CA's name is someone else's: %v", c)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName(cfg.Name)}, &appsv1.Deployment{}); err == nil {
		t.Fatalf("the tenant got a Deployment without its own CA")
	}

	// Meanwhile a Deployment of the apiservers' name appears.
	theirs := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.DeploymentName(cfg.Name), Labels: map[string]string{"app": "theirs"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "theirs"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "theirs"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "example.com/web:1"}}},
			},
		},
	}
	if err := env.Client.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	// Once the Secret is out of the way, the Deployment is in it: the
	// operator neither reads its status as the apiservers' nor writes it.
	if err := env.Client.Delete(ctx, theirCA); err != nil {
		t.Fatal(err)
	}
	touch(t, cfg)
	waitForNameConflict(t, cfg, "Deployment "+ns+"/"+theirs.Name)
	untouched(theirs)

	// Its removal lets the tenant start, with a CA of its own.
	if err := env.Client.Delete(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	touch(t, cfg)
	eventually(t, 20*time.Second, "the tenant's own Deployment and CA", func() error {
		d := &appsv1.Deployment{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(theirs), d); err != nil {
			return err
		}
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(theirCA), s); err != nil {
			return err
		}
		if !metav1.IsControlledBy(d, got) || !metav1.IsControlledBy(s, got) || string(s.Data["tls.crt"]) == "not the tenant's" {
			return fmt.Errorf("the Deployment has owners %v, the CA %v", d.OwnerReferences, s.OwnerReferences)
		}
		return nil
	})
}

func TestApiServerConfigReconciler_ATenantWhoseNamesCollideTakesNothingOfTheOther(t *testing.T) {
	// x-front-proxy's CA is x-front-proxy-ca: tenant x's front-proxy CA.
	// Admission refuses the pair (see the webhook's tests); the operator
	// must not take the other's CA when admission was not asked.
	ctx := context.Background()
	ns := namespace(t, nil)
	x := tenant(ns, "x", nil)
	if err := env.Client.Create(ctx, x); err != nil {
		t.Fatal(err)
	}
	waitForDeployment(t, x)
	xs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.FrontProxyCASecretName("x")}}
	eventually(t, 20*time.Second, "x's front-proxy CA exists", func() error {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(xs), xs)
	})

	other := tenant(ns, "x-front-proxy", nil)
	withoutAdmission(t, ns)
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	msg := waitForNameConflict(t, other, "Secret "+ns+"/x-front-proxy-ca")
	if !strings.Contains(msg, "ApiServerConfig x") {
		t.Errorf("the conflict does not name tenant x: %q", msg)
	}
	now := get(t, &corev1.Secret{ObjectMeta: xs.ObjectMeta})
	if now.ResourceVersion != xs.ResourceVersion {
		t.Fatalf("x's front-proxy CA was written by the other tenant's pass (resourceVersion %s → %s)", xs.ResourceVersion, now.ResourceVersion)
	}
	d := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName(other.Name)}, d); err == nil {
		t.Fatalf("x-front-proxy got a Deployment, which would mount x's CA")
	}
}

// withoutAdmission takes the webhook configurations away until the test
// ends, as on a cluster where the operator runs without its webhooks. A
// dry run of a spec that admission always refuses (an image from outside
// the admitted repositories), in ns, proves that they are away, and then
// back.
func withoutAdmission(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	validating := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	mutating := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	for _, l := range []client.ObjectList{validating, mutating} {
		if err := env.Client.List(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	probe := tenant(ns, "admission-probe", func(s *v1alpha1.ApiServerConfigSpec) { s.Image = "refused.example.com/kube-apiserver:v1" })
	refused := func() bool {
		return apierrors.IsInvalid(env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll))
	}
	if !refused() {
		t.Fatal("admission takes an image from outside the admitted repositories: the probe proves nothing")
	}
	var configs []client.Object
	for i := range validating.Items {
		configs = append(configs, &validating.Items[i])
	}
	for i := range mutating.Items {
		configs = append(configs, &mutating.Items[i])
	}
	for _, c := range configs {
		if err := env.Client.Delete(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "admission is away", func() error {
		if refused() {
			return errors.New("still refused")
		}
		return nil
	})
	t.Cleanup(func() {
		for _, c := range configs {
			c.SetResourceVersion("")
			c.SetUID("")
			if err := env.Client.Create(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, 10*time.Second, "admission is back", func() error {
			if !refused() {
				return errors.New("still taken")
			}
			return nil
		})
	})
}
