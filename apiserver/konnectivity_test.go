package apiserver

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// TestKonnectivityVersion_IsTheOneBuilt: the images the operator renders
// are tagged with the version the Makefile builds, from the module that
// pins it.
func TestKonnectivityVersion_IsTheOneBuilt(t *testing.T) {
	mk, err := os.ReadFile("../hack/localcluster.mk")
	if err != nil {
		t.Fatal(err)
	}
	built := "none"
	if m := regexp.MustCompile(`(?m)^KONNECTIVITY_VERSION \?= (\S+)$`).FindSubmatch(mk); m != nil {
		built = string(m[1])
	}
	if built != KonnectivityVersion {
		t.Errorf("hack/localcluster.mk builds konnectivity %s, the operator renders %s: change both together", built, KonnectivityVersion)
	}
	mod, err := os.ReadFile("networkproxy/tools/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"sigs.k8s.io/apiserver-network-proxy", "sigs.k8s.io/apiserver-network-proxy/konnectivity-client"} {
		if !regexp.MustCompile(`(?m)^\t` + regexp.QuoteMeta(path+" "+KonnectivityVersion) + `( |$)`).Match(mod) {
			t.Errorf("apiserver/networkproxy/tools/go.mod does not require %s %s", path, KonnectivityVersion)
		}
	}
}

// TestValidate_KonnectivityNeedsTheApiserverOnLoopback: the server
// reviews agents' tokens at 127.0.0.1, so an apiserver bound elsewhere is
// refused at the field; without the proxy, the same flag is fine.
func TestValidate_KonnectivityNeedsTheApiserverOnLoopback(t *testing.T) {
	for _, tt := range []struct {
		bind         string
		konnectivity bool
		refused      bool
	}{
		{"10.0.0.5", true, true},
		{"::1", true, true},
		{"0.0.0.0", true, false},
		{"::", true, false},
		{"127.0.0.1", true, false},
		{"10.0.0.5", false, false},
	} {
		cfg := &v1alpha1.ApiServerConfig{Spec: v1alpha1.ApiServerConfigSpec{
			Etcd:      v1alpha1.EtcdSpec{Servers: []string{"https://etcd:2379"}},
			ExtraArgs: []v1alpha1.ExtraArg{{Name: "bind-address", Value: tt.bind}},
		}}
		if tt.konnectivity {
			cfg.Spec.Konnectivity = &v1alpha1.KonnectivitySpec{}
		}
		errs, _ := Validate(cfg)
		refused := slices.ContainsFunc(errs, func(e *field.Error) bool {
			return e.Field == "spec.extraArgs[0].value" && strings.Contains(e.Detail, "konnectivity")
		})
		if refused != tt.refused {
			t.Errorf("bind-address %s with konnectivity %v: refused %v, want %v (%v)", tt.bind, tt.konnectivity, refused, tt.refused, errs)
		}
	}
}

// TestValidate_WarnsWhenTheAgentsDialANameTheCertificateMayLack: a host
// that is neither the external host name nor an extra SAN may be the
// LoadBalancer's address, or a name the agents will refuse: a warning.
func TestValidate_WarnsWhenTheAgentsDialANameTheCertificateMayLack(t *testing.T) {
	for _, tt := range []struct {
		host, external string
		sans           []string
		warns          bool
	}{
		{"edge.example.com", "", nil, true},
		{"edge.example.com", "edge.example.com", nil, false},
		{"203.0.113.7", "edge.example.com", []string{"203.0.113.7"}, false},
		{"", "edge.example.com", nil, false},
	} {
		cfg := &v1alpha1.ApiServerConfig{Spec: v1alpha1.ApiServerConfigSpec{
			Etcd:         v1alpha1.EtcdSpec{Servers: []string{"https://etcd:2379"}},
			Serving:      v1alpha1.ServingSpec{ExternalHostname: tt.external, ExtraSANs: tt.sans},
			Konnectivity: &v1alpha1.KonnectivitySpec{Agent: v1alpha1.KonnectivityAgentSpec{Host: tt.host}},
		}}
		_, warnings := Validate(cfg)
		warned := slices.ContainsFunc(warnings, func(w string) bool { return strings.HasPrefix(w, "spec.konnectivity.agent.host") })
		if warned != tt.warns {
			t.Errorf("host %q, externalHostname %q, extraSANs %v: warned %v, want %v (%v)", tt.host, tt.external, tt.sans, warned, tt.warns, warnings)
		}
	}
}
