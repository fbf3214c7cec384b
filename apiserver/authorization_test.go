package apiserver

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// withAuthorizers is the minimal sample with a chain of Node, RBAC and a
// webhook asked about one namespace.
func withAuthorizers(t *testing.T) *v1alpha1.ApiServerConfig {
	t.Helper()
	cfg := sample(t, "minimal")
	cfg.Spec.Authorization = v1alpha1.AuthorizationSpec{Authorizers: []v1alpha1.Authorizer{
		{Type: "Node", Name: "node"},
		{Type: "RBAC", Name: "rbac"},
		{Type: "Webhook", Name: "payments", Webhook: &v1alpha1.AuthorizerWebhook{KubeconfigSecretName: "payments-authz",
			Timeout: &metav1.Duration{Duration: 2 * time.Second}, FailurePolicy: "NoOpinion", CacheUnauthorizedRequests: ptr.To(false),
			MatchConditions: []v1alpha1.AuthorizerMatchCondition{{Expression: "request.resourceAttributes.namespace == 'payments'"}}}},
	}}
	return cfg
}

// authorizationMaterial is one PKI for every rendering of a test, whose
// hashes compare: the pods' keys count in the config hash.
var authorizationMaterial struct {
	once sync.Once
	m    Material
}

// desiredWith renders cfg's objects with kubeconfigs as the users'
// Secrets' data, by Secret name.
func desiredWith(t *testing.T, cfg *v1alpha1.ApiServerConfig, kubeconfigs map[string]string) (*Completed, *Objects) {
	t.Helper()
	c := complete(t, cfg, Inputs{})
	authorizationMaterial.once.Do(func() {
		cfg := sample(t, "konnectivity")
		cfg.Name = c.Name
		kc := complete(t, cfg, Inputs{})
		ca := newTestCA(t, kc, "kubernetes")
		authorizationMaterial.m = konnectivityPKI(kc, ca, ca.CertPEM(), newTestCA(t, kc, KonnectivityCACommonName))
	})
	var secrets []*corev1.Secret
	for name, k := range kubeconfigs {
		secrets = append(secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"kubeconfig": []byte(k)}})
	}
	o, err := Desired(c, authorizationMaterial.m, Environment{Referenced: ObjectsData(secrets)})
	if err != nil {
		t.Fatal(err)
	}
	return c, o
}

// TestAuthorizationConfig_RendersTheChainAndItsKubeconfigsInOneSecret:
// authorizers replace --authorization-mode with --authorization-config;
// the configuration and the webhooks' kubeconfigs, copied from the users'
// Secrets, are one Secret the pods mount whole, each kubeconfig under a
// name that changes with its content.
func TestAuthorizationConfig_RendersTheChainAndItsKubeconfigsInOneSecret(t *testing.T) {
	c, o := desiredWith(t, withAuthorizers(t), map[string]string{"payments-authz": "kubeconfig of payments"})
	if slices.ContainsFunc(o.Args, func(a string) bool { return strings.HasPrefix(a, "--authorization-mode") }) ||
		!slices.Contains(o.Args, "--authorization-config="+AuthorizationConfigFile) {
		t.Fatalf("arguments: %v", o.Args)
	}
	s := o.Authorization
	if s == nil || s.Name != AuthorizationSecretName(c.Name) || !slices.Contains(o.Secrets, s) {
		t.Fatalf("the authorization Secret: %v", s)
	}
	key := WebhookKubeconfigKey("payments", []byte("kubeconfig of payments"))
	if string(s.Data[key]) != "kubeconfig of payments" || len(s.Data) != 2 {
		t.Fatalf("the Secret's keys: %v", slices.Sorted(maps.Keys(s.Data)))
	}
	var cfg apiserverv1.AuthorizationConfiguration
	if err := yaml.UnmarshalStrict(s.Data[AuthorizationConfigKey], &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Authorizers) != 3 || cfg.Authorizers[0].Type != "Node" || cfg.Authorizers[1].Type != "RBAC" {
		t.Fatalf("the chain: %+v", cfg.Authorizers)
	}
	w := cfg.Authorizers[2].Webhook
	if w == nil || *w.ConnectionInfo.KubeConfigFile != AuthorizationKubeconfigDir+"/"+key || w.Timeout.Duration != 2*time.Second ||
		w.FailurePolicy != "NoOpinion" || w.SubjectAccessReviewVersion != "v1" || w.MatchConditionSubjectAccessReviewVersion != "v1" ||
		ptr.Deref(w.CacheUnauthorizedRequests, true) || w.MatchConditions[0].Expression != "request.resourceAttributes.namespace == 'payments'" {
		t.Fatalf("the webhook: %+v", w)
	}
	// The pods mount the Secret whole, and the validator is given every
	// file of it.
	files := o.PodFiles(c, nil)
	if string(files[AuthorizationKubeconfigDir+"/"+key]) != "kubeconfig of payments" || len(files[AuthorizationConfigFile]) == 0 {
		t.Errorf("the pod's files lack the chain's: %v", slices.Sorted(maps.Keys(files)))
	}
	for _, v := range o.Deployment.Spec.Template.Spec.Volumes {
		if v.Name == "authorization" && (v.Secret == nil || v.Secret.SecretName != s.Name || v.Secret.Items != nil || ptr.Deref(v.Secret.DefaultMode, 0) != 0o400) {
			t.Errorf("the authorization volume: %+v", v.VolumeSource)
		}
	}
}

// TestConfigHash_ReloadsWebhooksButRollsForNodeAndRBAC: a webhook added,
// changed or given a new kubeconfig leaves the pod template alone
// (kube-apiserver reloads the chain), while Node or RBAC, which it builds
// only at start, roll the pods when they come or go.
func TestConfigHash_ReloadsWebhooksButRollsForNodeAndRBAC(t *testing.T) {
	hooks := map[string]string{"payments-authz": "kubeconfig 1", "audit-authz": "kubeconfig 2"}
	hash := func(cfg *v1alpha1.ApiServerConfig, kubeconfigs map[string]string) string {
		t.Helper()
		_, o := desiredWith(t, cfg, kubeconfigs)
		return o.Deployment.Spec.Template.Annotations[ConfigHashAnnotation]
	}
	base := hash(withAuthorizers(t), hooks)
	for name, change := range map[string]func(*v1alpha1.ApiServerConfig, map[string]string){
		"a webhook added": func(cfg *v1alpha1.ApiServerConfig, _ map[string]string) {
			cfg.Spec.Authorization.Authorizers = append(cfg.Spec.Authorization.Authorizers, v1alpha1.Authorizer{Type: "Webhook", Name: "audit",
				Webhook: &v1alpha1.AuthorizerWebhook{KubeconfigSecretName: "audit-authz"}})
		},
		"a matchCondition changed": func(cfg *v1alpha1.ApiServerConfig, _ map[string]string) {
			cfg.Spec.Authorization.Authorizers[2].Webhook.MatchConditions[0].Expression = "true"
		},
		"a new kubeconfig": func(_ *v1alpha1.ApiServerConfig, k map[string]string) { k["payments-authz"] = "kubeconfig 3" },
		"the webhook removed": func(cfg *v1alpha1.ApiServerConfig, _ map[string]string) {
			cfg.Spec.Authorization.Authorizers = cfg.Spec.Authorization.Authorizers[:2]
		},
	} {
		cfg, k := withAuthorizers(t), map[string]string{}
		for n, v := range hooks {
			k[n] = v
		}
		change(cfg, k)
		if got := hash(cfg, k); got != base {
			t.Errorf("%s: the pods would roll (%s, was %s), where kube-apiserver reloads the chain", name, got, base)
		}
	}
	for name, change := range map[string]func(*v1alpha1.ApiServerConfig){
		"Node removed": func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.Authorization.Authorizers = cfg.Spec.Authorization.Authorizers[1:]
		},
		"modes instead": func(cfg *v1alpha1.ApiServerConfig) { cfg.Spec.Authorization = v1alpha1.AuthorizationSpec{} },
		"AlwaysDeny added": func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.Authorization.Authorizers = append(cfg.Spec.Authorization.Authorizers, v1alpha1.Authorizer{Type: "AlwaysDeny", Name: "deny"})
		},
	} {
		cfg := withAuthorizers(t)
		change(cfg)
		if got := hash(cfg, hooks); got == base {
			t.Errorf("%s: the pods would not roll, and kube-apiserver builds it only at start", name)
		}
	}
	// A new kubeconfig is a new file name in the configuration: that is
	// what makes kube-apiserver load the chain again.
	_, before := desiredWith(t, withAuthorizers(t), hooks)
	_, after := desiredWith(t, withAuthorizers(t), map[string]string{"payments-authz": "kubeconfig 3"})
	if bytes.Equal(before.Authorization.Data[AuthorizationConfigKey], after.Authorization.Data[AuthorizationConfigKey]) {
		t.Error("a new kubeconfig leaves the configuration unchanged: kube-apiserver would keep the old one")
	}
}
