// Command bundle-gen writes the OLM bundle (operator-sdk's layout) from the
// output of `kustomize build config/manifests` on its standard input: the
// ClusterServiceVersion base of config/manifests/bases, config/default, the
// samples and the scorecard configuration.
//
// It does what `operator-sdk generate bundle` does for a Go project, without
// its dependency tree: the Deployment becomes the CSV's install strategy,
// the roles bound to its service account become permissions and
// clusterPermissions, the ValidatingWebhookConfiguration becomes
// webhookdefinitions (OLM creates the Service, the certificate and the
// configuration itself), the samples become alm-examples, and the CRD, the
// metrics Service and the roles that are not bound to the manager are written
// next to the CSV. The output is a pure function of the input and the flags:
// running it twice gives byte-identical files.
//
//	bin/kustomize build config/manifests | go run ./hack/bundle-gen -version 0.1.0 \
//	    -related-image kube-apiserver=localhost/apiserver-operator/kube-apiserver:v1.37.1
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/api/pkg/lib/version"
	"github.com/operator-framework/api/pkg/operators/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// listFlag collects a repeatable name=value flag, in order.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

type options struct {
	pkg            string
	version        string
	channels       string
	defaultChannel string
	outDir         string
	dockerfile     string
	samplesGroup   string
	relatedImages  listFlag
}

func main() {
	var o options
	flag.StringVar(&o.pkg, "package", "apiserver-operator", "Package name; the CSV is <package>.v<version>.")
	flag.StringVar(&o.version, "version", "", "Bundle version, semver without a leading v.")
	flag.StringVar(&o.channels, "channels", "alpha", "Comma-separated channels of the bundle.")
	flag.StringVar(&o.defaultChannel, "default-channel", "alpha", "Default channel of the package.")
	flag.StringVar(&o.outDir, "output-dir", "bundle", "Directory to write manifests/, metadata/ and tests/ into.")
	flag.StringVar(&o.dockerfile, "dockerfile", "bundle.Dockerfile", "Path of the bundle image's Dockerfile; empty to skip it.")
	flag.StringVar(&o.samplesGroup, "samples-group", "controlplane.apiserver-operator.dev", "API group of the custom resources that make alm-examples.")
	flag.Var(&o.relatedImages, "related-image", "name=image of an image the operator deploys besides its own (repeatable).")
	flag.Parse()
	if err := run(os.Stdin, o); err != nil {
		fmt.Fprintf(os.Stderr, "bundle-gen: %v\n", err)
		os.Exit(1)
	}
}

func run(in io.Reader, o options) error {
	v, err := semver.Parse(o.version)
	if err != nil {
		return fmt.Errorf("parsing -version %q: %w", o.version, err)
	}
	objs, err := decodeAll(in)
	if err != nil {
		return fmt.Errorf("reading the kustomize output: %w", err)
	}
	files, err := generate(objs, o, v)
	if err != nil {
		return err
	}
	// Start from an empty manifests/ so that an object removed from config/
	// leaves the bundle too.
	if err := os.RemoveAll(filepath.Join(o.outDir, "manifests")); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(o.outDir, name)
		if name == dockerfileKey {
			if o.dockerfile == "" {
				continue
			}
			path = o.dockerfile
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, files[name], 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}

const dockerfileKey = "<dockerfile>"

func decodeAll(in io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(in, 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

func convert(u *unstructured.Unstructured, into any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		return fmt.Errorf("converting %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// generate returns the bundle's files by path relative to the output
// directory (dockerfileKey for bundle.Dockerfile).
func generate(objs []*unstructured.Unstructured, o options, v semver.Version) (map[string][]byte, error) {
	var (
		csv          *v1alpha1.ClusterServiceVersion
		deployments  []appsv1.Deployment
		services     []corev1.Service
		serviceObjs  []*unstructured.Unstructured
		roles        = map[string]*unstructured.Unstructured{} // kind/name
		bindings     []*unstructured.Unstructured
		webhooks     []webhookDef
		samples      []map[string]any
		scorecard    *unstructured.Unstructured
		others       []*unstructured.Unstructured
		serviceAccts = map[string]bool{}
	)
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		switch {
		case gvk.Kind == "ClusterServiceVersion":
			if csv != nil {
				return nil, fmt.Errorf("more than one ClusterServiceVersion base")
			}
			csv = &v1alpha1.ClusterServiceVersion{}
			if err := convert(u, csv); err != nil {
				return nil, err
			}
		case gvk.Group == "apps" && gvk.Kind == "Deployment":
			var d appsv1.Deployment
			if err := convert(u, &d); err != nil {
				return nil, err
			}
			deployments = append(deployments, d)
		case gvk.Group == "" && gvk.Kind == "Service":
			var s corev1.Service
			if err := convert(u, &s); err != nil {
				return nil, err
			}
			services = append(services, s)
			serviceObjs = append(serviceObjs, u)
		case gvk.Group == "" && gvk.Kind == "ServiceAccount":
			serviceAccts[u.GetName()] = true
		case gvk.Group == "" && gvk.Kind == "Namespace":
			// OLM installs into the namespace of the OperatorGroup.
		case gvk.Group == rbacv1.GroupName && (gvk.Kind == "Role" || gvk.Kind == "ClusterRole"):
			roles[gvk.Kind+"/"+u.GetName()] = u
		case gvk.Group == rbacv1.GroupName && (gvk.Kind == "RoleBinding" || gvk.Kind == "ClusterRoleBinding"):
			bindings = append(bindings, u)
		case gvk.Group == admissionregistrationv1.GroupName && gvk.Kind == "ValidatingWebhookConfiguration":
			var cfg admissionregistrationv1.ValidatingWebhookConfiguration
			if err := convert(u, &cfg); err != nil {
				return nil, err
			}
			for _, w := range cfg.Webhooks {
				webhooks = append(webhooks, webhookDef{Type: v1alpha1.ValidatingAdmissionWebhook, Name: w.Name, ClientConfig: w.ClientConfig,
					Rules: w.Rules, FailurePolicy: w.FailurePolicy, MatchPolicy: w.MatchPolicy, ObjectSelector: w.ObjectSelector,
					SideEffects: w.SideEffects, TimeoutSeconds: w.TimeoutSeconds, AdmissionReviewVersions: w.AdmissionReviewVersions})
			}
		case gvk.Group == admissionregistrationv1.GroupName && gvk.Kind == "MutatingWebhookConfiguration":
			var cfg admissionregistrationv1.MutatingWebhookConfiguration
			if err := convert(u, &cfg); err != nil {
				return nil, err
			}
			for _, w := range cfg.Webhooks {
				webhooks = append(webhooks, webhookDef{Type: v1alpha1.MutatingAdmissionWebhook, Name: w.Name, ClientConfig: w.ClientConfig,
					Rules: w.Rules, FailurePolicy: w.FailurePolicy, MatchPolicy: w.MatchPolicy, ObjectSelector: w.ObjectSelector,
					SideEffects: w.SideEffects, TimeoutSeconds: w.TimeoutSeconds, AdmissionReviewVersions: w.AdmissionReviewVersions,
					ReinvocationPolicy: w.ReinvocationPolicy})
			}
		case gvk.Group == admissionregistrationv1.GroupName && (gvk.Kind == "ValidatingAdmissionPolicy" || gvk.Kind == "ValidatingAdmissionPolicyBinding"):
			// OLM installs no admission policy from a bundle: the webhook's
			// dry-run guard (config/webhook/dryrun_guard.yaml) is applied
			// by hand there (docs/security.md).
		case gvk.Group == admissionregistrationv1.GroupName:
			return nil, fmt.Errorf("%s %s: only validating and mutating webhooks are translated to webhookdefinitions", gvk.Kind, u.GetName())
		case gvk.Group == o.samplesGroup:
			samples = append(samples, u.Object)
		case gvk.Group == "scorecard.operatorframework.io" && gvk.Kind == "Configuration":
			scorecard = u
		default:
			others = append(others, u)
		}
	}
	if csv == nil {
		return nil, fmt.Errorf("no ClusterServiceVersion base in the input")
	}
	if len(deployments) == 0 {
		return nil, fmt.Errorf("no Deployment in the input")
	}

	csv.Name = fmt.Sprintf("%s.v%s", o.pkg, v)
	csv.Namespace = ""
	csv.Spec.Version = version.OperatorVersion{Version: v}
	if csv.Annotations == nil {
		csv.Annotations = map[string]string{}
	}

	// The install strategy: the Deployments as kustomize rendered them.
	strategy := v1alpha1.StrategyDetailsDeployment{}
	managerSAs := map[string]bool{}
	for _, d := range deployments {
		strategy.DeploymentSpecs = append(strategy.DeploymentSpecs, v1alpha1.StrategyDeploymentSpec{
			Name: d.Name, Label: labels.Set(d.Labels), Spec: d.Spec,
		})
		sa := d.Spec.Template.Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		managerSAs[sa] = true
	}

	// Permissions: the rules of the roles bound to the Deployments' service
	// accounts, grouped by service account in the order of the bindings.
	bound := map[string]bool{}
	perms := map[bool]map[string][]rbacv1.PolicyRule{true: {}, false: {}} // cluster-scoped?
	var saOrder []string
	for _, b := range bindings {
		var subjects []rbacv1.Subject
		var ref rbacv1.RoleRef
		if b.GetKind() == "ClusterRoleBinding" {
			var crb rbacv1.ClusterRoleBinding
			if err := convert(b, &crb); err != nil {
				return nil, err
			}
			subjects, ref = crb.Subjects, crb.RoleRef
		} else {
			var rb rbacv1.RoleBinding
			if err := convert(b, &rb); err != nil {
				return nil, err
			}
			subjects, ref = rb.Subjects, rb.RoleRef
		}
		role, ok := roles[ref.Kind+"/"+ref.Name]
		if !ok {
			return nil, fmt.Errorf("%s %s refers to %s %s, which is not in config/", b.GetKind(), b.GetName(), ref.Kind, ref.Name)
		}
		var rules []rbacv1.PolicyRule
		if role.GetKind() == "ClusterRole" {
			var cr rbacv1.ClusterRole
			if err := convert(role, &cr); err != nil {
				return nil, err
			}
			rules = cr.Rules
		} else {
			var r rbacv1.Role
			if err := convert(role, &r); err != nil {
				return nil, err
			}
			rules = r.Rules
		}
		// A ClusterRole bound by a RoleBinding grants namespaced permissions.
		cluster := b.GetKind() == "ClusterRoleBinding"
		for _, s := range subjects {
			if s.Kind != rbacv1.ServiceAccountKind || !managerSAs[s.Name] {
				return nil, fmt.Errorf("%s %s binds %s %s, not the manager's service account: OLM cannot install it",
					b.GetKind(), b.GetName(), s.Kind, s.Name)
			}
			if !serviceAccts[s.Name] {
				return nil, fmt.Errorf("service account %s is bound by %s but not defined in config/", s.Name, b.GetName())
			}
			if _, seen := perms[true][s.Name]; !seen {
				if _, seen := perms[false][s.Name]; !seen {
					saOrder = append(saOrder, s.Name)
				}
			}
			perms[cluster][s.Name] = append(perms[cluster][s.Name], rules...)
		}
		bound[ref.Kind+"/"+ref.Name] = true
	}
	for _, sa := range saOrder {
		if rules, ok := perms[true][sa]; ok {
			strategy.ClusterPermissions = append(strategy.ClusterPermissions, v1alpha1.StrategyDeploymentPermissions{ServiceAccountName: sa, Rules: rules})
		}
		if rules, ok := perms[false][sa]; ok {
			strategy.Permissions = append(strategy.Permissions, v1alpha1.StrategyDeploymentPermissions{ServiceAccountName: sa, Rules: rules})
		}
	}
	csv.Spec.InstallStrategy = v1alpha1.NamedInstallStrategy{
		StrategyName: v1alpha1.InstallStrategyNameDeployment,
		StrategySpec: strategy,
	}

	// Webhooks: OLM creates <deployment>-service, a certificate for it and
	// the configuration; the webhook Service of config/ is not needed.
	webhookServices := map[string]bool{}
	csv.Spec.WebhookDefinitions = nil
	for _, w := range webhooks {
		{
			svcRef := w.ClientConfig.Service
			if svcRef == nil {
				return nil, fmt.Errorf("webhook %s calls a URL: OLM only serves webhooks from the operator's deployment", w.Name)
			}
			svc, err := findService(services, svcRef.Name)
			if err != nil {
				return nil, fmt.Errorf("webhook %s: %w", w.Name, err)
			}
			port := int32(443)
			if svcRef.Port != nil {
				port = *svcRef.Port
			}
			target, err := servicePort(svc, port)
			if err != nil {
				return nil, fmt.Errorf("webhook %s: %w", w.Name, err)
			}
			dep, err := selectedDeployment(deployments, svc)
			if err != nil {
				return nil, fmt.Errorf("webhook %s: %w", w.Name, err)
			}
			csv.Spec.WebhookDefinitions = append(csv.Spec.WebhookDefinitions, v1alpha1.WebhookDescription{
				GenerateName:            w.Name,
				Type:                    w.Type,
				DeploymentName:          dep,
				ContainerPort:           port,
				TargetPort:              target,
				Rules:                   w.Rules,
				FailurePolicy:           w.FailurePolicy,
				MatchPolicy:             w.MatchPolicy,
				ObjectSelector:          w.ObjectSelector,
				SideEffects:             w.SideEffects,
				TimeoutSeconds:          w.TimeoutSeconds,
				AdmissionReviewVersions: w.AdmissionReviewVersions,
				WebhookPath:             svcRef.Path,
				ReinvocationPolicy:      w.ReinvocationPolicy,
			})
			webhookServices[svc.Name] = true
		}
	}

	// alm-examples and the owned CRDs.
	if len(samples) > 0 {
		examples, err := json.MarshalIndent(samples, "", "  ")
		if err != nil {
			return nil, err
		}
		csv.Annotations["alm-examples"] = string(examples)
	}

	// Related images: the operator's own, then the ones it deploys.
	csv.Spec.RelatedImages = nil
	seen := map[string]bool{}
	for _, d := range deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if !seen[c.Image] {
				csv.Spec.RelatedImages = append(csv.Spec.RelatedImages, v1alpha1.RelatedImage{Name: c.Name, Image: c.Image})
				seen[c.Image] = true
			}
			if csv.Annotations["containerImage"] == "" {
				csv.Annotations["containerImage"] = c.Image
			}
		}
	}
	for _, ri := range o.relatedImages {
		name, image, ok := strings.Cut(ri, "=")
		if !ok || name == "" || image == "" {
			return nil, fmt.Errorf("-related-image %q: want name=image", ri)
		}
		if !seen[image] {
			csv.Spec.RelatedImages = append(csv.Spec.RelatedImages, v1alpha1.RelatedImage{Name: name, Image: image})
			seen[image] = true
		}
	}

	files := map[string][]byte{}
	add := func(name string, obj any, prune bool) error {
		b, err := marshal(obj, prune)
		if err != nil {
			return fmt.Errorf("rendering %s: %w", name, err)
		}
		files[name] = b
		return nil
	}

	owned := map[string]bool{}
	for _, d := range csv.Spec.CustomResourceDefinitions.Owned {
		owned[d.Name] = true
	}
	for _, u := range others {
		gvk := u.GroupVersionKind()
		if gvk.Kind == "CustomResourceDefinition" {
			if !owned[u.GetName()] {
				return nil, fmt.Errorf("CRD %s is not among the owned CRDs of the CSV base", u.GetName())
			}
			// operator-sdk's name for a CRD: <group>_<plural>.yaml.
			group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
			plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
			if group == "" || plural == "" {
				return nil, fmt.Errorf("CRD %s has no spec.group or spec.names.plural", u.GetName())
			}
			if err := add(filepath.Join("manifests", group+"_"+plural+".yaml"), stripNamespace(u).Object, true); err != nil {
				return nil, err
			}
			delete(owned, u.GetName())
			continue
		}
		if err := add(filepath.Join("manifests", objectFileName(u)), stripNamespace(u).Object, true); err != nil {
			return nil, err
		}
	}
	for name := range owned {
		return nil, fmt.Errorf("the CSV base owns %s, but config/ has no such CRD", name)
	}
	for _, u := range serviceObjs {
		if webhookServices[u.GetName()] {
			continue
		}
		if err := add(filepath.Join("manifests", objectFileName(u)), stripNamespace(u).Object, true); err != nil {
			return nil, err
		}
	}
	// Roles that no binding gives to the manager (the editor and viewer
	// roles, metrics-reader) are for cluster administrators: OLM installs
	// them as they are.
	roleKeys := make([]string, 0, len(roles))
	for k := range roles {
		roleKeys = append(roleKeys, k)
	}
	sort.Strings(roleKeys)
	for _, k := range roleKeys {
		if bound[k] {
			continue
		}
		u := roles[k]
		if err := add(filepath.Join("manifests", objectFileName(u)), stripNamespace(u).Object, true); err != nil {
			return nil, err
		}
	}
	if err := add(filepath.Join("manifests", o.pkg+".clusterserviceversion.yaml"), csv, true); err != nil {
		return nil, err
	}

	annotations := bundleAnnotations(o)
	if err := add(filepath.Join("metadata", "annotations.yaml"), map[string]any{"annotations": annotations}, false); err != nil {
		return nil, err
	}
	if scorecard != nil {
		if err := add(filepath.Join("tests", "scorecard", "config.yaml"), scorecard.Object, false); err != nil {
			return nil, err
		}
	}
	// The Dockerfile's COPY paths are relative to its own directory, the
	// build context (docker build -f bundle.Dockerfile .).
	rel := o.outDir
	if o.dockerfile != "" {
		if r, err := filepath.Rel(filepath.Dir(o.dockerfile), o.outDir); err == nil {
			rel = filepath.ToSlash(r)
		}
	}
	files[dockerfileKey] = dockerfile(annotations, scorecard != nil, rel)
	return files, nil
}

func findService(services []corev1.Service, name string) (*corev1.Service, error) {
	for i := range services {
		if services[i].Name == name {
			return &services[i], nil
		}
	}
	return nil, fmt.Errorf("service %s is not in config/", name)
}

func servicePort(svc *corev1.Service, port int32) (*intstr.IntOrString, error) {
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			t := p.TargetPort
			if t.Type == intstr.Int && t.IntVal == 0 {
				t = intstr.FromInt32(port)
			}
			return &t, nil
		}
	}
	return nil, fmt.Errorf("service %s has no port %d", svc.Name, port)
}

// selectedDeployment returns the one Deployment whose pods the Service selects.
func selectedDeployment(deployments []appsv1.Deployment, svc *corev1.Service) (string, error) {
	var names []string
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	for _, d := range deployments {
		if len(svc.Spec.Selector) > 0 && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			names = append(names, d.Name)
		}
	}
	if len(names) != 1 {
		return "", fmt.Errorf("service %s selects the pods of %d deployments (%v), want 1", svc.Name, len(names), names)
	}
	return names[0], nil
}

func stripNamespace(u *unstructured.Unstructured) *unstructured.Unstructured {
	u = u.DeepCopy()
	u.SetNamespace("")
	return u
}

// objectFileName is operator-sdk's: <name>_<group>_<version>_<kind>.yaml,
// the group left out for the core API.
func objectFileName(u *unstructured.Unstructured) string {
	gvk := u.GroupVersionKind()
	parts := []string{u.GetName()}
	if gvk.Group != "" {
		parts = append(parts, gvk.Group)
	}
	parts = append(parts, gvk.Version, strings.ToLower(gvk.Kind))
	return strings.Join(parts, "_") + ".yaml"
}

// marshal renders obj as YAML with sorted keys. With prune it drops what
// Go's zero values add to typed objects and the API server would not store:
// null creationTimestamps, empty status.
func marshal(obj any, prune bool) ([]byte, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if prune {
		m = pruneZero(m, true)
	}
	return yaml.Marshal(m)
}

func pruneZero(v any, top bool) any {
	switch t := v.(type) {
	case map[string]any:
		for k, val := range t {
			if k == "creationTimestamp" && val == nil {
				delete(t, k)
				continue
			}
			if top && k == "status" {
				delete(t, k)
				continue
			}
			t[k] = pruneZero(val, false)
		}
		return t
	case []any:
		for i := range t {
			t[i] = pruneZero(t[i], false)
		}
		return t
	default:
		return v
	}
}

func bundleAnnotations(o options) map[string]string {
	return map[string]string{
		"operators.operatorframework.io.bundle.mediatype.v1":       "registry+v1",
		"operators.operatorframework.io.bundle.manifests.v1":       "manifests/",
		"operators.operatorframework.io.bundle.metadata.v1":        "metadata/",
		"operators.operatorframework.io.bundle.package.v1":         o.pkg,
		"operators.operatorframework.io.bundle.channels.v1":        o.channels,
		"operators.operatorframework.io.bundle.channel.default.v1": o.defaultChannel,
		"operators.operatorframework.io.metrics.mediatype.v1":      "metrics+v1",
		"operators.operatorframework.io.metrics.builder":           "hack/bundle-gen",
		"operators.operatorframework.io.metrics.project_layout":    "go.kubebuilder.io/v4",
		"operators.operatorframework.io.test.mediatype.v1":         "scorecard+v1",
		"operators.operatorframework.io.test.config.v1":            "tests/scorecard/",
	}
}

// dockerfile is the bundle image's Dockerfile, as operator-sdk writes it:
// the annotations as labels, the bundle's directories copied to the root.
func dockerfile(annotations map[string]string, scorecard bool, dir string) []byte {
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteString("# Generated by make bundle (hack/bundle-gen): do not edit.\nFROM scratch\n\n")
	for _, k := range keys {
		if !scorecard && strings.HasPrefix(k, "operators.operatorframework.io.test.") {
			continue
		}
		fmt.Fprintf(&b, "LABEL %s=%s\n", k, annotations[k])
	}
	fmt.Fprintf(&b, "\nCOPY %s/manifests /manifests/\nCOPY %s/metadata /metadata/\n", dir, dir)
	if scorecard {
		fmt.Fprintf(&b, "COPY %s/tests/scorecard /tests/scorecard/\n", dir)
	}
	return b.Bytes()
}

// webhookDef is one webhook of a validating or mutating configuration.
type webhookDef struct {
	Type                    v1alpha1.WebhookAdmissionType
	Name                    string
	ClientConfig            admissionregistrationv1.WebhookClientConfig
	Rules                   []admissionregistrationv1.RuleWithOperations
	FailurePolicy           *admissionregistrationv1.FailurePolicyType
	MatchPolicy             *admissionregistrationv1.MatchPolicyType
	ObjectSelector          *metav1.LabelSelector
	SideEffects             *admissionregistrationv1.SideEffectClass
	TimeoutSeconds          *int32
	AdmissionReviewVersions []string
	ReinvocationPolicy      *admissionregistrationv1.ReinvocationPolicyType
}
