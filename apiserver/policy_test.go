package apiserver

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// TestValidate_Policy: what kube-apiserver starts with but a hosted
// apiserver must not run with is refused, with the field and the reason;
// the nearby valid choices are admitted.
func TestValidate_Policy(t *testing.T) {
	modes := func(m ...v1alpha1.AuthorizationMode) func(*v1alpha1.ApiServerConfig) {
		return func(c *v1alpha1.ApiServerConfig) { c.Spec.Authorization.Modes = m }
	}
	encrypt := func(r ...string) func(*v1alpha1.ApiServerConfig) {
		return func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Encryption = &v1alpha1.EncryptionSpec{Provider: "secretbox", Resources: r}
		}
	}
	cases := []struct {
		name           string
		mutate         func(*v1alpha1.ApiServerConfig)
		field, message string // empty field: admitted
	}{
		{"Node and RBAC", modes("Node", "RBAC"), "", ""},
		{"RBAC before a webhook", modes("RBAC", "Webhook"), "", ""},
		{"AlwaysAllow", modes("Node", "RBAC", "AlwaysAllow"), "spec.authorization.modes[2]", "authorizes every request"},
		{"AlwaysAllow with the opt-in", func(c *v1alpha1.ApiServerConfig) {
			c.Annotations = map[string]string{AllowAlwaysAllowAnnotation: "true"}
			c.Spec.Authorization.Modes = []v1alpha1.AuthorizationMode{"AlwaysAllow"}
		}, "", ""},
		{"no RBAC", modes("Node"), "spec.authorization.modes", "pods never become Ready"},
		{"AlwaysDeny before RBAC", modes("AlwaysDeny", "RBAC"), "spec.authorization.modes[0]", "never become Ready"},
		{"AlwaysDeny after RBAC", modes("RBAC", "AlwaysDeny"), "", ""},
		{"revoke-ca of the operator's CA", func(c *v1alpha1.ApiServerConfig) {
			c.Annotations = map[string]string{v1alpha1.RevokeCAAnnotation: "leak"}
		}, "", ""},
		{"revoke-ca of a CA of the user's", func(c *v1alpha1.ApiServerConfig) {
			c.Annotations = map[string]string{v1alpha1.RevokeCAAnnotation: "leak"}
			c.Spec.Certificates.CASecretName = "my-ca"
		}, "metadata.annotations[" + v1alpha1.RevokeCAAnnotation + "]", "revokes only the CA it generates"},
		{"the AlwaysDeny admission plugin", func(c *v1alpha1.ApiServerConfig) {
			c.Spec.Admission.EnablePlugins = []string{"PodNodeSelector", "AlwaysDeny"}
		}, "spec.admission.enablePlugins[1]", "refuses every write"},
		{"an IPv6 range of /64", func(c *v1alpha1.ApiServerConfig) {
			c.Spec.ServiceClusterIPRange = []string{"10.96.0.0/16", "fd00:10:96::/64"}
		}, "", ""},
		{"an IPv6 range wider than /64", func(c *v1alpha1.ApiServerConfig) {
			c.Spec.ServiceClusterIPRange = []string{"10.96.0.0/16", "fd00:10:96::/48"}
		}, "spec.serviceClusterIPRange[1]", "must be a /64 or narrower"},
		{"encryption of built-in and custom resources and wildcards", encrypt("secrets", "deployments.apps", "widgets.example.com", "*.rbac.authorization.k8s.io"), "", ""},
		{"a misspelled core resource", encrypt("secret"), "spec.encryption.resources[0]", `did you mean "secrets"?`},
		{"a misspelled resource of a built-in group", encrypt("deployment.apps"), "spec.encryption.resources[0]", `did you mean "deployments.apps"?`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sample(t, "ha")
			tc.mutate(cfg)
			errs, _ := Validate(cfg)
			expectRefusal(t, errs, tc.field, tc.message)
		})
	}
}

// TestValidateUpdate: changes kube-apiserver would take without carrying
// them out, or that lose data, are refused; the others pass.
func TestValidateUpdate(t *testing.T) {
	cases := []struct {
		name           string
		old, new       func(*v1alpha1.ApiServerConfigSpec)
		field, message string
	}{
		{"an unrelated change", nil, func(s *v1alpha1.ApiServerConfigSpec) { s.EventTTL = nil }, "", ""},
		{"a new etcd prefix", nil, func(s *v1alpha1.ApiServerConfigSpec) { s.Etcd.Prefix = "/elsewhere" }, "spec.etcd.prefix", "left behind"},
		{"adding a secondary range", func(s *v1alpha1.ApiServerConfigSpec) { s.ServiceClusterIPRange = []string{"10.96.0.0/16"} },
			func(s *v1alpha1.ApiServerConfigSpec) {
				s.ServiceClusterIPRange = []string{"10.96.0.0/16", "fd00::/108"}
			}, "", ""},
		{"changing the secondary range", func(s *v1alpha1.ApiServerConfigSpec) {
			s.ServiceClusterIPRange = []string{"10.96.0.0/16", "fd00::/108"}
		},
			func(s *v1alpha1.ApiServerConfigSpec) {
				s.ServiceClusterIPRange = []string{"10.96.0.0/16", "fd01::/108"}
			}, "spec.serviceClusterIPRange[1]", "immutable once set"},
		{"dropping the secondary range", func(s *v1alpha1.ApiServerConfigSpec) {
			s.ServiceClusterIPRange = []string{"10.96.0.0/16", "fd00::/108"}
		},
			func(s *v1alpha1.ApiServerConfigSpec) { s.ServiceClusterIPRange = []string{"10.96.0.0/16"} }, "spec.serviceClusterIPRange", "cannot be removed"},
		{"one minor up", func(s *v1alpha1.ApiServerConfigSpec) { s.Version = "v1.36.4" },
			func(s *v1alpha1.ApiServerConfigSpec) { s.Version = "v1.37.1" }, "", ""},
		{"a patch up", func(s *v1alpha1.ApiServerConfigSpec) { s.Version = "v1.37.0" },
			func(s *v1alpha1.ApiServerConfigSpec) { s.Version = "v1.37.1" }, "", ""},
		{"a skipped minor", func(s *v1alpha1.ApiServerConfigSpec) { s.Version = "v1.35.2" },
			func(s *v1alpha1.ApiServerConfigSpec) { s.Version = "v1.37.1" }, "spec.version", "skips a minor version: kube-apiserver upgrades one minor at a time, to v1.36"},
		{"a patch down", nil,
			func(s *v1alpha1.ApiServerConfigSpec) {
				s.Version, s.Image = "v1.37.0", "registry.example.com/kube-apiserver:v1.37.0"
			}, "spec.version", "v1.37.1 to v1.37.0 is a downgrade"},
		{"a minor down", nil,
			func(s *v1alpha1.ApiServerConfigSpec) { s.Version = "v1.36.4" }, "spec.version", "v1.37.1 to v1.36.4 is a downgrade"},
		{"a major up", func(s *v1alpha1.ApiServerConfigSpec) { s.Version = "v1.37.1" },
			func(s *v1alpha1.ApiServerConfigSpec) {
				s.Version, s.Image = "v2.0.0", "registry.example.com/kube-apiserver:v2.0.0"
			}, "spec.version", "skips a minor version"},
		{"upgrading with a feature gate the target removed", func(s *v1alpha1.ApiServerConfigSpec) {
			s.Version, s.FeatureGates = "v1.36.4", map[string]bool{"SidecarContainers": true}
		}, func(s *v1alpha1.ApiServerConfigSpec) { s.Version = "v1.37.1" },
			"spec.featureGates[SidecarContainers]", "the feature gate SidecarContainers was removed in kube-apiserver v1.37.1 (v1.36.4 has it)"},
		{"upgrading with a feature gate the target locked", func(s *v1alpha1.ApiServerConfigSpec) {
			s.Version, s.FeatureGates = "v1.36.4", map[string]bool{"HostnameOverride": false}
		}, func(s *v1alpha1.ApiServerConfigSpec) { s.Version = "v1.37.1" },
			"spec.featureGates[HostnameOverride]", "HostnameOverride is locked to true in kube-apiserver v1.37.1"},
		{"upgrading with a gate set to the target's locked value", func(s *v1alpha1.ApiServerConfigSpec) {
			s.Version, s.FeatureGates = "v1.36.4", map[string]bool{"HostnameOverride": true}
		}, func(s *v1alpha1.ApiServerConfigSpec) { s.Version = "v1.37.1" }, "", ""},
		{"upgrading with an admission plugin the target removed", func(s *v1alpha1.ApiServerConfigSpec) {
			s.Version, s.Admission.DisablePlugins = "v1.36.4", []string{"JobValidation"}
		}, func(s *v1alpha1.ApiServerConfigSpec) { s.Version = "v1.37.1" },
			"spec.admission.disablePlugins[0]", "the admission plugin JobValidation was removed in kube-apiserver v1.37.1"},
		{"upgrading with an API version the target removed", func(s *v1alpha1.ApiServerConfigSpec) {
			s.Version, s.RuntimeConfig = "v1.36.4", map[string]string{"networking.k8s.io/v1beta1": "true"}
		}, func(s *v1alpha1.ApiServerConfigSpec) { s.Version = "v1.37.1" },
			"spec.runtimeConfig[networking.k8s.io/v1beta1]", "the API networking.k8s.io/v1beta1 was removed in kube-apiserver v1.37.1"},
		{"taking out what the target removed with the upgrade", func(s *v1alpha1.ApiServerConfigSpec) {
			s.Version, s.FeatureGates = "v1.36.4", map[string]bool{"SidecarContainers": true}
		}, func(s *v1alpha1.ApiServerConfigSpec) { s.Version, s.FeatureGates = "v1.37.1", nil }, "", ""},
		{"the operator's key to your own configuration", nil,
			func(s *v1alpha1.ApiServerConfigSpec) {
				s.Encryption = &v1alpha1.EncryptionSpec{ConfigSecretName: "mine"}
			},
			"spec.encryption.configSecretName", "set provider: identity first"},
		{"plain text to your own configuration", func(s *v1alpha1.ApiServerConfigSpec) { s.Encryption = &v1alpha1.EncryptionSpec{Provider: "identity"} },
			func(s *v1alpha1.ApiServerConfigSpec) {
				s.Encryption = &v1alpha1.EncryptionSpec{ConfigSecretName: "mine"}
			}, "", ""},
		{"your own configuration to the operator's key", func(s *v1alpha1.ApiServerConfigSpec) {
			s.Encryption = &v1alpha1.EncryptionSpec{ConfigSecretName: "mine"}
		},
			func(s *v1alpha1.ApiServerConfigSpec) { s.Encryption = &v1alpha1.EncryptionSpec{Provider: "aescbc"} }, "spec.encryption.provider", "store plain text first"},
		{"your own configuration to plain text", func(s *v1alpha1.ApiServerConfigSpec) {
			s.Encryption = &v1alpha1.EncryptionSpec{ConfigSecretName: "mine"}
		},
			func(s *v1alpha1.ApiServerConfigSpec) { s.Encryption = &v1alpha1.EncryptionSpec{Provider: "identity"} }, "", ""},
		{"another provider", nil, func(s *v1alpha1.ApiServerConfigSpec) { s.Encryption = &v1alpha1.EncryptionSpec{Provider: "aesgcm"} }, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := sample(t, "ha")
			if tc.old != nil {
				tc.old(&old.Spec)
			}

			cfg := old.DeepCopy()
			tc.new(&cfg.Spec)
			expectRefusal(t, ValidateUpdate(old, cfg), tc.field, tc.message)
		})
	}
}

// expectRefusal checks errs: none when field is empty, else one on field
// that says message.
func expectRefusal(t *testing.T, errs field.ErrorList, path, message string) {
	t.Helper()
	if path == "" {
		if len(errs) > 0 {
			t.Fatalf("refused: %v", errs.ToAggregate())
		}
		return
	}
	for _, e := range errs {
		if e.Field == path && strings.Contains(e.Error(), message) {
			t.Logf("Refused: %v", e)
			return
		}
	}
	t.Fatalf("want %s refused with %q, got %v", path, message, errs.ToAggregate())
}
