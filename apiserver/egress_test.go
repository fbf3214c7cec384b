package apiserver

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiserverv1beta1 "k8s.io/apiserver/pkg/apis/apiserver/v1beta1"
	"sigs.k8s.io/yaml"
)

// The platform's ranges reach the dialer sidecar's egress filter, each
// once and in order, with the addresses of the pod and its node from the
// downward API; every egress selection but etcd's goes to the filter,
// except "cluster" with the network proxy, which goes into the tenant's
// nodes.
func TestDesiredDeployment_EgressFilter(t *testing.T) {
	egress := EgressRanges{
		Denied:  []netip.Prefix{netip.MustParsePrefix("192.168.0.0/24"), netip.MustParsePrefix("10.88.0.0/16"), netip.MustParsePrefix("10.88.1.2/16")},
		Allowed: []netip.Prefix{netip.MustParsePrefix("10.88.7.0/24")},
	}
	for _, name := range []string{"minimal", "konnectivity"} {
		c := complete(t, sample(t, name), Inputs{})
		a, err := Args(c)
		if err != nil {
			t.Fatal(err)
		}
		d, err := desiredDeployment(c, a, DeploymentInputs{Objects: func(string, string) map[string][]byte { return nil }, Egress: egress})
		if err != nil {
			t.Fatal(err)
		}
		var dialer *corev1.Container
		for i, ctr := range d.Spec.Template.Spec.InitContainers {
			if ctr.Name == "etcd-dialer" {
				dialer = &d.Spec.Template.Spec.InitContainers[i]
			}
		}
		if dialer == nil {
			t.Fatalf("%s: no etcd-dialer sidecar", name)
		}
		for _, want := range []string{"--egress-socket=" + EgressFilterSocket, "--egress-deny=10.88.0.0/16,192.168.0.0/24", "--egress-allow=10.88.7.0/24"} {
			if !slices.Contains(dialer.Args, want) {
				t.Errorf("%s: the sidecar's arguments %q lack %s", name, dialer.Args, want)
			}
		}
		fields := map[string]string{}
		for _, e := range dialer.Env {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				fields[e.Name] = e.ValueFrom.FieldRef.FieldPath
			}
		}
		if fields[EgressHostIPsEnv] != "status.hostIPs" || fields[EgressPodIPsEnv] != "status.podIPs" {
			t.Errorf("%s: the sidecar's environment from the downward API is %v, want HOST_IPS=status.hostIPs and POD_IPS=status.podIPs", name, fields)
		}

		data, err := EgressSelectorConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		var cfg apiserverv1beta1.EgressSelectorConfiguration
		if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
			t.Fatal(err)
		}
		sockets := map[string]string{}
		for _, s := range cfg.EgressSelections {
			sockets[s.Name] = s.Connection.Transport.UDS.UDSName
		}
		cluster := EgressClusterSocket
		if name == "konnectivity" {
			cluster = KonnectivitySocket
		}
		if got := slices.Contains(dialer.Args, "--egress-cluster-socket="+EgressClusterSocket); got != (name != "konnectivity") {
			t.Errorf("%s: the sidecar serves the cluster egress: %v, want %v", name, got, name != "konnectivity")
		}
		if want := map[string]string{"etcd": EtcdDialerSocket, "controlplane": EgressFilterSocket, "cluster": cluster}; !maps.Equal(sockets, want) {
			t.Errorf("%s: the egress selections go to %v, want %v", name, sockets, want)
		}
	}
}
