package v1alpha1_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	controlplanev1alpha1 "github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/test/envtest"
)

func TestApiServerConfig_AcceptsEverySample(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(envtest.RepoRoot(), "config", "samples", "controlplane_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("finding the samples in config/samples: %v (found %d)", err, len(files))
	}
	ns := newNamespace(t)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("reading %s: %v", file, err)
			}
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(data, &obj.Object); err != nil {
				t.Fatalf("decoding %s: %v", file, err)
			}
			obj.SetNamespace(ns)
			if err := env.Client.Create(context.Background(), obj); err != nil {
				t.Fatalf("the apiserver refused sample %s: %v", filepath.Base(file), err)
			}
		})
	}
}

func TestApiServerConfig_DefaultsAreSecureAndComplete(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	obj := manifest(t, ns)
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatalf("creating the object: %v", err)
	}
	got := &controlplanev1alpha1.ApiServerConfig{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatalf("reading the object back: %v", err)
	}
	s := got.Spec
	checks := []struct {
		what      string
		got, want any
	}{
		{"version", s.Version, controlplanev1alpha1.BundledVersion},
		{"masterCount", *s.MasterCount, int32(1)},
		{"endpointReconcilerType", s.EndpointReconcilerType, controlplanev1alpha1.EndpointReconcilerLease},
		{"serviceNodePortRange", s.ServiceNodePortRange, "30000-32767"},
		{"clusterDomain", s.ClusterDomain, "cluster.local"},
		// None from the CRD: the mutating webhook (not running here) gives a
		// new tenant a prefix of its own.
		{"etcd.prefix", s.Etcd.Prefix, ""},
		{"etcd.tls.caKey", s.Etcd.TLS.CAKey, "ca.crt"},
		{"serving.securePort", s.Serving.SecurePort, int32(6443)},
		{"serving.tls.minVersion", s.Serving.TLS.MinVersion, "VersionTLS12"},
		{"serving.service.type", string(s.Serving.Service.Type), "ClusterIP"},
		{"serving.service.port", s.Serving.Service.Port, int32(443)},
		{"authentication.anonymous (CIS 1.2.1)", *s.Authentication.Anonymous, false},
		{"serviceAccount.extendTokenExpiration (CIS 1.2.30)", *s.Authentication.ServiceAccount.ExtendTokenExpiration, false},
		{"authorization.modes (CIS 1.2.7, 1.2.8)", s.Authorization.Modes, []controlplanev1alpha1.AuthorizationMode{"Node", "RBAC"}},
		{"audit.maxAge (CIS 1.2.17)", *s.Audit.MaxAge, int32(30)},
		{"audit.maxBackups (CIS 1.2.18)", *s.Audit.MaxBackups, int32(10)},
		{"audit.maxSizeMB (CIS 1.2.19)", *s.Audit.MaxSizeMB, int32(100)},
		{"profiling (CIS 1.2.15)", *s.Profiling, false},
		{"eventTTL", s.EventTTL.Duration, time.Hour},
		{"cacheSizing.policy", s.CacheSizing.Policy, controlplanev1alpha1.CacheSizingStatic},
		{"cacheSizing.watchCache", *s.CacheSizing.WatchCache, true},
		{"certificates.validity", s.Certificates.Validity.Duration, 365 * 24 * time.Hour},
		{"certificates.caValidity", s.Certificates.CAValidity.Duration, 10 * 365 * 24 * time.Hour},
		{"certificates.renewalPercent", s.Certificates.RenewalPercent, int32(80)},
		{"certificates.keyAlgorithm", s.Certificates.KeyAlgorithm, controlplanev1alpha1.KeyAlgorithm("ECDSAP256")},
		{"certificates.pkiRetention", s.Certificates.PKIRetention, controlplanev1alpha1.PKIRetention("Delete")},
	}
	for _, c := range checks {
		if !equal(c.got, c.want) {
			t.Errorf("default of %s: got %v, want %v", c.what, c.got, c.want)
		}
	}
}

func equal(a, b any) bool {
	if as, ok := a.([]controlplanev1alpha1.AuthorizationMode); ok {
		bs, _ := b.([]controlplanev1alpha1.AuthorizationMode)
		return slices.Equal(as, bs)
	}
	return a == b
}

// kubectl runs the bundled kubectl against the test apiserver.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(env.BinDir, "kubectl"), append([]string{"--kubeconfig", env.KubeconfigPath}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestApiServerConfig_KubectlScaleSetsMasterCount(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	obj := manifest(t, ns)
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatalf("creating the object: %v", err)
	}
	masterCount := func() int32 {
		t.Helper()
		got := &controlplanev1alpha1.ApiServerConfig{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
			t.Fatalf("reading the object back: %v", err)
		}
		return *got.Spec.MasterCount
	}

	for _, replicas := range []int32{3, 0, 1} {
		out, err := kubectl(t, "-n", ns, "scale", "asc/tenant", "--replicas="+strconv.Itoa(int(replicas)))
		if err != nil {
			t.Fatalf("kubectl scale --replicas=%d: %v\n%s", replicas, err, out)
		}
		if got := masterCount(); got != replicas {
			t.Fatalf("after kubectl scale --replicas=%d, spec.masterCount is %d", replicas, got)
		}
	}

	// The bounds of masterCount hold through the scale subresource too.
	out, err := kubectl(t, "-n", ns, "scale", "asc/tenant", "--replicas=40")
	if err == nil {
		t.Fatalf("kubectl scale --replicas=40 succeeded; want it refused (masterCount is at most 32):\n%s", out)
	}
	if !strings.Contains(out, "masterCount") || !strings.Contains(out, "32") {
		t.Fatalf("kubectl scale --replicas=40 failed without naming masterCount and its bound:\n%s", out)
	}
	if got := masterCount(); got != 1 {
		t.Fatalf("a refused scale changed spec.masterCount to %d", got)
	}

	// What a user sees when kubectl patch carries a bad value.
	out, err = kubectl(t, "-n", ns, "patch", "asc/tenant", "--type=merge", "-p", `{"spec":{"serviceClusterIPRange":["10.96.0.0/30"]}}`)
	if err == nil {
		t.Fatalf("kubectl patch with a /30 service range succeeded:\n%s", out)
	}
	want := `spec.serviceClusterIPRange[0]: Invalid value: "10.96.0.0/30": must hold at least 8 addresses`
	if !strings.Contains(out, want) {
		t.Fatalf("kubectl patch printed\n%s\nwant it to contain\n%s", out, want)
	}
	t.Logf("kubectl patch printed: %s", out)
}

func TestApiServerConfig_KubectlShowsColumnsAndExplainsFields(t *testing.T) {
	ns := newNamespace(t)
	if err := env.Client.Create(context.Background(), manifest(t, ns)); err != nil {
		t.Fatalf("creating the object: %v", err)
	}
	out, err := kubectl(t, "-n", ns, "get", "asc")
	if err != nil {
		t.Fatalf("kubectl get asc: %v\n%s", err, out)
	}
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	want := []string{"NAME", "READY", "REPLICAS", "VERSION", "ENDPOINT", "PAUSED", "AGE"}
	if !slices.Equal(header, want) {
		t.Fatalf("kubectl get asc columns are %v, want %v", header, want)
	}

	// The CRD's OpenAPI schema is published a moment after it is
	// established: retry a bounded number of times.
	var explain string
	for range 30 {
		explain, err = kubectl(t, "explain", "apiserverconfigs.spec.etcd.overrides")
		if err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatalf("kubectl explain apiserverconfigs.spec.etcd.overrides: %v\n%s", err, explain)
	}
	for _, text := range []string{"--etcd-servers-overrides", "resource", "servers"} {
		if !strings.Contains(explain, text) {
			t.Fatalf("kubectl explain does not document %q:\n%s", text, explain)
		}
	}
	explain, err = kubectl(t, "explain", "apiserverconfigs.spec.audit.webhook")
	if err != nil {
		t.Fatalf("kubectl explain apiserverconfigs.spec.audit.webhook: %v\n%s", err, explain)
	}
	for _, text := range []string{"--audit-webhook-config-file", "kubeconfigSecretName", "blocking-strict", "batch", "truncate"} {
		if !strings.Contains(explain, text) {
			t.Fatalf("kubectl explain does not document %q:\n%s", text, explain)
		}
	}
}

// The operator defaults specs that did not go through the API server (the
// render command, tests) with apiserver.SetDefaults: it must agree with the
// CRD's schema defaults on every sample.
func TestApiServerConfig_GoDefaultsMatchTheCRDDefaults(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(envtest.RepoRoot(), "config", "samples", "controlplane_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("finding the samples in config/samples: %v (found %d)", err, len(files))
	}
	ns := newNamespace(t)
	ctx := context.Background()
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("reading %s: %v", file, err)
			}
			local := &controlplanev1alpha1.ApiServerConfig{}
			if err := yaml.UnmarshalStrict(data, local); err != nil {
				t.Fatalf("decoding %s: %v", file, err)
			}
			local.Namespace = ns
			server := local.DeepCopy()
			if err := env.Client.Create(ctx, server); err != nil {
				t.Fatalf("creating %s: %v", file, err)
			}
			unprefixed := local.Spec.Etcd.Prefix == ""
			apiserver.SetDefaults(&local.Spec)
			// The one default the CRD no longer gives: a new tenant's etcd
			// prefix is its own (the mutating webhook's, not running here);
			// one with none is an ApiServerConfig from before, whose
			// /registry SetDefaults keeps.
			if unprefixed {
				if server.Spec.Etcd.Prefix != "" {
					t.Fatalf("the CRD defaulted spec.etcd.prefix to %q: a new tenant's prefix is its own", server.Spec.Etcd.Prefix)
				}
				server.Spec.Etcd.Prefix = apiserver.DefaultEtcdPrefix
			}
			if diff := cmp.Diff(server.Spec, local.Spec); diff != "" {
				t.Fatalf("apiserver.SetDefaults differs from the CRD defaults (-server +go):\n%s", diff)
			}
		})
	}
}

// The defaults of fields no sample sets agree too.
func TestApiServerConfig_GoDefaultsMatchTheCRDDefaultsOfOptionalFields(t *testing.T) {
	ns := newNamespace(t)
	obj := manifest(t, ns, `{"metadata":{"name":"optional"},"spec":{"etcd":{"prefix":"/registry"},"audit":{"webhook":{"kubeconfigSecretName":"audit-webhook"}}}}`)
	local := &controlplanev1alpha1.ApiServerConfig{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, local); err != nil {
		t.Fatal(err)
	}
	apiserver.SetDefaults(&local.Spec)
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating the object: %v", err)
	}
	server := &controlplanev1alpha1.ApiServerConfig{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), server); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(server.Spec, local.Spec); diff != "" {
		t.Fatalf("apiserver.SetDefaults differs from the CRD defaults (-server +go):\n%s", diff)
	}
	if server.Spec.Audit.Webhook.Mode != controlplanev1alpha1.AuditWebhookBatch {
		t.Fatalf("spec.audit.webhook.mode defaults to %q, want batch", server.Spec.Audit.Webhook.Mode)
	}
}
