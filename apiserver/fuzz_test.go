package apiserver

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// randomSpec builds a valid ApiServerConfig from seed, drawing every choice
// from what the bundled kube-apiserver accepts: its resources, its feature
// gates, its admission plugins, its unmanaged flags with values of their
// type.
func randomSpec(seed uint64, catalog *Catalog) *v1alpha1.ApiServerConfig {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pick := func(n int) int { return r.IntN(n) }
	coin := func() bool { return r.IntN(2) == 0 }
	sortedKeys := func(m map[string]bool) []string {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return keys
	}

	s := v1alpha1.ApiServerConfigSpec{
		MasterCount:            ptr.To(int32(pick(6))),
		EndpointReconcilerType: []v1alpha1.EndpointReconcilerType{"lease", "master-count", "none"}[pick(3)],
		Etcd: v1alpha1.EtcdSpec{
			Servers: []string{fmt.Sprintf("https://etcd-%d:2379", pick(9))},
			Prefix:  fmt.Sprintf("/tenants/t%d", pick(100)),
		},
		ServiceClusterIPRange: [][]string{{"10.96.0.0/12"}, {"172.20.0.0/16", "fd00:20::/108"}, {"fd00:30::/112"}}[pick(3)],
	}
	if coin() {
		s.Etcd.TLS = &v1alpha1.EtcdTLS{SecretName: "etcd-client"}
	}
	var resources []string
	for gr := range catalog.Resources {
		resources = append(resources, gr.Group+"/"+gr.Resource)
	}
	sort.Strings(resources)
	used := map[string]bool{}
	for range pick(4) {
		gr := resources[pick(len(resources))]
		if used[gr] {
			continue
		}
		used[gr] = true
		group, resource, _ := strings.Cut(gr, "/")
		s.Etcd.Overrides = append(s.Etcd.Overrides, v1alpha1.EtcdOverride{Group: group, Resource: resource,
			Servers: []string{fmt.Sprintf("https://etcd-extra-%d:2379", pick(3))}})
		if coin() {
			s.CacheSizing.DisabledResources = append(s.CacheSizing.DisabledResources, v1alpha1.GroupResource{Group: group, Resource: resource})
		}
	}
	if coin() {
		s.Serving.TLS.MinVersion = "VersionTLS13"
	}
	if coin() {
		s.Serving.ExternalHostname = fmt.Sprintf("api-%d.example.com", pick(50))
	}
	if coin() {
		s.Authentication.OIDC = &v1alpha1.OIDCSpec{IssuerURL: "https://login.example.com", ClientID: "kube", GroupsClaim: "groups"}
	}
	if coin() {
		s.Authentication.ServiceAccount.MaxTokenExpiration = &metav1.Duration{Duration: time.Duration(1+pick(48)) * time.Hour}
	}
	if coin() {
		s.Encryption = &v1alpha1.EncryptionSpec{Provider: []v1alpha1.EncryptionProvider{"secretbox", "aescbc", "aesgcm"}[pick(3)]}
	}
	plugins := make([]string, 0, len(catalog.AdmissionPlugins))
	for name := range catalog.AdmissionPlugins {
		plugins = append(plugins, name)
	}
	sort.Strings(plugins)
	for range pick(3) {
		// EventRateLimit is turned on by its own field, with its limits.
		if p := plugins[pick(len(plugins))]; p != "AlwaysAdmit" && p != "AlwaysDeny" && p != EventRateLimit && !slices.Contains(s.Admission.EnablePlugins, p) {
			s.Admission.EnablePlugins = append(s.Admission.EnablePlugins, p)
		}
	}
	if coin() && !slices.Contains(s.Admission.EnablePlugins, DenyServiceExternalIPs) {
		s.Admission.DisablePlugins = []string{DenyServiceExternalIPs}
	}
	if coin() {
		s.Admission.EventRateLimit = &v1alpha1.EventRateLimitSpec{}
		for _, typ := range []v1alpha1.EventRateLimitType{"Server", "Namespace", "User", "SourceAndObject"} {
			if coin() {
				s.Admission.EventRateLimit.Limits = append(s.Admission.EventRateLimit.Limits,
					v1alpha1.EventRateLimit{Type: typ, QPS: int32(1 + pick(100)), Burst: int32(1 + pick(1000))})
			}
		}
	}
	gates := map[string]bool{}
	for name, g := range catalog.FeatureGates {
		gates[name] = g.LockToDefault
	}
	for _, name := range sortedKeys(gates)[:pick(4)] {
		g := catalog.FeatureGates[name]
		if s.FeatureGates == nil {
			s.FeatureGates = map[string]bool{}
		}
		s.FeatureGates[name] = g.Default || (!g.LockToDefault && coin())
	}
	if coin() {
		s.CacheSizing.Policy = v1alpha1.CacheSizingAuto
		s.CacheSizing.TargetRAMMB = ptr.To(int32(pick(200000)))
	}

	if coin() {
		w := &v1alpha1.AuditWebhookSpec{KubeconfigSecretName: "audit-webhook",
			Mode: []v1alpha1.AuditWebhookMode{"batch", "blocking", "blocking-strict"}[pick(3)]}
		if coin() {
			w.InitialBackoff = &metav1.Duration{Duration: time.Duration(1+pick(30)) * time.Second}
		}
		if w.Mode == v1alpha1.AuditWebhookBatch && coin() {
			w.Batch = &v1alpha1.AuditWebhookBatchSpec{BufferSize: ptr.To(int32(1 + pick(20000))), MaxSize: ptr.To(int32(1 + pick(1000))),
				MaxWait: &metav1.Duration{Duration: time.Duration(1+pick(60)) * time.Second}, ThrottleQPS: ptr.To(int32(1 + pick(50))), ThrottleBurst: ptr.To(int32(1 + pick(50)))}
		}
		if coin() {
			w.Truncate = &v1alpha1.AuditWebhookTruncateSpec{MaxEventBytes: ptr.To(int64(1 + pick(100000))), MaxBatchBytes: ptr.To(int64(100000 + pick(10000000)))}
		}
		s.Audit.Webhook = w
	}

	// Unmanaged flags of scalar types, with values of their type.
	managed := ManagedFlagFields()
	var free []string
	for _, name := range catalog.FlagNames() {
		f := catalog.Flags[name]
		if _, isManaged := managed[name]; !isManaged && f.Deprecated == "" && scalarValue(f.Type, 0) != "" {
			free = append(free, name)
		}
	}
	for range pick(5) {
		name := free[pick(len(free))]
		if slices.ContainsFunc(s.ExtraArgs, func(a v1alpha1.ExtraArg) bool { return a.Name == name }) {
			continue
		}
		s.ExtraArgs = append(s.ExtraArgs, v1alpha1.ExtraArg{Name: name, Value: scalarValue(catalog.Flags[name].Type, pick(100))})
	}
	return &v1alpha1.ApiServerConfig{ObjectMeta: metav1.ObjectMeta{Name: "fuzz", Namespace: "fuzz"}, Spec: s}
}

// scalarValue is a value of a flag type, or "" for types the generator does
// not produce.
func scalarValue(typ string, n int) string {
	switch typ {
	case "bool":
		return []string{"true", "false"}[n%2]
	case "int", "int32", "int64", "uint":
		return fmt.Sprint(n)
	case "duration":
		return fmt.Sprintf("%ds", n+1)
	}
	return ""
}

// FuzzArgs renders random valid specs and checks the command line against
// the bundled kube-apiserver: every flag exists and is not deprecated
// (except --apiserver-count, which only the deprecated master-count
// reconciler reads), single-valued flags appear once, and the rendering is
// stable. `go test` runs the seeds; `go test -fuzz FuzzArgs ./apiserver/`
// explores further.
func FuzzArgs(f *testing.F) {
	for seed := range uint64(64) {
		f.Add(seed)
	}
	bundled, err := CatalogFor(mustVersion(v1alpha1.BundledVersion))
	if err != nil || bundled == nil {
		f.Fatalf("no catalog for the bundled version: %v", err)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		cfg := randomSpec(seed, bundled)
		if errs, _ := Validate(cfg); len(errs) > 0 {
			t.Fatalf("a spec built from valid choices was refused: %v", errs.ToAggregate())
		}
		c, err := Complete(cfg, Inputs{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := Args(c)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := Args(c)
		if !slices.Equal(a, again) {
			t.Fatal("two renderings of one spec differ")
		}
		count := map[string]int{}
		for _, arg := range a {
			name, _, ok := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
			if !strings.HasPrefix(arg, "--") || !ok {
				t.Fatalf("%q is not --flag=value", arg)
			}
			fl, known := bundled.Flags[name]
			if !known {
				t.Fatalf("--%s is rendered but kube-apiserver %s has no such flag", name, bundled.Version)
			}
			if fl.Deprecated != "" && name != "apiserver-count" {
				t.Fatalf("--%s is rendered but deprecated", name)
			}
			count[name]++
			if count[name] > 1 && !fl.Repeatable {
				t.Fatalf("--%s is rendered twice but kube-apiserver keeps only the last value", name)
			}
		}
	})
}

func mustVersion(v string) *utilversion.Version { return utilversion.MustParseSemantic(v) }
