// Package bundle_test checks the OLM bundle in bundle/: that operator-framework's
// validators accept it, that what it installs is what config/default installs,
// and that it is what `make bundle` generates from config/ today.
package bundle_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/operator-framework/api/pkg/encoding"
	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/api/pkg/validation"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	controlplanev1alpha1 "github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

const (
	root      = "../.."
	bundleDir = root + "/bundle"
	csvName   = "apiserver-operator.v0.1.0"
	// The Kubernetes version the validators check removed APIs against: the
	// CSV's minKubeVersion.
	k8sVersion = "1.33.0"
)

// olmArgs are the manager flags the bundle adds to config/default's
// Deployment (config/manifests/kustomization.yaml): OLM issues the webhook
// certificate and mounts it at controller-runtime's default directory.
var olmArgs = []string{
	"--webhook-cert-management=external",
	"--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs",
}

// olmWatchNamespace is the environment variable the bundle adds to the
// controllers' container: the OperatorGroup's target namespace (empty for
// all) as --watch-namespace's default.
var olmWatchNamespace = corev1.EnvVar{Name: "WATCH_NAMESPACE", ValueFrom: &corev1.EnvVarSource{
	FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['olm.targetNamespaces']"},
}}

// loadBundle reads bundle/ into the manifests.Bundle that operator-framework's
// validators take, as manifests.GetBundleFromDir does. That loader cannot be
// used with the apimachinery this module builds with (v0.37): it decodes each
// file twice with one YAMLOrJSONDecoder after rewinding the file, and the
// decoder's stream reader returns EOF the second time (the package's own
// tests fail the same way).
func loadBundle(t *testing.T) *manifests.Bundle {
	t.Helper()
	var ann manifests.AnnotationsFile
	annData, err := os.ReadFile(filepath.Join(bundleDir, "metadata", "annotations.yaml"))
	if err != nil {
		t.Fatalf("Reading the bundle's annotations: %v", err)
	}
	if err := yaml.Unmarshal(annData, &ann); err != nil {
		t.Fatalf("Parsing metadata/annotations.yaml: %v", err)
	}
	b := &manifests.Bundle{
		Package:        ann.Annotations.PackageName,
		Channels:       strings.Split(ann.Annotations.Channels, ","),
		DefaultChannel: ann.Annotations.DefaultChannelName,
	}
	manifestsDir := filepath.Join(bundleDir, "manifests")
	entries, err := os.ReadDir(manifestsDir)
	if err != nil {
		t.Fatalf("Reading %s: %v", manifestsDir, err)
	}
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			t.Errorf("bundle/manifests may hold only manifest files, not %s", e.Name())
			continue
		}
		data, err := os.ReadFile(filepath.Join(manifestsDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &obj.Object); err != nil {
			t.Fatalf("Decoding %s: %v", e.Name(), err)
		}
		b.Objects = append(b.Objects, obj)
		switch obj.GetKind() {
		case v1alpha1.ClusterServiceVersionKind:
			if b.CSV != nil {
				t.Fatalf("More than one ClusterServiceVersion in %s", manifestsDir)
			}
			b.CSV = &v1alpha1.ClusterServiceVersion{}
			if err := yaml.UnmarshalStrict(data, b.CSV); err != nil {
				t.Fatalf("Parsing the CSV %s: %v", e.Name(), err)
			}
			b.Name = b.CSV.Name
		case "CustomResourceDefinition":
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(data, crd); err != nil {
				t.Fatalf("Parsing the CRD %s: %v", e.Name(), err)
			}
			b.V1CRDs = append(b.V1CRDs, crd)
		}
	}
	if b.CSV == nil {
		t.Fatalf("No ClusterServiceVersion in %s", manifestsDir)
	}
	// What the bundle validator checks against the size limit of a bundle
	// stored in a ConfigMap.
	err = filepath.WalkDir(bundleDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		gz, err := encoding.GzipBase64Encode(data)
		if err != nil {
			return err
		}
		b.Size += int64(len(data))
		b.CompressedSize += int64(len(gz))
		return nil
	})
	if err != nil {
		t.Fatalf("Measuring the bundle: %v", err)
	}
	return b
}

// TestBundleValidates runs the validators of `operator-sdk bundle validate
// --select-optional suite=operatorframework` on the bundle: errors fail the
// test, warnings are logged.
func TestBundleValidates(t *testing.T) {
	b := loadBundle(t)
	if b.CSV.Name != csvName {
		t.Errorf("CSV is %s, want %s", b.CSV.Name, csvName)
	}
	if b.Package != "apiserver-operator" || b.DefaultChannel != "alpha" || !slices.Equal(b.Channels, []string{"alpha"}) {
		t.Errorf("metadata/annotations.yaml: package %q, channels %v, default channel %q; want apiserver-operator, [alpha], alpha",
			b.Package, b.Channels, b.DefaultChannel)
	}

	validators := validation.DefaultBundleValidators.WithValidators(
		validation.OperatorHubV2Validator,
		validation.StandardCapabilitiesValidator,
		validation.StandardCategoriesValidator,
		validation.GoodPracticesValidator,
		validation.ObjectValidator,
		validation.AlphaDeprecatedAPIsValidator,
	)
	objs := append(b.ObjectsToValidate(), map[string]string{"k8s-version": k8sVersion})
	var checked int
	for _, result := range validators.Validate(objs...) {
		for _, e := range result.Errors {
			checked++
			t.Errorf("%s: %v", result.Name, e)
		}
		for _, w := range result.Warnings {
			checked++
			t.Logf("Warning: %s: %v", result.Name, w)
		}
	}
	t.Logf("%d validators ran, %d findings", len(validators), checked)
}

// TestBundleMatchesConfig checks that OLM would install what config/default
// installs: the same Deployment (plus the OLM flags), the same permissions,
// the same webhook, CRD and cluster roles. A change to config/ that was not
// followed by `make bundle` fails here.
func TestBundleMatchesConfig(t *testing.T) {
	b := loadBundle(t)
	config := kustomizeBuild(t, "config/default")
	strategy := b.CSV.Spec.InstallStrategy.StrategySpec

	t.Run("deployment", func(t *testing.T) {
		deps := ofKind[appsv1.Deployment](t, config, "apps", "Deployment")
		if len(deps) != len(strategy.DeploymentSpecs) {
			t.Fatalf("config/default has %d Deployments and the CSV %d", len(deps), len(strategy.DeploymentSpecs))
		}
		// The flags go to the webhook's process: the one container that
		// serves the webhook port.
		served := 0
		for i, d := range deps {
			want := d.DeepCopy()
			for j := range want.Spec.Template.Spec.Containers {
				c := &want.Spec.Template.Spec.Containers[j]
				if slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "webhook" }) {
					c.Args = append(c.Args, olmArgs...)
					served++
				}
				if slices.Contains(c.Args, "--leader-elect") {
					c.Env = append(c.Env, olmWatchNamespace)
				}
			}
			got := strategy.DeploymentSpecs[i]
			if got.Name != want.Name {
				t.Errorf("CSV deployment %d is %s, config/default's %s", i, got.Name, want.Name)
				continue
			}
			if !apiequality.Semantic.DeepEqual(map[string]string(got.Label), want.Labels) {
				t.Errorf("CSV deployment %s labels %v, config/default's %v", got.Name, got.Label, want.Labels)
			}
			if !apiequality.Semantic.DeepEqual(got.Spec, want.Spec) {
				t.Errorf("The CSV's deployment %s differs from config/default's plus the OLM flags %v (-config +csv):\n%s",
					got.Name, olmArgs, yamlDiff(t, want.Spec, got.Spec))
			}
		}
		if served != 1 {
			t.Fatalf("config/default has %d containers serving the webhook port, want 1", served)
		}
	})

	t.Run("permissions", func(t *testing.T) {
		// As config/manifests binds them: the controllers' role in a
		// namespace, which OLM grants cluster-wide or in the target
		// namespace by the install mode.
		wantCluster, wantNamespaced := boundRules(t, kustomizeBuild(t, "config/manifests"))
		if d := cmp.Diff(wantCluster, rulesBySA(t, strategy.ClusterPermissions)); d != "" {
			t.Errorf("clusterPermissions differ from the ClusterRoles config/default binds (-config +csv):\n%s", d)
		}
		if d := cmp.Diff(wantNamespaced, rulesBySA(t, strategy.Permissions)); d != "" {
			t.Errorf("permissions differ from the Roles config/default binds (-config +csv):\n%s", d)
		}
	})

	t.Run("webhook", func(t *testing.T) {
		// Every webhook of config/default's validating and mutating
		// configurations, in order, as the CSV must describe it.
		var want []v1alpha1.WebhookDescription
		for _, u := range config {
			switch u.GetKind() {
			case "ValidatingWebhookConfiguration":
				var c admissionregistrationv1.ValidatingWebhookConfiguration
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &c); err != nil {
					t.Fatal(err)
				}
				for _, w := range c.Webhooks {
					want = append(want, v1alpha1.WebhookDescription{Type: v1alpha1.ValidatingAdmissionWebhook, GenerateName: w.Name,
						WebhookPath: w.ClientConfig.Service.Path, Rules: w.Rules, FailurePolicy: w.FailurePolicy, SideEffects: w.SideEffects,
						TimeoutSeconds: w.TimeoutSeconds, AdmissionReviewVersions: w.AdmissionReviewVersions})
				}
			case "MutatingWebhookConfiguration":
				var c admissionregistrationv1.MutatingWebhookConfiguration
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &c); err != nil {
					t.Fatal(err)
				}
				for _, w := range c.Webhooks {
					want = append(want, v1alpha1.WebhookDescription{Type: v1alpha1.MutatingAdmissionWebhook, GenerateName: w.Name,
						WebhookPath: w.ClientConfig.Service.Path, Rules: w.Rules, FailurePolicy: w.FailurePolicy, SideEffects: w.SideEffects,
						TimeoutSeconds: w.TimeoutSeconds, AdmissionReviewVersions: w.AdmissionReviewVersions, ReinvocationPolicy: w.ReinvocationPolicy})
				}
			}
		}
		got := b.CSV.Spec.WebhookDefinitions
		if len(got) != len(want) || len(want) != 2 {
			t.Fatalf("CSV has %d webhookdefinitions, config/default %d webhooks (want the validating and the mutating one)", len(got), len(want))
		}
		for i, w := range want {
			g := got[i]
			if g.Type != w.Type || g.GenerateName != w.GenerateName ||
				g.WebhookPath == nil || w.WebhookPath == nil || *g.WebhookPath != *w.WebhookPath ||
				!apiequality.Semantic.DeepEqual(g.Rules, w.Rules) ||
				!apiequality.Semantic.DeepEqual(g.FailurePolicy, w.FailurePolicy) ||
				!apiequality.Semantic.DeepEqual(g.SideEffects, w.SideEffects) ||
				!apiequality.Semantic.DeepEqual(g.TimeoutSeconds, w.TimeoutSeconds) ||
				!apiequality.Semantic.DeepEqual(g.ReinvocationPolicy, w.ReinvocationPolicy) ||
				!slices.Equal(g.AdmissionReviewVersions, w.AdmissionReviewVersions) {
				t.Errorf("webhookdefinition %d differs from config/default's webhook (-config +csv):\n%s", i, yamlDiff(t, w, g))
			}
			if len(strategy.DeploymentSpecs) == 1 && g.DeploymentName != strategy.DeploymentSpecs[0].Name {
				t.Errorf("webhookdefinition %s is served by %q, want %q", g.GenerateName, g.DeploymentName, strategy.DeploymentSpecs[0].Name)
			}
			if g.TargetPort == nil || g.TargetPort.IntValue() != 9443 {
				t.Errorf("webhookdefinition %s targets port %v, want the manager's webhook port 9443", g.GenerateName, g.TargetPort)
			}
		}
	})

	t.Run("objects", func(t *testing.T) {
		// Everything config/default installs that OLM does not make from the
		// CSV must be in the bundle as it is.
		bound := map[string]bool{}
		for _, u := range config {
			if k := u.GetKind(); k == "ClusterRoleBinding" || k == "RoleBinding" {
				ref, _, _ := unstructured.NestedStringMap(u.Object, "roleRef")
				bound[ref["kind"]+"/"+ref["name"]] = true
			}
		}
		inBundle := map[string]*unstructured.Unstructured{}
		for _, u := range b.Objects {
			inBundle[u.GetKind()+"/"+u.GetName()] = u
		}
		for _, u := range config {
			key := u.GetKind() + "/" + u.GetName()
			switch u.GetKind() {
			case "Namespace", "ServiceAccount", "Deployment", "RoleBinding", "ClusterRoleBinding", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
				continue // OLM makes them from the CSV.
			case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
				continue // OLM installs none: docs/security.md says to apply the webhook's dry-run guard by hand.
			case "Role", "ClusterRole":
				if bound[key] {
					continue // In the CSV's permissions.
				}
			case "Service":
				if u.GetName() == "apiserver-operator-webhook-service" {
					continue // OLM creates <deployment>-service for webhookdefinitions.
				}
			}
			got, ok := inBundle[key]
			if !ok {
				t.Errorf("%s of config/default is not in the bundle", key)
				continue
			}
			want := u.DeepCopy()
			want.SetNamespace("")
			if !apiequality.Semantic.DeepEqual(got.Object, want.Object) {
				t.Errorf("%s differs from config/default's (-config +bundle):\n%s", key, yamlDiff(t, want.Object, got.Object))
			}
		}
	})
}

// TestBundleIsUpToDate regenerates the bundle from config/ and compares it
// with the committed files, byte for byte, as `make bundle` would.
func TestBundleIsUpToDate(t *testing.T) {
	out := t.TempDir()
	rendered := kustomizeBuildRaw(t, "config/manifests")
	args := []string{"run", "./hack/bundle-gen", "-version", "0.1.0", "-channels", "alpha", "-default-channel", "alpha"}
	// Every bundled kube-apiserver image, the etcd dialer's and konnectivity's, as
	// hack/bundle.mk lists them.
	for _, v := range controlplanev1alpha1.BundledVersions {
		args = append(args, "-related-image", "kube-apiserver-"+strings.ReplaceAll(v, ".", "-")+"=localhost/apiserver-operator/kube-apiserver:"+v)
	}
	args = append(args, "-related-image", "etcd-dialer="+apiserver.DefaultEtcdDialerImage,
		"-related-image", "konnectivity-server="+apiserver.DefaultKonnectivityServerImage,
		"-related-image", "konnectivity-agent="+apiserver.DefaultKonnectivityAgentImage,
		"-output-dir", filepath.Join(out, "bundle"), "-dockerfile", filepath.Join(out, "bundle.Dockerfile"))
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Stdin = bytes.NewReader(rendered)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("Running hack/bundle-gen: %v\n%s", err, stderr.String())
	}
	want := readTree(t, filepath.Join(out, "bundle"))
	got := readTree(t, bundleDir)
	var err error
	if want["../bundle.Dockerfile"], err = os.ReadFile(filepath.Join(out, "bundle.Dockerfile")); err != nil {
		t.Fatal(err)
	}
	if got["../bundle.Dockerfile"], err = os.ReadFile(filepath.Join(root, "bundle.Dockerfile")); err != nil {
		t.Fatal(err)
	}
	for _, name := range sortedKeys(want, got) {
		if !bytes.Equal(want[name], got[name]) {
			t.Errorf("%s is stale: run make bundle and commit the result (-generated +committed):\n%s",
				name, lineDiff(want[name], got[name]))
		}
	}
}

// kustomizeBin is bin/kustomize (make kustomize), or $KUSTOMIZE.
func kustomizeBin(t *testing.T) string {
	t.Helper()
	if k := os.Getenv("KUSTOMIZE"); k != "" {
		return k
	}
	k, err := filepath.Abs(filepath.Join(root, "bin", "kustomize"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(k); err != nil {
		t.Fatalf("kustomize renders config/ for this test: run make kustomize or set $KUSTOMIZE (%v)", err)
	}
	return k
}

func kustomizeBuildRaw(t *testing.T, dir string) []byte {
	t.Helper()
	cmd := exec.Command(kustomizeBin(t), "build", dir)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	return out
}

func kustomizeBuild(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(kustomizeBuildRaw(t, dir)), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("Decoding kustomize build %s: %v", dir, err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

func ofKind[T any](t *testing.T, objs []*unstructured.Unstructured, group, kind string) []T {
	t.Helper()
	var out []T
	for _, u := range objs {
		if gvk := u.GroupVersionKind(); gvk.Group == group && gvk.Kind == kind {
			var v T
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v); err != nil {
				t.Fatalf("Converting %s %s: %v", kind, u.GetName(), err)
			}
			out = append(out, v)
		}
	}
	return out
}

// boundRules returns the rules config/ grants to each service account,
// cluster-wide (ClusterRoleBindings) and in the install namespace
// (RoleBindings), each as a sorted list of JSON rules.
func boundRules(t *testing.T, objs []*unstructured.Unstructured) (cluster, namespaced map[string][]string) {
	t.Helper()
	rules := map[string][]rbacv1.PolicyRule{}
	for _, r := range ofKind[rbacv1.ClusterRole](t, objs, rbacv1.GroupName, "ClusterRole") {
		rules["ClusterRole/"+r.Name] = r.Rules
	}
	for _, r := range ofKind[rbacv1.Role](t, objs, rbacv1.GroupName, "Role") {
		rules["Role/"+r.Name] = r.Rules
	}
	cluster, namespaced = map[string][]string{}, map[string][]string{}
	grant := func(into map[string][]string, ref rbacv1.RoleRef, subjects []rbacv1.Subject) {
		r, ok := rules[ref.Kind+"/"+ref.Name]
		if !ok {
			t.Errorf("config/default binds %s %s, which it does not define", ref.Kind, ref.Name)
		}
		for _, s := range subjects {
			into[s.Name] = append(into[s.Name], ruleStrings(t, r)...)
		}
	}
	for _, b := range ofKind[rbacv1.ClusterRoleBinding](t, objs, rbacv1.GroupName, "ClusterRoleBinding") {
		grant(cluster, b.RoleRef, b.Subjects)
	}
	for _, b := range ofKind[rbacv1.RoleBinding](t, objs, rbacv1.GroupName, "RoleBinding") {
		grant(namespaced, b.RoleRef, b.Subjects)
	}
	for _, m := range []map[string][]string{cluster, namespaced} {
		for sa := range m {
			sort.Strings(m[sa])
		}
	}
	return cluster, namespaced
}

func rulesBySA(t *testing.T, perms []v1alpha1.StrategyDeploymentPermissions) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, p := range perms {
		out[p.ServiceAccountName] = append(out[p.ServiceAccountName], ruleStrings(t, p.Rules)...)
	}
	for sa := range out {
		sort.Strings(out[sa])
	}
	return out
}

func ruleStrings(t *testing.T, rules []rbacv1.PolicyRule) []string {
	t.Helper()
	var out []string
	for _, r := range rules {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

func yamlDiff(t *testing.T, want, got any) string {
	t.Helper()
	w, err := yaml.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	g, err := yaml.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	return lineDiff(w, g)
}

// lineDiff diffs two texts line by line.
func lineDiff(want, got []byte) string {
	return cmp.Diff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n"))
}

func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatalf("Reading %s: %v", dir, err)
	}
	return files
}

func sortedKeys(ms ...map[string][]byte) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range ms {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

// The webhook's dry-run guard names the webhook's ServiceAccount as
// config/default builds it (kustomize replacements fill the match
// condition from the ServiceAccount): with another namespace or prefix in
// config/default, it still matches.
func TestDryRunGuardNamesTheWebhooksServiceAccount(t *testing.T) {
	config := kustomizeBuild(t, "config/default")
	var user, expression string
	for _, u := range config {
		switch {
		case u.GetKind() == "ServiceAccount" && strings.HasSuffix(u.GetName(), "-webhook"):
			user = "system:serviceaccount:" + u.GetNamespace() + ":" + u.GetName()
		case u.GetKind() == "ValidatingAdmissionPolicy":
			conditions, _, _ := unstructured.NestedSlice(u.Object, "spec", "matchConditions")
			if len(conditions) == 1 {
				expression, _, _ = unstructured.NestedString(conditions[0].(map[string]any), "expression")
			}
		}
	}
	if user == "" || expression == "" {
		t.Fatalf("config/default has no webhook ServiceAccount (%q) or no dry-run guard with one match condition (%q)", user, expression)
	}
	if want := "'" + user + ":' == request.userInfo.username + ':'"; expression != want {
		t.Errorf("the dry-run guard matches %s, want %s", expression, want)
	}
}
