package apiserver

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

func args(t *testing.T, cfg *v1alpha1.ApiServerConfig) []string {
	t.Helper()
	a, err := Args(complete(t, cfg, Inputs{}))
	if err != nil {
		t.Fatalf("rendering the flags of %s: %v", cfg.Name, err)
	}
	return a
}

// flagValues returns the values of --name in args.
func flagValues(args []string, name string) []string {
	var values []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			values = append(values, v)
		}
	}
	return values
}

func TestArgs_Golden(t *testing.T) {
	for _, name := range []string{"minimal", "ha", "dualstack", "autosizing"} {
		t.Run(name, func(t *testing.T) {
			a := args(t, sample(t, name))
			golden(t, "args/"+name+".txt", []byte(strings.Join(a, "\n")+"\n"))
		})
	}
}

func TestArgs_AreSortedExplicitAndStable(t *testing.T) {
	cfg := sample(t, "ha")
	cfg.Spec.FeatureGates = map[string]bool{"WatchList": true, "APIResponseCompression": false, "AnonymousAuthConfigurableEndpoints": true}
	cfg.Spec.RuntimeConfig = map[string]string{"batch/v1": "true", "api/alpha": "false"}
	first := args(t, cfg)
	for range 20 {
		if again := args(t, cfg); !slices.Equal(first, again) {
			t.Fatalf("the same spec rendered two command lines:\n%v\n%v", first, again)
		}
	}
	names := make([]string, len(first))
	for i, a := range first {
		// kube-bench reads --flag=value only: a bare or space-separated flag
		// is misread.
		name, _, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Fatalf("%q is not rendered as --flag=value", a)
		}
		names[i] = name
	}
	if !slices.IsSorted(names) {
		t.Fatalf("flags are not sorted by name: %v", names)
	}
	if got := flagValues(first, "feature-gates"); !slices.Equal(got, []string{"APIResponseCompression=false,AnonymousAuthConfigurableEndpoints=true,WatchList=true"}) {
		t.Fatalf("--feature-gates is %v", got)
	}
}

func TestArgs_MeetTheAutomatedCISChecks(t *testing.T) {
	a := args(t, sample(t, "minimal"))
	want := map[string]string{
		"kubelet-client-certificate":              KubeletClientCertFile, // 1.2.4
		"kubelet-client-key":                      KubeletClientKeyFile,
		"kubelet-certificate-authority":           CAFile,                // 1.2.5
		"authorization-mode":                      "Node,RBAC",           // 1.2.6-1.2.8
		"enable-admission-plugins":                "NodeRestriction",     // 1.2.14
		"profiling":                               "false",               // 1.2.15
		"audit-log-path":                          AuditLogFile,          // 1.2.16
		"audit-log-maxage":                        "30",                  // 1.2.17
		"audit-log-maxbackup":                     "10",                  // 1.2.18
		"audit-log-maxsize":                       "100",                 // 1.2.19
		"service-account-lookup":                  "true",                // 1.2.21
		"service-account-key-file":                ServiceAccountKeyFile, // 1.2.22
		"etcd-certfile":                           EtcdCertFile,          // 1.2.23
		"etcd-keyfile":                            EtcdKeyFile,
		"tls-cert-file":                           ServingCertFile, // 1.2.24
		"tls-private-key-file":                    ServingKeyFile,
		"client-ca-file":                          CAFile,                                // 1.2.25
		"etcd-cafile":                             EtcdCAFile,                            // 1.2.26
		"service-account-extend-token-expiration": "false",                               // 1.2.30
		"tls-cipher-suites":                       strings.Join(secureCipherSuites, ","), // 1.2.29
	}
	for name, value := range want {
		if got := flagValues(a, name); !slices.Equal(got, []string{value}) {
			t.Errorf("--%s is %v, want [%s]", name, got, value)
		}
	}
	for _, forbidden := range []string{"token-auth-file", "anonymous-auth", "insecure-port"} {
		if got := flagValues(a, forbidden); len(got) > 0 {
			t.Errorf("--%s is rendered (%v)", forbidden, got)
		}
	}
}

func TestArgs_ThreeLayers(t *testing.T) {
	cfg := sample(t, "minimal")
	cfg.Spec.ExtraArgs = []v1alpha1.ExtraArg{
		{Name: "allow-privileged", Value: "false"},         // overrides a default
		{Name: "goaway-chance", Value: "0.001"},            // a flag with no typed field
		{Name: "cors-allowed-origins", Value: "a.example"}, // repeated flags are kept, in order
		{Name: "cors-allowed-origins", Value: "b.example"},
		{Name: "enable-aggregator-routing"}, // a bare boolean becomes =true
	}
	a := args(t, cfg)
	checks := map[string][]string{
		"allow-privileged":            {"false"},
		"goaway-chance":               {"0.001"},
		"cors-allowed-origins":        {"a.example", "b.example"},
		"enable-aggregator-routing":   {"true"},
		"enable-bootstrap-token-auth": {"true"},
	}
	for name, want := range checks {
		if got := flagValues(a, name); !slices.Equal(got, want) {
			t.Errorf("--%s is %v, want %v", name, got, want)
		}
	}

	cfg.Spec.ExtraArgs = []v1alpha1.ExtraArg{{Name: "etcd-servers", Value: "https://other:2379"}}
	_, err := Args(complete(t, cfg, Inputs{}))
	if err == nil || !strings.Contains(err.Error(), "spec.etcd.servers") {
		t.Fatalf("a user's --etcd-servers must be refused with the field that owns it, got %v", err)
	}
}

func TestArgs_EtcdOverridesAndAPIServerCount(t *testing.T) {
	cfg := sample(t, "ha")
	a := args(t, cfg)
	wantOverrides := "/events#https://etcd-events.etcd-system.svc:2379,coordination.k8s.io/leases#https://etcd-events.etcd-system.svc:2379"
	if got := flagValues(a, "etcd-servers-overrides"); !slices.Equal(got, []string{wantOverrides}) {
		t.Errorf("--etcd-servers-overrides is %v, want [%s]", got, wantOverrides)
	}
	if got := flagValues(a, "apiserver-count"); len(got) != 0 {
		t.Errorf("--apiserver-count is rendered with the lease reconciler: %v", got)
	}

	cfg.Spec.EndpointReconcilerType = v1alpha1.EndpointReconcilerMasterCount
	for _, replicas := range []int32{3, 5, 0} {
		cfg.Spec.MasterCount = ptr.To(replicas)
		want := max(replicas, 1)
		if got := flagValues(args(t, cfg), "apiserver-count"); !slices.Equal(got, []string{itoa(want)}) {
			t.Errorf("with masterCount %d, --apiserver-count is %v, want [%d]", replicas, got, want)
		}
	}
}

func TestArgs_VersionAware(t *testing.T) {
	cfg := sample(t, "ha")
	cfg.Spec.CacheSizing.TargetRAMMB = ptr.To[int32](4096)

	bundled := args(t, cfg)
	if got := flagValues(bundled, "target-ram-mb"); len(got) != 0 {
		t.Errorf("--target-ram-mb (removed in 1.24) is rendered for %s: %v", v1alpha1.BundledVersion, got)
	}
	if got := flagValues(bundled, "authentication-config"); !slices.Equal(got, []string{AuthenticationConfigFile}) {
		t.Errorf("--authentication-config is %v for %s", got, v1alpha1.BundledVersion)
	}
	if got := flagValues(bundled, "oidc-issuer-url"); len(got) != 0 {
		t.Errorf("--oidc-issuer-url cannot be combined with --authentication-config, got %v", got)
	}

	cfg.Spec.Version, cfg.Spec.Image = "v1.23.17", "registry.example.com/kube-apiserver:v1.23.17"
	old := args(t, cfg)
	for name, want := range map[string]string{
		"target-ram-mb":   "4096",
		"oidc-issuer-url": "https://login.example.com",
		"anonymous-auth":  "false",
	} {
		if got := flagValues(old, name); !slices.Equal(got, []string{want}) {
			t.Errorf("for v1.23.17, --%s is %v, want [%s]", name, got, want)
		}
	}
	if got := flagValues(old, "authentication-config"); len(got) != 0 {
		t.Errorf("--authentication-config is rendered for v1.23.17: %v", got)
	}
}

func TestArgs_EveryManagedFlagExistsInTheBundledBinary(t *testing.T) {
	c := widestSpecs()[0]
	if c.Catalog == nil {
		t.Fatal("no catalog for the bundled version")
	}
	a, err := Args(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range a {
		name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		f, ok := c.Catalog.Flags[name]
		if !ok {
			t.Errorf("--%s is rendered but kube-apiserver %s has no such flag", name, c.Catalog.Version)
		} else if f.Deprecated != "" && name != "apiserver-count" {
			t.Errorf("--%s is rendered but deprecated: %s", name, f.Deprecated)
		}
	}
}
