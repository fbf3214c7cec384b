package apiserver

import (
	"strings"
	"testing"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(*v1alpha1.ApiServerConfigSpec)
		field   string // empty: valid
		message string
		warning string
	}{{
		name:   "the sample is valid",
		mutate: func(*v1alpha1.ApiServerConfigSpec) {},
	}, {
		name: "a misspelled flag gets a suggestion",
		mutate: func(s *v1alpha1.ApiServerConfigSpec) {
			s.ExtraArgs = []v1alpha1.ExtraArg{{Name: "enable-admision-plugins", Value: "PodNodeSelector"}}
		},
		field:   "spec.extraArgs[0].name",
		message: "kube-apiserver v1.37.1 has no flag --enable-admision-plugins, did you mean --enable-admission-plugins?",
	}, {
		name: "a flag the operator manages is refused with the field to use",
		mutate: func(s *v1alpha1.ApiServerConfigSpec) {
			s.ExtraArgs = []v1alpha1.ExtraArg{{Name: "service-cluster-ip-range", Value: "10.0.0.0/24"}}
		},
		field:   "spec.extraArgs[0].name",
		message: "--service-cluster-ip-range is managed by the operator from spec.serviceClusterIPRange",
	}, {
		name: "a flag the operator manages for the pod is refused with the reason",
		mutate: func(s *v1alpha1.ApiServerConfigSpec) {
			s.ExtraArgs = []v1alpha1.ExtraArg{{Name: "egress-selector-config-file", Value: "/etc/egress.yaml"}}
		},
		field:   "spec.extraArgs[0].name",
		message: "--egress-selector-config-file is managed by the operator (it sends etcd connections through the etcd dialer sidecar) and cannot be set",
	}, {
		name: "a flag managed only in other versions is refused too",
		mutate: func(s *v1alpha1.ApiServerConfigSpec) {
			s.ExtraArgs = []v1alpha1.ExtraArg{{Name: "oidc-issuer-url", Value: "https://x"}}
		},
		field:   "spec.extraArgs[0].name",
		message: "managed by the operator from spec.authentication.oidc.issuerURL",
	}, {
		name: "a single-valued flag given twice is refused",
		mutate: func(s *v1alpha1.ApiServerConfigSpec) {
			s.ExtraArgs = []v1alpha1.ExtraArg{{Name: "goaway-chance", Value: "0.01"}, {Name: "goaway-chance", Value: "0.02"}}
		},
		field:   "spec.extraArgs[1].name",
		message: "keeps only the last value",
	}, {
		name: "a repeatable flag may be given twice",
		mutate: func(s *v1alpha1.ApiServerConfigSpec) {
			s.ExtraArgs = []v1alpha1.ExtraArg{{Name: "cors-allowed-origins", Value: "a"}, {Name: "cors-allowed-origins", Value: "b"}}
		},
	}, {
		name: "a deprecated flag is accepted with a warning",
		mutate: func(s *v1alpha1.ApiServerConfigSpec) {
			s.ExtraArgs = []v1alpha1.ExtraArg{{Name: "kubelet-read-only-port", Value: "0"}}
		},
		warning: "--kubelet-read-only-port is deprecated",
	}, {
		name: "an etcd override of an unknown resource is refused with a suggestion",
		mutate: func(s *v1alpha1.ApiServerConfigSpec) {
			s.Etcd.Overrides = []v1alpha1.EtcdOverride{{Resource: "event", Servers: []string{"https://e:2379"}}}
		},
		field:   "spec.etcd.overrides[0].resource",
		message: `stores no resource "event" in group "", did you mean "events"?`,
	}, {
		name: "an etcd override in the wrong group is refused",
		mutate: func(s *v1alpha1.ApiServerConfigSpec) {
			s.Etcd.Overrides = []v1alpha1.EtcdOverride{{Group: "apps", Resource: "leases", Servers: []string{"https://e:2379"}}}
		},
		field:   "spec.etcd.overrides[0].resource",
		message: `stores no resource "leases" in group "apps"`,
	}, {
		name: "a disabled watch cache of an unknown resource is refused",
		mutate: func(s *v1alpha1.ApiServerConfigSpec) {
			s.CacheSizing.DisabledResources = []v1alpha1.GroupResource{{Resource: "podz"}}
		},
		field:   "spec.cacheSizing.disabledResources[0].resource",
		message: `did you mean "pods"?`,
	}, {
		name:    "an unknown feature gate is refused with a suggestion",
		mutate:  func(s *v1alpha1.ApiServerConfigSpec) { s.FeatureGates = map[string]bool{"WatchLists": true} },
		field:   "spec.featureGates[WatchLists]",
		message: "has no feature gate WatchLists, did you mean WatchList?",
	}, {
		name: "a gate locked to its default cannot be flipped",
		mutate: func(s *v1alpha1.ApiServerConfigSpec) {
			s.FeatureGates = map[string]bool{"MultiCIDRServiceAllocator": false}
		},
		field:   "spec.featureGates[MultiCIDRServiceAllocator]",
		message: "MultiCIDRServiceAllocator is locked to true",
	}, {
		name:    "an unknown admission plugin is refused",
		mutate:  func(s *v1alpha1.ApiServerConfigSpec) { s.Admission.EnablePlugins = []string{"PodSecurityPolicy"} },
		field:   "spec.admission.enablePlugins[0]",
		message: "has no admission plugin PodSecurityPolicy",
	}, {
		name: "a version older than the operator supports is refused",
		mutate: func(s *v1alpha1.ApiServerConfigSpec) {
			s.Version, s.Image = "v1.18.20", "registry.example.com/kube-apiserver:v1.18.20"
		},
		field:   "spec.version",
		message: "the operator runs kube-apiserver 1.19.0 or later",
	}, {
		name: "another minor is checked by syntax only, with a warning",
		mutate: func(s *v1alpha1.ApiServerConfigSpec) {
			s.Version, s.Image = "v1.35.3", "registry.example.com/kube-apiserver:v1.35.3"
			s.FeatureGates = map[string]bool{"SomethingNew": true}
		},
		warning: "no catalog of kube-apiserver v1.35.3",
	}, {
		name: "removed flags are refused for other versions too",
		mutate: func(s *v1alpha1.ApiServerConfigSpec) {
			s.Version, s.Image = "v1.30.2", "registry.example.com/kube-apiserver:v1.30.2"
			s.ExtraArgs = []v1alpha1.ExtraArg{{Name: "insecure-port", Value: "0"}}
		},
		field:   "spec.extraArgs[0].name",
		message: "kube-apiserver 1.30.2 has no flag --insecure-port",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sample(t, "ha")
			tc.mutate(&cfg.Spec)
			errs, warnings := Validate(cfg)
			if tc.field == "" && len(errs) > 0 {
				t.Fatalf("want no error, got %v", errs.ToAggregate())
			}
			if tc.field != "" {
				found := false
				for _, e := range errs {
					if e.Field == tc.field && strings.Contains(e.Error(), tc.message) {
						found = true
					}
				}
				if !found {
					t.Fatalf("want an error on %s saying %q, got %v", tc.field, tc.message, errs.ToAggregate())
				}
			}
			if tc.warning != "" && !strings.Contains(strings.Join(warnings, "\n"), tc.warning) {
				t.Fatalf("want a warning saying %q, got %q", tc.warning, warnings)
			}
		})
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"enable-admission-plugins", "disable-admission-plugins", "etcd-servers", "etcd-prefix"}
	for typo, want := range map[string]string{
		"enable-admision-plugins": "enable-admission-plugins",
		"etcd-server":             "etcd-servers",
		"etc-prefix":              "etcd-prefix",
		"completely-unrelated":    "",
	} {
		if got := Suggest(typo, known); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", typo, got, want)
		}
	}
}
