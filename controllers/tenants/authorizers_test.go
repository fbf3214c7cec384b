package tenants

import (
	"bytes"
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
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// TestApiServerConfigReconciler_AuthorizersAreReloadedWithoutARoll: the
// webhooks of spec.authorization.authorizers name their kubeconfigs'
// Secrets like any reference (a kubeconfig that runs a command is refused
// at once). The chain and copies of the kubeconfigs are one Secret of the
// operator's, which the pods mount whole; a new matchCondition, a new
// kubeconfig or a webhook added rewrites it and leaves the pod template
// alone, for kube-apiserver's reload. Back to modes, the pods roll to
// --authorization-mode, and once they run it the Secret, which holds
// copies of credentials, goes.
func TestApiServerConfigReconciler_AuthorizersAreReloadedWithoutARoll(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	hook := func(name, secret, match string) v1alpha1.Authorizer {
		return v1alpha1.Authorizer{Type: "Webhook", Name: name, Webhook: &v1alpha1.AuthorizerWebhook{KubeconfigSecretName: secret,
			MatchConditions: []v1alpha1.AuthorizerMatchCondition{{Expression: match}}}}
	}
	cfg := tenant(ns, "chained", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Authorization.Authorizers = []v1alpha1.Authorizer{{Type: "Node", Name: "node"}, {Type: "RBAC", Name: "rbac"},
			hook("payments", "payments-authz", "request.resourceAttributes.namespace == 'payments'")}
	})
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	kubeconfig := func(token string) []byte { return webhookKubeconfig("https://authz.example.com", token) }
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "payments-authz"},
		Data: map[string][]byte{"kubeconfig": kubeconfig(`{exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, interactiveMode: Never}}`)}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a kubeconfig that runs a command is refused", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		c := conditionOf(got, v1alpha1.ConditionStalled)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonReferenceInvalid ||
			!strings.Contains(c.Message, "named by spec.authorization.authorizers[2].webhook.kubeconfigSecretName") || !strings.Contains(c.Message, "runs a command") {
			return fmt.Errorf("Stalled is %v", c)
		}
		return nil
	})

	secret.Data["kubeconfig"] = kubeconfig("{token: first}")
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)
	if got := argValues(d, "authorization-config"); !slices.Equal(got, []string{apiserver.AuthorizationConfigFile}) || len(argValues(d, "authorization-mode")) != 0 {
		t.Fatalf("--authorization-config is %v and --authorization-mode %v", got, argValues(d, "authorization-mode"))
	}
	owned := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.AuthorizationSecretName(cfg.Name)}}
	// chain reads the chain in the operator's Secret, and checks that the
	// kubeconfig each webhook names is beside it, as the user wrote it.
	chain := func() (string, error) {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(owned), s); err != nil {
			return "", err
		}
		var a apiserverv1.AuthorizationConfiguration
		if err := yaml.UnmarshalStrict(s.Data[apiserver.AuthorizationConfigKey], &a); err != nil {
			return "", err
		}
		var out []string
		for _, z := range a.Authorizers {
			if z.Webhook == nil {
				out = append(out, z.Name)
				continue
			}
			key := strings.TrimPrefix(*z.Webhook.ConnectionInfo.KubeConfigFile, apiserver.AuthorizationKubeconfigDir+"/")
			user := &corev1.Secret{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: z.Name + "-authz"}, user); err != nil {
				return "", err
			}
			if !bytes.Equal(s.Data[key], user.Data["kubeconfig"]) {
				return "", fmt.Errorf("webhook %s names %s, which does not hold its Secret's kubeconfig", z.Name, key)
			}
			out = append(out, z.Name+"("+z.Webhook.MatchConditions[0].Expression+")")
		}
		return strings.Join(out, " "), nil
	}
	if got, err := chain(); err != nil || got != "node rbac payments(request.resourceAttributes.namespace == 'payments')" {
		t.Fatalf("the chain: %s (%v)", got, err)
	}
	hash := func() string {
		return get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta}).Spec.Template.Annotations[apiserver.ConfigHashAnnotation]
	}
	before := hash()
	converged := func(what, want string) {
		t.Helper()
		eventually(t, 30*time.Second, what, func() error {
			got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
			if got.Status.ObservedGeneration != got.Generation {
				return fmt.Errorf("status describes generation %d of %d", got.Status.ObservedGeneration, got.Generation)
			}
			if c, err := chain(); err != nil || c != want {
				return fmt.Errorf("the chain is %s (%w)", c, err)
			}
			return nil
		})
		if got := hash(); got != before {
			t.Errorf("%s: the pods roll (config hash %s, was %s), where kube-apiserver reloads the chain", what, got, before)
		}
	}

	// A webhook added, with its own Secret.
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "auditors-authz"},
		Data: map[string][]byte{"kubeconfig": kubeconfig("{token: auditors}")}}); err != nil {
		t.Fatal(err)
	}
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) {
		s.Authorization.Authorizers = append(s.Authorization.Authorizers, hook("auditors", "auditors-authz", "'auditors' in request.groups"))
	})
	converged("a webhook added", "node rbac payments(request.resourceAttributes.namespace == 'payments') auditors('auditors' in request.groups)")

	// A new matchCondition.
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) {
		s.Authorization.Authorizers[2].Webhook.MatchConditions[0].Expression = "request.resourceAttributes.namespace == 'billing'"
	})
	converged("a matchCondition changed", "node rbac payments(request.resourceAttributes.namespace == 'billing') auditors('auditors' in request.groups)")

	// New credentials in the user's Secret: copied under a new name.
	secret.Data["kubeconfig"] = kubeconfig("{token: second}")
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	converged("a new kubeconfig", "node rbac payments(request.resourceAttributes.namespace == 'billing') auditors('auditors' in request.groups)")

	// Back to modes: the pods roll to --authorization-mode; once they run
	// it, the chain's Secret goes.
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) { s.Authorization.Authorizers = nil })
	eventually(t, 30*time.Second, "the pods go back to --authorization-mode", func() error {
		d = get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta})
		if got := argValues(d, "authorization-mode"); !slices.Equal(got, []string{"Node,RBAC"}) {
			return fmt.Errorf("--authorization-mode is %v", got)
		}
		return nil
	})
	actAsDeploymentController(t, d)
	eventually(t, 30*time.Second, "the chain's Secret goes", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(owned), &corev1.Secret{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the Secret %s: %w", owned.Name, err)
		}
		return nil
	})
}

// webhookKubeconfig is a webhook's kubeconfig as a user writes it: its
// server and the user's credentials (user, in YAML), inline.
func webhookKubeconfig(server, user string) []byte {
	return []byte("apiVersion: v1\nkind: Config\ncurrent-context: hook\ncontexts:\n- name: hook\n  context: {cluster: hook, user: apiserver}\n" +
		"clusters:\n- name: hook\n  cluster: {server: \"" + server + "\"}\nusers:\n- name: apiserver\n  user: " + user + "\n")
}
