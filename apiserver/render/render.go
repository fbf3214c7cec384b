// Package render shows, with no cluster, what the operator would apply for
// an ApiServerConfig manifest: the kube-apiserver command line and the
// objects, with secret material left out, byte-stable so that a GitOps pull
// request can show their diff. The manifest is defaulted and validated as
// admission would (the CRD's schema and CEL rules, then the webhook's checks
// against the bundled kube-apiserver), with the same messages.
package render

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/admission"
)

// Options are the facts rendering cannot know offline.
type Options struct {
	// CRD is the ApiServerConfig CustomResourceDefinition (YAML), whose
	// schema, defaults and rules admission applies.
	CRD []byte
	// Inputs are what the cluster would tell (the Service's ClusterIP...).
	Inputs apiserver.Inputs
	// ImageRepository is the operator's --apiserver-image-repository.
	ImageRepository string
	// EtcdDialerImage is the operator's --etcd-dialer-image.
	EtcdDialerImage string
	// KonnectivityServerImage and KonnectivityAgentImage are the
	// operator's --konnectivity-server-image and
	// --konnectivity-agent-image.
	KonnectivityServerImage string
	KonnectivityAgentImage  string
	// Admission is the operator's admission (its validators), so that
	// rendering refuses exactly what admission refuses.
	Admission admission.Admission
}

// redacted stands for secret material, which rendering never generates.
const redacted = "<generated in the cluster>"

// Render writes what the operator would apply for manifest to w. An invalid
// manifest gives an error with the messages admission would give.
func Render(w io.Writer, manifest []byte, opts Options) error {
	cfg, err := admit(manifest, opts.CRD, opts.Admission)
	if err != nil {
		return err
	}
	c, err := apiserver.Complete(cfg, opts.Inputs)
	if err != nil {
		return err
	}
	// Stand-in material, left out below: the real one is generated in the
	// cluster. So is the OIDC issuer's CA, read there from the user's
	// ConfigMap.
	m, env, err := admission.StandIns(c)
	if err != nil {
		return err
	}
	env.IssuerCAs, env.ImageRepository, env.EtcdDialerImage = nil, opts.ImageRepository, opts.EtcdDialerImage
	if env.Referenced != nil {
		// The webhooks' kubeconfigs, copied into the authorization
		// Secret, are read in the cluster: a fixed placeholder keeps the
		// output the same from one run to the next.
		env.Referenced = func(kind, name string) map[string][]byte {
			return map[string][]byte{"kubeconfig": []byte("# the kubeconfig of Secret " + name + ", read in the cluster\n")}
		}
	}
	env.KonnectivityServerImage, env.KonnectivityAgentImage = opts.KonnectivityServerImage, opts.KonnectivityAgentImage
	desired, err := apiserver.Desired(c, m, env)
	if err != nil {
		return err
	}
	// The pod template's hash covers the material too.
	desired.Deployment.Spec.Template.Annotations[apiserver.ConfigHashAnnotation] = redacted

	var out bytes.Buffer
	fmt.Fprintf(&out, "# kube-apiserver %s command line for %s/%s\n", c.Spec.Version, cfg.Namespace, cfg.Name)
	fmt.Fprintf(&out, "#   kube-apiserver \\\n")
	for i, a := range desired.Args {
		sep := " \\"
		if i == len(desired.Args)-1 {
			sep = ""
		}
		fmt.Fprintf(&out, "#     %s%s\n", a, sep)
	}
	objs := []any{desired.Service}
	if ks := desired.KonnectivityService; ks != nil {
		objs = append(objs, ks)
	}
	objs = append(objs, desired.ConfigMap, desired.Deployment)
	if pdb := desired.PodDisruptionBudget; pdb != nil {
		objs = append(objs, pdb)
	}
	if np := desired.NetworkPolicy; np != nil {
		objs = append(objs, np)
	}
	if desired.KonnectivityAgent != nil {
		agent, err := redactedKonnectivityAgent(c, env.KonnectivityAgentImage)
		if err != nil {
			return err
		}
		objs = append(objs, agent)
	}
	secrets := slices.SortedFunc(slices.Values(desired.Secrets), func(a, b *corev1.Secret) int { return strings.Compare(a.Name, b.Name) })
	for _, s := range secrets {
		objs = append(objs, redact(s))
	}
	for _, o := range objs {
		data, err := yaml.Marshal(o)
		if err != nil {
			return fmt.Errorf("writing %T: %w", o, err)
		}
		out.WriteString("---\n")
		out.Write(data)
	}
	_, err = w.Write(out.Bytes())
	return err
}

// redactedKonnectivityAgent is the agents' manifests with the
// konnectivity CA, generated in the cluster, left out, and the hash of it
// on their template.
func redactedKonnectivityAgent(c *apiserver.Completed, image string) (*corev1.ConfigMap, error) {
	objects, err := apiserver.KonnectivityAgentObjects(c, []byte(redacted), image)
	if err != nil {
		return nil, err
	}
	for _, o := range objects {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			ds.Spec.Template.Annotations[apiserver.KonnectivityAgentKubeconfigHashAnnotation] = redacted
		}
	}
	return apiserver.KonnectivityAgentConfigMap(c, objects)
}

// redact is s with every value of its data left out.
func redact(s *corev1.Secret) *corev1.Secret {
	out := s.DeepCopy()
	out.Data, out.StringData = nil, map[string]string{}
	for k := range s.Data {
		out.StringData[k] = redacted
	}
	return out
}

// admit defaults and validates manifest as the API server and the webhook
// would, and returns the typed object.
func admit(manifest, crdYAML []byte, judge admission.Admission) (*v1alpha1.ApiServerConfig, error) {
	u := &unstructured.Unstructured{}
	if err := yaml.UnmarshalStrict(manifest, &u.Object); err != nil {
		return nil, fmt.Errorf("reading the manifest: %w", err)
	}
	// Again, with whole numbers as integers, as the API server reads them:
	// CEL rules compare integer fields with integers.
	doc, err := yaml.YAMLToJSON(manifest)
	if err != nil {
		return nil, fmt.Errorf("reading the manifest: %w", err)
	}
	u.Object = nil
	if err := utiljson.Unmarshal(doc, &u.Object); err != nil {
		return nil, fmt.Errorf("reading the manifest: %w", err)
	}
	gvk := u.GroupVersionKind()
	if gvk != v1alpha1.GroupVersion.WithKind("ApiServerConfig") {
		return nil, fmt.Errorf("the manifest is a %s, not an ApiServerConfig of %s", gvk, v1alpha1.GroupVersion)
	}
	if u.GetNamespace() == "" {
		u.SetNamespace("default")
	}

	schema, err := crdSchema(crdYAML)
	if err != nil {
		return nil, err
	}
	structural, err := structuralschema.NewStructural(schema)
	if err != nil {
		return nil, fmt.Errorf("reading the CRD's schema: %w", err)
	}
	structuraldefaulting.Default(u.Object, structural)

	validator, _, err := validation.NewSchemaValidator(schema)
	if err != nil {
		return nil, fmt.Errorf("reading the CRD's schema: %w", err)
	}
	errs := validation.ValidateCustomResource(nil, u.Object, validator)
	celErrs, _ := cel.NewValidator(structural, true, celconfig.PerCallLimit).
		Validate(context.Background(), nil, structural, u.Object, nil, celconfig.RuntimeCELCostBudget)
	errs = append(errs, celErrs...)
	if len(errs) > 0 {
		return nil, invalid(u.GetName(), errs)
	}

	cfg := &v1alpha1.ApiServerConfig{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cfg); err != nil {
		return nil, fmt.Errorf("reading the manifest: %w", err)
	}
	// What the operator's mutating webhook gives a new ApiServerConfig.
	apiserver.SetCreateDefaults(cfg)
	if errs, warnings := judge.Admit(context.Background(), nil, cfg); len(errs) > 0 {
		return nil, invalid(cfg.Name, errs)
	} else if len(warnings) > 0 {
		for _, w := range warnings {
			// A warning that cannot be written is no reason to fail.
			_, _ = fmt.Fprintf(warningWriter, "Warning: %s\n", w)
		}
	}
	return cfg, nil
}

// warningWriter receives admission warnings (standard error in the CLI).
var warningWriter = io.Discard

// SetWarningWriter sends admission warnings to w.
func SetWarningWriter(w io.Writer) { warningWriter = w }

func invalid(name string, errs field.ErrorList) error {
	return apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("ApiServerConfig").GroupKind(), name, errs)
}

// crdSchema is the internal schema of the CRD's served version.
func crdSchema(crdYAML []byte) (*apiextensions.JSONSchemaProps, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(crdYAML, crd); err != nil {
		return nil, fmt.Errorf("reading the CRD: %w", err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != v1alpha1.GroupVersion.Version || v.Schema == nil {
			continue
		}
		out := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, out, nil); err != nil {
			return nil, fmt.Errorf("reading the CRD's schema: %w", err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("the CRD has no schema for %s", strings.TrimSpace(v1alpha1.GroupVersion.Version))
}
