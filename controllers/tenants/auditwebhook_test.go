package tenants

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// TestApiServerConfigReconciler_AuditWebhookKubeconfigIsAReference: the
// Secret spec.audit.webhook names is read as the authorization webhook's
// is. Missing, or without its key, it holds the tenant (ReferenceMissing,
// naming the field); once it is there the pods mount it and send audit
// events to the webhook, and a new kubeconfig rolls them, since
// kube-apiserver reads it only at start.
func TestApiServerConfigReconciler_AuditWebhookKubeconfigIsAReference(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "audited", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Audit.Webhook = &v1alpha1.AuditWebhookSpec{KubeconfigSecretName: "audit-webhook"}
	})
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitMissing := func(says string) {
		t.Helper()
		eventually(t, 30*time.Second, "the tenant is held: "+says, func() error {
			got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
			c := conditionOf(got, v1alpha1.ConditionDegraded)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonReferenceMissing || !strings.Contains(c.Message, says) {
				return fmt.Errorf("Degraded is %v", c)
			}
			return nil
		})
	}
	waitMissing("Secret " + ns + "/audit-webhook named by spec.audit.webhook.kubeconfigSecretName does not exist")

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "audit-webhook"}, Data: map[string][]byte{"config": []byte("x")}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	waitMissing("Secret " + ns + "/audit-webhook named by spec.audit.webhook.kubeconfigSecretName has no key kubeconfig")

	// A kubeconfig that would make kube-apiserver send a file of its pod
	// (the ServiceAccount signing key) to the webhook as a token.
	secret.Data = map[string][]byte{"kubeconfig": []byte("apiVersion: v1\nkind: Config\nusers:\n- name: x\n  user: {tokenFile: " + apiserver.ServiceAccountSigningKeyFile + "}\n")}
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a kubeconfig reading a file of the pod is refused", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		c := conditionOf(got, v1alpha1.ConditionStalled)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonReferenceInvalid || !strings.Contains(c.Message, `user "x" reads tokenFile from a file: use token`) {
			return fmt.Errorf("Stalled is %v", c)
		}
		return nil
	})
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName(cfg.Name)}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Deployment of a tenant whose webhook kubeconfig is refused: %v, want none", err)
	}

	secret.Data = map[string][]byte{"kubeconfig": webhookKubeconfig("https://audit.example.com", "{token: first}")}
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)
	if got := argValues(d, "audit-webhook-config-file"); !slices.Equal(got, []string{apiserver.AuditWebhookKubeconfigFile}) {
		t.Errorf("--audit-webhook-config-file is %v, want %s", got, apiserver.AuditWebhookKubeconfigFile)
	}
	if got := argValues(d, "audit-webhook-mode"); !slices.Equal(got, []string{"batch"}) {
		t.Errorf("--audit-webhook-mode is %v, want batch (the default)", got)
	}
	if !slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Secret != nil && v.Secret.SecretName == "audit-webhook"
	}) {
		t.Errorf("no volume of the Secret audit-webhook: %v", d.Spec.Template.Spec.Volumes)
	}
	// The pass that applied the Deployment writes status last.
	eventually(t, 10*time.Second, "no longer stalled once the Secret holds a kubeconfig it may", func() error {
		if c := conditionOf(get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}), v1alpha1.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
			return fmt.Errorf("Stalled is %v", c)
		}
		return nil
	})

	hash := func() string {
		return get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta}).Spec.Template.Annotations[apiserver.ConfigHashAnnotation]
	}
	before := hash()
	secret.Data["kubeconfig"] = webhookKubeconfig("https://audit.example.com", "{token: second}")
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a new audit webhook kubeconfig rolls the pods", func() error {
		if hash() == before {
			return fmt.Errorf("the pod template's %s is still %s", apiserver.ConfigHashAnnotation, before)
		}
		return nil
	})
}
