package apiserver

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

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

// A scale of a tenant with the proxy changes the number of apiservers,
// never their pod template: the agents count the servers' Leases, no flag
// of the pod says how many there are.
func TestDesiredDeployment_KonnectivityScaleRollsNoPod(t *testing.T) {
	cfg := sample(t, "konnectivity")
	templates := map[int32]corev1.PodTemplateSpec{}
	for _, replicas := range []int32{1, 2, 5} {
		cfg.Spec.MasterCount = ptr.To(replicas)
		_, d, _, _ := desiredObjectsOf(t, cfg)
		if !slices.ContainsFunc(d.Spec.Template.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == "konnectivity-server" }) {
			t.Fatalf("masterCount %d: the pod runs no konnectivity server", replicas)
		}
		templates[replicas] = d.Spec.Template
	}
	for _, replicas := range []int32{2, 5} {
		if diff := cmp.Diff(templates[1], templates[replicas]); diff != "" {
			t.Errorf("the pod template of masterCount %d differs from that of 1 (a scale would roll every pod):\n%s", replicas, diff)
		}
	}
}

// The agents reach the apiservers, to count the servers, where they reach
// the servers: on the agents' host, at the Service's ports or node ports.
func TestKonnectivityAgentKubeconfig_ReachesTheApiserversWhereTheNodesDo(t *testing.T) {
	for name, tt := range map[string]struct {
		edit            func(*v1alpha1.ApiServerConfigSpec)
		want, wantAgent string
	}{
		"the sample": {func(*v1alpha1.ApiServerConfigSpec) {}, "https://konnectivity.tenants.example.com:443", "8132"},
		"agents' own ports": {func(s *v1alpha1.ApiServerConfigSpec) {
			s.Konnectivity.Agent.APIPort, s.Konnectivity.Agent.Port = ptr.To[int32](8443), ptr.To[int32](9132)
		}, "https://konnectivity.tenants.example.com:8443", "9132"},
		"agents' own host": {func(s *v1alpha1.ApiServerConfigSpec) { s.Konnectivity.Agent.Host = "10.1.2.3" }, "https://10.1.2.3:443", "8132"},
		"a NodePort Service": {func(s *v1alpha1.ApiServerConfigSpec) {
			s.Serving.Service.Type, s.Serving.Service.NodePort, s.Konnectivity.NodePort = corev1.ServiceTypeNodePort, ptr.To[int32](30443), ptr.To[int32](30132)
		}, "https://konnectivity.tenants.example.com:30443", "30132"},
		"a load balancer's node ports": {func(s *v1alpha1.ApiServerConfigSpec) {
			s.Serving.Service.NodePort, s.Konnectivity.NodePort = ptr.To[int32](30443), ptr.To[int32](30132)
		}, "https://konnectivity.tenants.example.com:443", "8132"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := sample(t, "konnectivity")
			tt.edit(&cfg.Spec)
			data, err := konnectivityAgentKubeconfig(complete(t, cfg, Inputs{}))
			if err != nil {
				t.Fatal(err)
			}
			kc, err := clientcmd.Load(data)
			if err != nil {
				t.Fatal(err)
			}
			cluster := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]
			if cluster.Server != tt.want {
				t.Errorf("the agents' kubeconfig names %s, want %s", cluster.Server, tt.want)
			}
			if user := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]; user.TokenFile != konnectivityAgentAPITokenFile || cluster.CertificateAuthority != konnectivityAgentCAFile {
				t.Errorf("the agents' kubeconfig reads %s and %s, want the automounted token and CA bundle", user.TokenFile, cluster.CertificateAuthority)
			}
			objects, err := KonnectivityAgentObjects(complete(t, cfg, Inputs{}), "")
			if err != nil {
				t.Fatal(err)
			}
			daemonSets := 0
			for _, o := range objects {
				if ds, ok := o.(*appsv1.DaemonSet); ok {
					daemonSets++
					if !slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--proxy-server-port="+tt.wantAgent) {
						t.Errorf("the agents dial %q, want port %s", ds.Spec.Template.Spec.Containers[0].Args, tt.wantAgent)
					}
				}
			}
			if daemonSets != 1 {
				t.Errorf("the agents' manifests hold %d DaemonSets, want 1", daemonSets)
			}
		})
	}
}

// On a NodePort Service whose node ports are allocated, the agents'
// manifests cannot name them: admission warns, once per port left out.
func TestValidate_WarnsWhenTheAgentsWouldDialAnAllocatedNodePort(t *testing.T) {
	for _, tt := range []struct {
		name                         string
		agentPort, konnNode, apiPort *int32
		serviceNode                  *int32
		wantAgentPort, wantAPIPort   bool
	}{
		{name: "nothing fixed", wantAgentPort: true, wantAPIPort: true},
		{name: "node ports fixed", konnNode: ptr.To[int32](30132), serviceNode: ptr.To[int32](30443)},
		{name: "agents' ports given", agentPort: ptr.To[int32](8132), apiPort: ptr.To[int32](443)},
		{name: "only the agents' port", konnNode: ptr.To[int32](30132), wantAPIPort: true},
	} {
		cfg := &v1alpha1.ApiServerConfig{Spec: v1alpha1.ApiServerConfigSpec{
			Etcd: v1alpha1.EtcdSpec{Servers: []string{"https://etcd:2379"}},
			Serving: v1alpha1.ServingSpec{ExternalHostname: "edge.example.com",
				Service: v1alpha1.ServiceSpec{Type: corev1.ServiceTypeNodePort, NodePort: tt.serviceNode}},
			Konnectivity: &v1alpha1.KonnectivitySpec{NodePort: tt.konnNode, Agent: v1alpha1.KonnectivityAgentSpec{Port: tt.agentPort, APIPort: tt.apiPort}},
		}}
		_, warnings := Validate(cfg)
		for prefix, want := range map[string]bool{"spec.konnectivity.agent.port:": tt.wantAgentPort, "spec.konnectivity.agent.apiPort:": tt.wantAPIPort} {
			if got := slices.ContainsFunc(warnings, func(w string) bool { return strings.HasPrefix(w, prefix) }); got != want {
				t.Errorf("%s: warned about %s %v, want %v (%v)", tt.name, prefix, got, want, warnings)
			}
		}
	}
}

// The agents read their kubeconfig once, at start: a change of where they
// reach the apiservers changes their pod template, so that they roll.
func TestKonnectivityAgentObjects_ANewKubeconfigRollsTheAgents(t *testing.T) {
	hash := func(edit func(*v1alpha1.ApiServerConfigSpec)) string {
		cfg := sample(t, "konnectivity")
		edit(&cfg.Spec)
		objects, err := KonnectivityAgentObjects(complete(t, cfg, Inputs{}), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objects {
			if ds, ok := o.(*appsv1.DaemonSet); ok {
				return ds.Spec.Template.Annotations[KonnectivityAgentKubeconfigHashAnnotation]
			}
		}
		t.Fatal("the agents' manifests hold no DaemonSet")
		return ""
	}
	same, before := hash(func(*v1alpha1.ApiServerConfigSpec) {}), hash(func(*v1alpha1.ApiServerConfigSpec) {})
	after := hash(func(s *v1alpha1.ApiServerConfigSpec) { s.Konnectivity.Agent.APIPort = ptr.To[int32](6443) })
	if before == "" || before != same || before == after {
		t.Errorf("the agents' template hashes its kubeconfig as %q, %q again, %q for another apiPort: want one stable hash that changes with it", before, same, after)
	}
}
