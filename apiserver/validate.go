package apiserver

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// Validate checks an ApiServerConfig against what the target kube-apiserver
// accepts, beyond the CRD's own rules: extra arguments against its flags,
// etcd overrides and watch-cache settings against its built-in resources,
// feature gates and admission plugins against the ones compiled in. Each of
// these would otherwise make kube-apiserver exit at start, or, for
// overrides, be ignored without a word. It returns the errors, with field
// paths, and warnings for what works but deserves a look (deprecated flags,
// alpha gates).
func Validate(cfg *v1alpha1.ApiServerConfig) (field.ErrorList, []string) {
	spec := cfg.Spec.DeepCopy()
	SetDefaults(spec)
	specPath := field.NewPath("spec")
	var errs field.ErrorList
	var warnings []string

	v, err := utilversion.ParseSemantic(spec.Version)
	if err != nil {
		return field.ErrorList{field.Invalid(specPath.Child("version"), spec.Version, "must be vMAJOR.MINOR.PATCH")}, nil
	}
	if v.LessThan(MinimumVersion) {
		errs = append(errs, field.Invalid(specPath.Child("version"), spec.Version,
			fmt.Sprintf("the operator runs kube-apiserver %s or later", MinimumVersion)))
	}
	errs = append(errs, versionPolicy(cfg, spec.Version, specPath.Child("version"))...)
	catalog, err := CatalogFor(v)
	if err != nil {
		return append(errs, field.InternalError(specPath.Child("version"), err)), nil
	}
	if catalog == nil {
		warnings = append(warnings, fmt.Sprintf("the operator has no catalog of kube-apiserver %s: extraArgs, feature gates and etcd overrides are checked only by syntax", spec.Version))
	}
	if spec.EndpointReconcilerType == v1alpha1.EndpointReconcilerMasterCount {
		warnings = append(warnings, "endpointReconcilerType master-count is deprecated upstream; lease is the default and needs no --apiserver-count")
	}

	errs = append(errs, validateExtraArgs(spec.ExtraArgs, v, catalog, specPath.Child("extraArgs"), &warnings)...)
	errs = append(errs, validateAuditWebhook(spec, specPath.Child("extraArgs"))...)
	errs = append(errs, validateAuthentication(spec, v, catalog, specPath.Child("authentication"), &warnings)...)
	errs = append(errs, validatePolicy(cfg, spec, catalog)...)
	errs = append(errs, validateMaintenance(spec.Maintenance, specPath.Child("maintenance"))...)
	errs = append(errs, validateKonnectivity(spec, specPath, &warnings)...)
	placement := newEtcdPlacement(&spec.Etcd)
	warnings = append(warnings, networkPolicyWarnings(spec, &placement)...)
	if catalog != nil {
		for i, o := range spec.Etcd.Overrides {
			errs = append(errs, validateResource(o.Group, o.Resource, catalog, specPath.Child("etcd", "overrides").Index(i))...)
		}
		for i, r := range spec.CacheSizing.DisabledResources {
			errs = append(errs, validateResource(r.Group, r.Resource, catalog, specPath.Child("cacheSizing", "disabledResources").Index(i))...)
		}
		errs = append(errs, validateFeatureGates(spec.FeatureGates, catalog, specPath.Child("featureGates"), &warnings)...)
		errs = append(errs, validatePlugins(spec.Admission.EnablePlugins, catalog, specPath.Child("admission", "enablePlugins"))...)
		errs = append(errs, validatePlugins(spec.Admission.DisablePlugins, catalog, specPath.Child("admission", "disablePlugins"))...)
	}
	return errs, warnings
}

// validateExtraArgs refuses flags the operator manages, flags the version
// does not have (with a suggestion for a misspelling), and a flag repeated
// where only the last value would count. Values are judged by
// kube-apiserver's own flag parsing (Admission.Admit).
func validateExtraArgs(args []v1alpha1.ExtraArg, v *utilversion.Version, catalog *Catalog, path *field.Path, warnings *[]string) field.ErrorList {
	var errs field.ErrorList
	managed := ManagedFlagFields()
	seen := map[string]int{}
	for i, a := range args {
		p := path.Index(i)
		if owner, ok := managed[a.Name]; ok {
			msg := fmt.Sprintf("--%s is managed by the operator from %s: set it there instead", a.Name, owner)
			if !strings.HasPrefix(owner, "spec.") {
				msg = fmt.Sprintf("--%s is managed by the operator (%s) and cannot be set", a.Name, owner)
			}
			errs = append(errs, field.Forbidden(p.Child("name"), msg))
			continue
		}
		if catalog == nil {
			if !FlagSupported(a.Name, v, nil) {
				errs = append(errs, field.Invalid(p.Child("name"), a.Name,
					fmt.Sprintf("kube-apiserver %s has no flag --%s", v, a.Name)))
			}
			continue
		}
		f, ok := catalog.Flags[a.Name]
		if !ok {
			msg := fmt.Sprintf("kube-apiserver %s has no flag --%s", catalog.Version, a.Name)
			if s := Suggest(a.Name, catalog.FlagNames()); s != "" {
				msg += fmt.Sprintf(", did you mean --%s?", s)
			}
			errs = append(errs, field.Invalid(p.Child("name"), a.Name, msg))
			continue
		}
		if f.Deprecated != "" {
			*warnings = append(*warnings, fmt.Sprintf("%s: --%s is deprecated: %s", p.Child("name"), a.Name, f.Deprecated))
		}
		if first, dup := seen[a.Name]; dup && !f.Repeatable {
			errs = append(errs, field.Duplicate(p.Child("name"),
				fmt.Sprintf("--%s is also given in %s and kube-apiserver keeps only the last value", a.Name, path.Index(first))))
		} else if !dup {
			seen[a.Name] = i
		}
	}
	return errs
}

// validateAuditWebhook refuses the deprecated name of
// --audit-webhook-initial-backoff in extraArgs when
// spec.audit.webhook.initialBackoff sets it: both set one value, and the
// operator's, rendered after it, would win without a word.
func validateAuditWebhook(spec *v1alpha1.ApiServerConfigSpec, path *field.Path) field.ErrorList {
	if w := spec.Audit.Webhook; w == nil || w.InitialBackoff == nil {
		return nil
	}
	var errs field.ErrorList
	for i, a := range spec.ExtraArgs {
		if a.Name == "audit-webhook-batch-initial-backoff" {
			errs = append(errs, field.Forbidden(path.Index(i).Child("name"),
				"--audit-webhook-batch-initial-backoff is the deprecated name of --audit-webhook-initial-backoff, which the operator sets from spec.audit.webhook.initialBackoff: set it there only"))
		}
	}
	return errs
}

// validateAuthentication refuses what the authentication and
// authorization configuration files cannot carry: jwt, anonymousPaths and
// authorizers in a version that reads no such file, and an issuer to be
// called through the konnectivity tunnel of a tenant that has none
// (upstream would dial it directly without a word). It warns of a webhook
// that may deny kubelet's probes.
func validateAuthentication(spec *v1alpha1.ApiServerConfigSpec, v *utilversion.Version, catalog *Catalog, path *field.Path, warnings *[]string) field.ErrorList {
	var errs field.ErrorList
	if !FlagSupported("authentication-config", v, catalog) {
		const why = "needs kube-apiserver's --authentication-config, which %s does not have: use spec.authentication.oidc, or a version from v1.34 on"
		if len(spec.Authentication.JWT) > 0 {
			errs = append(errs, field.Forbidden(path.Child("jwt"), fmt.Sprintf(why, spec.Version)))
		}
		if len(spec.Authentication.AnonymousPaths) > 0 {
			errs = append(errs, field.Forbidden(path.Child("anonymousPaths"), fmt.Sprintf(why, spec.Version)))
		}
	}
	if len(spec.Authorization.Authorizers) > 0 && !FlagSupported("authorization-config", v, catalog) {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "authorization", "authorizers"), fmt.Sprintf(
			"needs kube-apiserver's --authorization-config with apiserver.config.k8s.io/v1, which %s does not have: use modes and webhook, or a version from v1.32 on", spec.Version)))
	}
	for i, a := range spec.Authorization.Authorizers {
		if a.Type == "RBAC" {
			break
		}
		if a.Webhook != nil && a.Webhook.FailurePolicy == "Deny" && len(a.Webhook.MatchConditions) == 0 {
			*warnings = append(*warnings, fmt.Sprintf(
				"spec.authorization.authorizers[%d]: webhook %s comes before RBAC with failurePolicy Deny and no matchConditions: while it is down it denies kubelet's anonymous probes of /livez and /readyz, and kubelet restarts the apiservers; put it after RBAC, use NoOpinion, or select resource requests with a matchCondition (has(request.resourceAttributes))",
				i, a.Name))
		}
	}
	for i, j := range spec.Authentication.JWT {
		if j.Issuer.EgressSelectorType == "cluster" && spec.Konnectivity == nil {
			errs = append(errs, field.Invalid(path.Child("jwt").Index(i).Child("issuer", "egressSelectorType"), j.Issuer.EgressSelectorType,
				"the issuer would be called through the konnectivity tunnel into the tenant's nodes, and the tenant has none: set spec.konnectivity, or leave egressSelectorType unset to call the issuer from the apiserver pods"))
		}
	}
	return errs
}

// validateResource checks that kube-apiserver stores group/resource, since
// an override or cache setting naming anything else is silently ignored.
func validateResource(group, resource string, catalog *Catalog, path *field.Path) field.ErrorList {
	gr := schema.GroupResource{Group: group, Resource: resource}
	if _, ok := catalog.Resources[gr]; ok {
		return nil
	}
	var inGroup, all []string
	for known := range catalog.Resources {
		all = append(all, known.String())
		if known.Group == group {
			inGroup = append(inGroup, known.Resource)
		}
	}
	msg := fmt.Sprintf("kube-apiserver %s stores no resource %q in group %q", catalog.Version, resource, group)
	if s := Suggest(resource, inGroup); s != "" {
		msg += fmt.Sprintf(", did you mean %q?", s)
	} else if s := Suggest(gr.String(), all); s != "" {
		msg += fmt.Sprintf(", did you mean %q?", s)
	}
	return field.ErrorList{field.Invalid(path.Child("resource"), resource, msg)}
}

// validateFeatureGates refuses unknown gates and gates locked to their
// default, both of which make kube-apiserver exit, and warns about alpha
// gates.
func validateFeatureGates(gates map[string]bool, catalog *Catalog, path *field.Path, warnings *[]string) field.ErrorList {
	var errs field.ErrorList
	names := make([]string, 0, len(gates))
	for name := range gates {
		names = append(names, name)
	}
	sort.Strings(names)
	known := make([]string, 0, len(catalog.FeatureGates))
	for name := range catalog.FeatureGates {
		known = append(known, name)
	}
	for _, name := range names {
		g, ok := catalog.FeatureGates[name]
		p := path.Key(name)
		switch {
		case !ok:
			msg := fmt.Sprintf("kube-apiserver %s has no feature gate %s", catalog.Version, name)
			if s := Suggest(name, known); s != "" {
				msg += fmt.Sprintf(", did you mean %s?", s)
			}
			errs = append(errs, field.Invalid(p, gates[name], msg))
		case g.LockToDefault && gates[name] != g.Default:
			errs = append(errs, field.Invalid(p, gates[name],
				fmt.Sprintf("%s is locked to %t in kube-apiserver %s", name, g.Default, catalog.Version)))
		case g.PreRelease == "ALPHA" && gates[name]:
			*warnings = append(*warnings, fmt.Sprintf("%s: %s is an alpha feature: not for production", p, name))
		}
	}
	return errs
}

// validatePlugins refuses admission plugins that are not compiled in.
func validatePlugins(plugins []string, catalog *Catalog, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	known := make([]string, 0, len(catalog.AdmissionPlugins))
	for name := range catalog.AdmissionPlugins {
		known = append(known, name)
	}
	for i, name := range plugins {
		if _, ok := catalog.AdmissionPlugins[name]; ok {
			continue
		}
		msg := fmt.Sprintf("kube-apiserver %s has no admission plugin %s", catalog.Version, name)
		if s := Suggest(name, known); s != "" {
			msg += fmt.Sprintf(", did you mean %s?", s)
		}
		errs = append(errs, field.Invalid(path.Index(i), name, msg))
	}
	return errs
}

// widestSpecs are completed specs that set every optional feature, in each
// authentication style, so that ManagedFlagFields sees every flag the
// operator may set; all but spec.konnectivity, whose --tls-sni-cert-key
// is the user's to set without it (validateKonnectivity refuses it with
// it).
func widestSpecs() []*Completed {
	var out []*Completed
	// The bundled versions take authentication from a file; v1.23 still has
	// the OIDC flags and --target-ram-mb.
	for _, version := range append(slices.Clone(v1alpha1.BundledVersions), "v1.23.0") {
		cfg := &v1alpha1.ApiServerConfig{
			ObjectMeta: metav1.ObjectMeta{Name: "widest", Namespace: "widest"},
			Spec: v1alpha1.ApiServerConfigSpec{
				Version:                version,
				EndpointReconcilerType: v1alpha1.EndpointReconcilerMasterCount,
				Etcd: v1alpha1.EtcdSpec{
					Servers:   []string{"https://etcd:2379"},
					TLS:       &v1alpha1.EtcdTLS{SecretName: "etcd"},
					Overrides: []v1alpha1.EtcdOverride{{Resource: "events", Servers: []string{"https://e:2379"}}},
				},
				Serving: v1alpha1.ServingSpec{
					ExternalHostname: "api.example.com",
					TLS:              v1alpha1.TLSSpec{CipherSuites: secureCipherSuites[:1]},
				},
				Authentication: v1alpha1.AuthenticationSpec{
					OIDC: &v1alpha1.OIDCSpec{IssuerURL: "https://issuer", ClientID: "c", UsernamePrefix: "p",
						GroupsClaim: "g", GroupsPrefix: "p", CAConfigMapName: "ca"},
					ServiceAccount: v1alpha1.ServiceAccountSpec{MaxTokenExpiration: &metav1.Duration{Duration: time.Hour}, JWKSURI: "https://keys.example.com/jwks"},
				},
				Authorization: v1alpha1.AuthorizationSpec{
					Modes:   []v1alpha1.AuthorizationMode{"Webhook"},
					Webhook: &v1alpha1.AuthorizationWebhookSpec{KubeconfigSecretName: "w"},
				},
				Admission: v1alpha1.AdmissionSpec{DisablePlugins: []string{"x"}, EventRateLimit: &v1alpha1.EventRateLimitSpec{}},
				Audit: v1alpha1.AuditSpec{Webhook: &v1alpha1.AuditWebhookSpec{
					KubeconfigSecretName: "a",
					InitialBackoff:       &metav1.Duration{Duration: time.Second},
					Batch: &v1alpha1.AuditWebhookBatchSpec{BufferSize: ptr.To[int32](1), MaxSize: ptr.To[int32](1),
						MaxWait: &metav1.Duration{Duration: time.Second}, ThrottleQPS: ptr.To[int32](1), ThrottleBurst: ptr.To[int32](1)},
					Truncate: &v1alpha1.AuditWebhookTruncateSpec{MaxEventBytes: ptr.To[int64](1), MaxBatchBytes: ptr.To[int64](1)},
				}},
				Encryption:    &v1alpha1.EncryptionSpec{Provider: "secretbox"},
				FeatureGates:  map[string]bool{"X": true},
				RuntimeConfig: map[string]string{"api/all": "true"},
				Requests: v1alpha1.RequestsSpec{
					Timeout:           &metav1.Duration{Duration: time.Minute},
					MinTimeoutSeconds: ptr.To[int32](1800),
				},
				CacheSizing: v1alpha1.CacheSizingSpec{
					TargetRAMMB:       ptr.To[int32](1024),
					DisabledResources: []v1alpha1.GroupResource{{Resource: "events"}},
				},
			},
		}
		c, err := Complete(cfg, Inputs{})
		if err != nil {
			panic(fmt.Sprintf("completing the widest spec: %v", err))
		}
		out = append(out, c)
		if version == "v1.23.0" {
			continue
		}
		// The authorization chain instead of modes and webhook.
		chained := cfg.DeepCopy()
		chained.Spec.Authorization = v1alpha1.AuthorizationSpec{Authorizers: []v1alpha1.Authorizer{{Type: "RBAC", Name: "rbac"}}}
		if c, err = Complete(chained, Inputs{}); err != nil {
			panic(fmt.Sprintf("completing the widest spec: %v", err))
		}
		out = append(out, c)
	}
	return out
}
