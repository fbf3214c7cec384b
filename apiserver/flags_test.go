package apiserver

import (
	"slices"
	"strconv"
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

// TestArgs_PassTheAutomatedCISChecks applies each automated check of
// kube-bench's cis-1.12 API server section to the default rendering, the way
// kube-bench reads a command line: --flag=value.
func TestArgs_PassTheAutomatedCISChecks(t *testing.T) {
	a := args(t, sample(t, "minimal"))
	value := func(name string) (string, bool) {
		v := flagValues(a, name)
		if len(v) == 0 {
			return "", false
		}
		return v[len(v)-1], true
	}
	is := func(name, want string) func() bool {
		return func() bool { v, ok := value(name); return ok && v == want }
	}
	set := func(name string) func() bool {
		return func() bool { v, ok := value(name); return ok && v != "" }
	}
	listHas := func(name, item string) bool {
		v, _ := value(name)
		return slices.Contains(strings.Split(v, ","), item)
	}
	atLeast := func(name string, least int) func() bool {
		return func() bool { v, _ := value(name); n, err := strconv.Atoi(v); return err == nil && n >= least }
	}
	checks := []struct {
		id, what string
		pass     func() bool
	}{
		{"1.2.2", "--token-auth-file is not set", func() bool { _, ok := value("token-auth-file"); return !ok }},
		{"1.2.4", "--kubelet-client-certificate and --kubelet-client-key are set", func() bool { return set("kubelet-client-certificate")() && set("kubelet-client-key")() }},
		{"1.2.5", "--kubelet-certificate-authority is set", set("kubelet-certificate-authority")},
		{"1.2.6", "--authorization-mode does not include AlwaysAllow", func() bool {
			_, ok := value("authorization-mode")
			return ok && !listHas("authorization-mode", "AlwaysAllow")
		}},
		{"1.2.7", "--authorization-mode includes Node", func() bool { return listHas("authorization-mode", "Node") }},
		{"1.2.8", "--authorization-mode includes RBAC", func() bool { return listHas("authorization-mode", "RBAC") }},
		{"1.2.3", "DenyServiceExternalIPs is enabled", func() bool { return listHas("enable-admission-plugins", "DenyServiceExternalIPs") }},
		{"1.2.10", "AlwaysAdmit is not enabled", func() bool { return !listHas("enable-admission-plugins", "AlwaysAdmit") }},
		{"1.2.12", "ServiceAccount is not disabled", func() bool { return !listHas("disable-admission-plugins", "ServiceAccount") }},
		{"1.2.13", "NamespaceLifecycle is not disabled", func() bool { return !listHas("disable-admission-plugins", "NamespaceLifecycle") }},
		{"1.2.14", "NodeRestriction is enabled", func() bool { return listHas("enable-admission-plugins", "NodeRestriction") }},
		{"1.2.15", "--profiling=false", is("profiling", "false")},
		{"1.2.16", "--audit-log-path is set", set("audit-log-path")},
		{"1.2.17", "--audit-log-maxage >= 30", atLeast("audit-log-maxage", 30)},
		{"1.2.18", "--audit-log-maxbackup >= 10", atLeast("audit-log-maxbackup", 10)},
		{"1.2.19", "--audit-log-maxsize >= 100", atLeast("audit-log-maxsize", 100)},
		{"1.2.21", "--service-account-lookup is true", is("service-account-lookup", "true")},
		{"1.2.22", "--service-account-key-file is set", set("service-account-key-file")},
		{"1.2.23", "--etcd-certfile and --etcd-keyfile are set", func() bool { return set("etcd-certfile")() && set("etcd-keyfile")() }},
		{"1.2.24", "--tls-cert-file and --tls-private-key-file are set", func() bool { return set("tls-cert-file")() && set("tls-private-key-file")() }},
		{"1.2.25", "--client-ca-file is set", set("client-ca-file")},
		{"1.2.26", "--etcd-cafile is set", set("etcd-cafile")},
		// 1.2.28, the providers in that file, is TestDefaultEncryption_PassesCIS.
		{"1.2.27", "--encryption-provider-config is set", set("encryption-provider-config")},
		{"1.2.29", "--tls-cipher-suites holds only AES-GCM and ChaCha20 suites", func() bool {
			v, ok := value("tls-cipher-suites")
			if !ok {
				return false
			}
			for _, s := range strings.Split(v, ",") {
				if !strings.Contains(s, "_GCM_") && !strings.Contains(s, "CHACHA20") {
					return false
				}
			}
			return true
		}},
		{"1.2.30", "--service-account-extend-token-expiration=false", is("service-account-extend-token-expiration", "false")},
	}
	for _, c := range checks {
		if !c.pass() {
			t.Errorf("CIS %s fails: want %s", c.id, c.what)
		}
	}
}

// TestArgs_AdmissionPlugins: the operator's plugins are on for every
// tenant, and a user who disables DenyServiceExternalIPs gets it off: not
// rendered as enabled too, which kube-apiserver would refuse.
func TestArgs_AdmissionPlugins(t *testing.T) {
	cases := []struct {
		name              string
		version           string
		admission         v1alpha1.AdmissionSpec
		enabled, disabled []string
	}{
		{name: "the defaults", enabled: []string{"DenyServiceExternalIPs,NodeRestriction"}},
		{name: "a plugin of the user's", admission: v1alpha1.AdmissionSpec{EnablePlugins: []string{"PodNodeSelector", "AlwaysPullImages"}},
			enabled: []string{"AlwaysPullImages,DenyServiceExternalIPs,NodeRestriction,PodNodeSelector"}},
		{name: "DenyServiceExternalIPs also listed by the user", admission: v1alpha1.AdmissionSpec{EnablePlugins: []string{"DenyServiceExternalIPs"}},
			enabled: []string{"DenyServiceExternalIPs,NodeRestriction"}},
		{name: "DenyServiceExternalIPs disabled", admission: v1alpha1.AdmissionSpec{DisablePlugins: []string{"DenyServiceExternalIPs", "DefaultStorageClass"}},
			enabled: []string{"NodeRestriction"}, disabled: []string{"DefaultStorageClass,DenyServiceExternalIPs"}},
		{name: "a version before DenyServiceExternalIPs (1.21)", version: "v1.20.15", enabled: []string{"NodeRestriction"}},
		{name: "the first version with DenyServiceExternalIPs", version: "v1.21.0", enabled: []string{"DenyServiceExternalIPs,NodeRestriction"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sample(t, "minimal")
			if tc.version != "" {
				cfg.Spec.Version, cfg.Spec.Image = tc.version, "registry.example.com/kube-apiserver:"+tc.version
			}
			cfg.Spec.Admission = tc.admission
			a := args(t, cfg)
			if got := flagValues(a, "enable-admission-plugins"); !slices.Equal(got, tc.enabled) {
				t.Errorf("--enable-admission-plugins is %v, want %v", got, tc.enabled)
			}
			if got := flagValues(a, "disable-admission-plugins"); !slices.Equal(got, tc.disabled) {
				t.Errorf("--disable-admission-plugins is %v, want %v", got, tc.disabled)
			}
		})
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
	bundled := 0
	for _, c := range widestSpecs() {
		if !IsBundled(c.Spec.Version) {
			continue
		}
		bundled++
		if c.Catalog == nil {
			t.Fatalf("no catalog for the bundled version %s", c.Spec.Version)
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
				t.Errorf("--%s is rendered for %s but deprecated: %s", name, c.Catalog.Version, f.Deprecated)
			}
		}
	}
	// Each bundled version with modes, then with the authorization chain.
	if bundled != 2*len(v1alpha1.BundledVersions) {
		t.Errorf("checked %d widest specs of bundled versions, want 2 of each of %d", bundled, len(v1alpha1.BundledVersions))
	}
}
