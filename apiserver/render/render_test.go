package render

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/admission"
	"github.com/apiserver-operator/apiserver-operator/apiserver/validatorpool"
)

var update = flag.Bool("update", false, "rewrite testdata/ with the current output")

func crd(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "controlplane.apiserver-operator.dev_apiserverconfigs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// options are what the CLI passes: the CRD and the admission of the
// operator, with the validators built into bin/.
func options(t *testing.T) Options {
	t.Helper()
	pool := validatorpool.NewPool(validatorDir())
	t.Cleanup(pool.Close)
	return Options{CRD: crd(t), Admission: admission.Admission{Validator: pool}}
}

// exactValidator judges as the pod's start-up runs, without the Pool's
// shortcuts.
func exactValidator(t *testing.T) *validatorpool.Pool {
	t.Helper()
	pool := validatorpool.NewPool(validatorDir(), validatorpool.Exact())
	t.Cleanup(pool.Close)
	return pool
}

// validatorDir holds the validators built into bin/.
func validatorDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join("..", "..", "bin")
}

// renderSample renders the sample of config/samples called name twice and
// returns the rendering, after checking that the two
// renderings are equal and hold no key or certificate (the Secrets' and
// the generated CAs' material is left out).
func renderSample(t *testing.T, name string) string {
	t.Helper()
	manifest, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", name))
	if err != nil {
		t.Fatal(err)
	}
	var first, second bytes.Buffer
	if err := Render(&first, manifest, options(t)); err != nil {
		t.Fatalf("rendering the sample %s: %v", name, err)
	}
	if err := Render(&second, manifest, options(t)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Bytes(), second.Bytes()) {
		t.Fatalf("two renderings of the sample %s differ", name)
	}
	out := first.String()
	for _, secret := range []string{"PRIVATE KEY", "BEGIN CERTIFICATE", "client-key-data"} {
		if strings.Contains(out, secret) {
			t.Fatalf("the rendering of the sample %s holds key or certificate material (%s)", name, secret)
		}
	}
	return out
}

func TestRender_SampleGoldenAndStable(t *testing.T) {
	out := renderSample(t, "controlplane_v1alpha1_apiserverconfig_ha.yaml")
	// The defaults admission applies are in the output.
	for _, want := range []string{"--audit-log-maxage=30", "--etcd-prefix=/tenants/ha", "--authorization-mode=Node,RBAC", "kind: PodDisruptionBudget"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the rendering lacks %q", want)
		}
	}
	golden := filepath.Join("testdata", "ha.yaml")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("reading %s (go test ./apiserver/render/ -update writes it): %v", golden, err)
	}
	if diff := cmp.Diff(string(want), out); diff != "" {
		t.Fatalf("the rendering differs from %s (-want +got):\n%s", golden, diff)
	}
}

// The messages are the ones kubectl prints when admission refuses the
// same manifest (see the API and webhook tests against a real apiserver).
func TestRender_RefusesWhatAdmissionRefuses(t *testing.T) {
	base := "apiVersion: controlplane.apiserver-operator.dev/v1alpha1\nkind: ApiServerConfig\nmetadata:\n  name: bad\nspec:\n  etcd:\n    servers: [\"https://e:2379\"]\n"
	cases := map[string]string{
		"  serviceClusterIPRange: [\"10.96.0.0/30\"]\n":                   `spec.serviceClusterIPRange[0]: Invalid value: "10.96.0.0/30": must hold at least 8 addresses`,
		"  extraArgs:\n  - name: enable-admision-plugins\n    value: x\n": `spec.extraArgs[0].name: Invalid value: "enable-admision-plugins": kube-apiserver v1.37.1 has no flag --enable-admision-plugins, did you mean --enable-admission-plugins?`,
		"  masterCount: -1\n": "spec.masterCount: Invalid value: -1: spec.masterCount in body should be greater than or equal to 0",
		"  serving:\n    tls:\n      minVersion: VersionTLS10\n":      `spec.serving.tls.minVersion: Unsupported value: "VersionTLS10"`,
		"  etcd:\n    servers: [\"etcd-0:2379\"]\n":                   "spec.etcd.servers[0]: Invalid value: \"etcd-0:2379\": must be an http:// or https:// URL",
		"  featureGates:\n    MultiCIDRServiceAllocator: false\n":     "MultiCIDRServiceAllocator is locked to true in kube-apiserver v1.37.1",
		"  extraArgs:\n  - name: goaway-chance\n    value: \"0.5\"\n": "spec.extraArgs[0].value: Invalid value: \"0.5\": kube-apiserver v1.37.1 would refuse to start: --goaway-chance can not be less than 0 or greater than 0.02",
		// CEL rules on integers: the manifest's numbers are read as the
		// API server reads them.
		"  konnectivity:\n    port: 6443\n":                                                                                      "spec.konnectivity.port: Invalid value: the agents' port must differ from spec.serving.securePort",
		"  konnectivity: {}\n  serving:\n    service:\n      port: 8132\n":                                                       "spec.konnectivity.port: Invalid value: the agents' port must differ from spec.serving.service.port",
		"  konnectivity:\n    agent:\n      host: edge.example.com\n  extraArgs:\n  - name: bind-address\n    value: 10.1.2.3\n": "spec.extraArgs[0].value: Invalid value: \"10.1.2.3\": with spec.konnectivity",
		"  konnectivity: {}\n": "spec.konnectivity.agent.host: Invalid value: the agents need an address to dial",
	}
	for extra, want := range cases {
		manifest := base + extra
		if strings.HasPrefix(extra, "  etcd:") {
			manifest = strings.Replace(base, "  etcd:\n    servers: [\"https://e:2379\"]\n", extra, 1)
		}
		err := Render(&bytes.Buffer{}, []byte(manifest), options(t))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rendering with\n%s\ngave %v\nwant an error saying %s", extra, err, want)
		}
	}
}

// The konnectivity sample passes admission, whose validator loads
// kube-apiserver's certificate for the agents' name as upstream does
// (--tls-sni-cert-key), and renders byte-stable: the konnectivity CA the
// agents' manifests carry is generated in the cluster, left out as the
// Secrets' material is.
func TestRender_KonnectivitySampleLeavesTheKonnectivityCAOut(t *testing.T) {
	out := renderSample(t, "controlplane_v1alpha1_apiserverconfig_konnectivity.yaml")
	for _, want := range []string{"--tls-sni-cert-key=/etc/kubernetes/pki/konnectivity-apiserver.crt,/etc/kubernetes/pki/konnectivity-apiserver.key:apiserver.konnectivity.invalid",
		"ca.crt: <generated in the cluster>", "apiserver-operator.dev/kubeconfig-hash: <generated in the cluster>", "name: edge-konnectivity-ca"} {
		if !strings.Contains(out, want) {
			t.Errorf("the rendering lacks %q", want)
		}
	}
}

// Every object render prints, which is what the operator applies, is one
// of apiserver.OwnedObjects: the one list that deletion, admission's name
// reservation, the tenant index and the cache follow. Each of its kinds
// has an empty object (apiserver.NewOwned), which deletion needs.
func TestRender_OnlyOwnedObjects(t *testing.T) {
	samples, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "controlplane_v1alpha1_apiserverconfig_*.yaml"))
	if err != nil || len(samples) == 0 {
		t.Fatalf("no samples (%v)", err)
	}
	for _, path := range samples {
		manifest, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var cfg metav1.PartialObjectMetadata
		if err := yaml.Unmarshal(manifest, &cfg); err != nil {
			t.Fatal(err)
		}
		owned := map[string]bool{}
		for _, o := range apiserver.OwnedObjects(cfg.Name) {
			owned[o.Kind+"/"+o.Name] = true
			if apiserver.NewOwned(o.Kind) == nil {
				t.Errorf("%s: no empty object of kind %s", o.Name, o.Kind)
			}
		}
		rendered := 0
		// Documents start at a line of their own (the agents' manifests,
		// inside a ConfigMap, are indented).
		for _, doc := range strings.Split(renderSample(t, filepath.Base(path)), "\n---\n")[1:] {
			var obj metav1.PartialObjectMetadata
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatal(err)
			}
			rendered++
			if !owned[obj.Kind+"/"+obj.Name] {
				t.Errorf("%s: render writes %s %s, which apiserver.OwnedObjects(%q) does not list", filepath.Base(path), obj.Kind, obj.Name, cfg.Name)
			}
		}
		if rendered < 4 {
			t.Errorf("%s: %d objects rendered", filepath.Base(path), rendered)
		}
	}
}
