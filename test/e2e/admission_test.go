//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// Scenario 8: wrong specs of every class kube-apiserver would refuse at
// start (or run wrongly) are refused at `kubectl apply`, judged by the
// bundled kube-apiserver's own code in the operator's pod, with the field
// and the reason; nothing is created for them. Wrong updates of a running
// tenant are refused the same way and change nothing.
func TestOperator_WrongSpecsAreRefusedAtApplyAndCreateNothing(t *testing.T) {
	installOperator(t)
	c := ctrlClient(t)
	ns := tenantNamespace(t)

	arg := func(name, value string) func(*v1alpha1.ApiServerConfig) {
		return func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.ExtraArgs = append(cfg.Spec.ExtraArgs, v1alpha1.ExtraArg{Name: name, Value: value})
		}
	}
	cases := []struct {
		name, field, want string
		mutate            func(*v1alpha1.ApiServerConfig)
	}{
		{"goaway", "spec.extraArgs[0].value", "--goaway-chance can not be less than 0 or greater than 0.02", arg("goaway-chance", "0.5")},
		{"negative-duration", "spec.extraArgs[0].value", "--livez-grace-period can not be a negative value", arg("livez-grace-period", "-1s")},
		{"audit-format", "spec.extraArgs[0].value", "invalid audit log format", arg("audit-log-format", "xml")},
		{"admission-control", "spec.extraArgs[0].value", "mutually exclusive", arg("admission-control", "NamespaceLifecycle")},
		// Two flags that only conflict together (encryption, which the
		// reload flag needed, is now on by default).
		{"lease-under-deadline", "spec.extraArgs[0].value", "must be greater than --coordinated-leadership-renew-deadline", arg("coordinated-leadership-lease-duration", "5s")},
		{"image-policy", "spec.admission.enablePlugins", `couldn't init admission plugin "ImagePolicyWebhook"`, func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.Admission.EnablePlugins = []string{"ImagePolicyWebhook"}
		}},
		{"oidc-query", "spec.authentication", "URL must not contain a query", func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.Authentication.OIDC = &v1alpha1.OIDCSpec{IssuerURL: "https://login.example.com?x=1", ClientID: "kube"}
		}},
		{"encrypt-star", "spec.encryption", "use '*.' to encrypt all the resources", func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.Encryption = &v1alpha1.EncryptionSpec{Provider: "secretbox", Resources: []string{"*"}}
		}},
		{"encrypt-typo", "spec.encryption.resources[0]", `did you mean "secrets"?`, func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.Encryption = &v1alpha1.EncryptionSpec{Provider: "secretbox", Resources: []string{"secret"}}
		}},
		{"runtime-config", "spec.runtimeConfig", "batch/v2alpha1 that has not been registered", func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.RuntimeConfig = map[string]string{"batch/v2alpha1": "true"}
		}},
		{"always-allow", "spec.authorization.modes[2]", "authorizes every request", func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.Authorization.Modes = []v1alpha1.AuthorizationMode{"Node", "RBAC", "AlwaysAllow"}
		}},
		{"no-rbac", "spec.authorization.modes", "must include RBAC", func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.Authorization.Modes = []v1alpha1.AuthorizationMode{"Node"}
		}},
		{"wide-ipv6", "spec.serviceClusterIPRange[1]", "must be a /64 or narrower", func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.ServiceClusterIPRange = []string{"10.96.0.0/16", "fd00:10:96::/48"}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := localTenant(t, ns, "wrong-"+tc.name)
			tc.mutate(cfg)
			cfg.TypeMeta.APIVersion, cfg.TypeMeta.Kind = v1alpha1.GroupVersion.String(), "ApiServerConfig"
			manifest, err := yamlOf(cfg)
			if err != nil {
				t.Fatal(err)
			}
			out, err := run(t, manifest, "kubectl", "apply", "--server-side", "-f", "-")
			if err == nil {
				t.Fatalf("kubectl apply was accepted:\n%s", out)
			}
			if !strings.Contains(out, tc.field) || !strings.Contains(out, tc.want) {
				t.Fatalf("kubectl apply printed\n%s\nwant it to name %s and say %q", out, tc.field, tc.want)
			}
			t.Logf("Refused: %s", strings.TrimSpace(out))
		})
	}

	// Nothing was created for any of them.
	ctx := context.Background()
	var configs v1alpha1.ApiServerConfigList
	var deployments appsv1.DeploymentList
	var secrets corev1.SecretList
	for _, list := range []client.ObjectList{&configs, &deployments, &secrets} {
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(configs.Items) + len(deployments.Items); n > 0 {
		t.Fatalf("refused specs left %d ApiServerConfigs and %d Deployments", len(configs.Items), len(deployments.Items))
	}
	for _, s := range secrets.Items {
		if strings.HasPrefix(s.Name, "wrong-") {
			t.Fatalf("a refused spec left Secret %s", s.Name)
		}
	}

	// Updates of a running tenant: refused, and the tenant is unchanged.
	cfg := localTenant(t, ns, "running")
	if err := c.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, cfg, 3*time.Minute)
	before := &v1alpha1.ApiServerConfig{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cfg), before); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ patch, want string }{
		{`{"spec":{"etcd":{"prefix":"/elsewhere"}}}`, "spec.etcd.prefix"},
		{`{"spec":{"extraArgs":[{"name":"storage-media-type","value":"application/xml"}]}}`, "--storage-media-type"},
		{`{"spec":{"featureGates":{"MultiCIDRServiceAllocator":false}}}`, "locked to true"},
	} {
		out, err := run(t, nil, "kubectl", "-n", ns, "patch", "asc/running", "--type=merge", "-p", tc.patch)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("kubectl patch %s: err %v, printed\n%s\nwant a refusal saying %q", tc.patch, err, out, tc.want)
		}
	}
	after := &v1alpha1.ApiServerConfig{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cfg), after); err != nil {
		t.Fatal(err)
	}
	if after.Generation != before.Generation {
		t.Fatalf("refused patches changed the spec (generation %d -> %d)", before.Generation, after.Generation)
	}
}
