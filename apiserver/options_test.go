package apiserver

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with the current output")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s (run go test ./apiserver/ -update to create it): %v", path, err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Fatalf("%s differs from the output (-golden +got); run go test ./apiserver/ -update if the change is intended:\n%s", path, diff)
	}
}

// sample reads a sample of config/samples as the operator would get it.
func sample(t *testing.T, name string) *v1alpha1.ApiServerConfig {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "config", "samples", "controlplane_v1alpha1_apiserverconfig_"+name+".yaml"))
	if err != nil {
		t.Fatalf("reading sample %s: %v", name, err)
	}
	cfg := &v1alpha1.ApiServerConfig{}
	if err := yaml.UnmarshalStrict(data, cfg); err != nil {
		t.Fatalf("decoding sample %s: %v", name, err)
	}
	cfg.Namespace = "tenants"
	return cfg
}

func complete(t *testing.T, cfg *v1alpha1.ApiServerConfig, in Inputs) *Completed {
	t.Helper()
	c, err := Complete(cfg, in)
	if err != nil {
		t.Fatalf("completing %s: %v", cfg.Name, err)
	}
	return c
}

func TestFirstServiceIP(t *testing.T) {
	cases := map[string]string{
		"10.96.0.0/12":      "10.96.0.1",
		"10.0.0.0/24":       "10.0.0.1",
		"192.168.10.0/29":   "192.168.10.1",
		"fd00:10:96::/108":  "fd00:10:96::1",
		"2001:db8:1::/112":  "2001:db8:1::1",
		"172.16.128.0/17":   "172.16.128.1",
		"fd00::/64":         "fd00::1",
		"100.64.255.248/29": "100.64.255.249",
	}
	for cidr, want := range cases {
		got, err := FirstServiceIP(netip.MustParsePrefix(cidr))
		if err != nil || got.String() != want {
			t.Errorf("FirstServiceIP(%s) = %v, %v; want %s", cidr, got, err, want)
		}
	}
}

func TestComplete_ServingSANsCoverEveryWayToReachTheAPIServer(t *testing.T) {
	cfg := sample(t, "dualstack")
	cfg.Spec.ClusterDomain = "tenant.example"
	cfg.Spec.Serving.ExternalHostname = "API.dualstack.example.com"
	cfg.Spec.Serving.ExtraSANs = []string{"203.0.113.10", "*.apps.example.com"}
	c := complete(t, cfg, Inputs{ServiceClusterIP: "10.43.12.7", ServiceIngress: []string{"198.51.100.4", "lb.example.net"}})

	for _, want := range []string{
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.tenant.example",
		"dualstack-apiserver", "dualstack-apiserver.tenants", "dualstack-apiserver.tenants.svc",
		"dualstack-apiserver.tenants.svc.cluster.local", "api.dualstack.example.com", "*.apps.example.com",
		"lb.example.net", "localhost",
	} {
		if !slices.Contains(c.SANs.DNSNames, want) {
			t.Errorf("the serving certificate lacks DNS name %q; has %v", want, c.SANs.DNSNames)
		}
	}
	var ips []string
	for _, ip := range c.SANs.IPs {
		ips = append(ips, ip.String())
	}
	// Both ranges' first addresses: clients of either family reach the
	// `kubernetes` Service.
	for _, want := range []string{"10.112.0.1", "fd00:10:112::1", "10.43.12.7", "198.51.100.4", "203.0.113.10", "127.0.0.1", "::1"} {
		if !slices.Contains(ips, want) {
			t.Errorf("the serving certificate lacks IP %s; has %v", want, ips)
		}
	}
	if c.Endpoint != "https://api.dualstack.example.com:443" && c.Endpoint != "https://API.dualstack.example.com:443" {
		t.Errorf("endpoint is %s, want the external host name on the Service port", c.Endpoint)
	}
	if got := c.ServiceAccountIssuers; !slices.Equal(got, []string{"https://kubernetes.default.svc.tenant.example"}) {
		t.Errorf("default service account issuer is %v", got)
	}
}

func TestComplete_EndpointWithoutExternalHostnameIsTheServiceName(t *testing.T) {
	c := complete(t, sample(t, "minimal"), Inputs{})
	if want := "https://minimal-apiserver.tenants.svc:443"; c.Endpoint != want {
		t.Fatalf("endpoint is %s, want %s", c.Endpoint, want)
	}
	if c.Version.String() != strings.TrimPrefix(v1alpha1.BundledVersion, "v") || c.Catalog == nil {
		t.Fatalf("the minimal sample should run the bundled version with its catalog, got %s (catalog %v)", c.Version, c.Catalog != nil)
	}
}

func TestComplete_IsPure(t *testing.T) {
	cfg := sample(t, "ha")
	before := cfg.DeepCopy()
	a := complete(t, cfg, Inputs{})
	b := complete(t, cfg, Inputs{})
	if diff := cmp.Diff(before, cfg); diff != "" {
		t.Fatalf("Complete modified its input:\n%s", diff)
	}
	if diff := cmp.Diff(a.SANs, b.SANs); diff != "" {
		t.Fatalf("two completions of one spec differ:\n%s", diff)
	}
}
