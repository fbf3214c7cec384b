package apiserver

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// The operator's policy: what the bundled kube-apiserver accepts but a
// hosted apiserver must not run with. Everything kube-apiserver itself
// refuses is left to its own code (Admission.Admit); these rules are only
// for what it would start with and then serve wrongly, or not at all.

// AllowAlwaysAllowAnnotation, set to "true", lets spec.authorization.modes
// contain AlwaysAllow: every request, anonymous ones included, is then
// authorized. For throwaway test tenants only.
const AllowAlwaysAllowAnnotation = "controlplane.apiserver-operator.dev/insecure-allow-always-allow"

// validatePolicy checks a spec (defaults applied) on its own.
func validatePolicy(cfg *v1alpha1.ApiServerConfig, spec *v1alpha1.ApiServerConfigSpec, catalog *Catalog) field.ErrorList {
	specPath := field.NewPath("spec")
	var errs field.ErrorList
	if as := spec.Authorization.Authorizers; len(as) > 0 {
		types := make([]v1alpha1.AuthorizationMode, 0, len(as))
		for _, a := range as {
			types = append(types, v1alpha1.AuthorizationMode(a.Type))
		}
		errs = append(errs, authorizationPolicy(cfg, types, specPath.Child("authorization", "authorizers"), ".type")...)
	} else {
		errs = append(errs, authorizationPolicy(cfg, spec.Authorization.Modes, specPath.Child("authorization", "modes"), "")...)
	}
	if revoke := cfg.Annotations[v1alpha1.RevokeCAAnnotation]; revoke != "" && spec.Certificates.CASecretName != "" {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "annotations").Key(v1alpha1.RevokeCAAnnotation),
			"the operator revokes only the CA it generates, and spec.certificates.caSecretName names a CA of your own: put a new CA in that Secret, and leave the old one out of the bundles your clients and the tenant trust"))
	}
	for i, p := range spec.Admission.EnablePlugins {
		if p == "AlwaysDeny" {
			errs = append(errs, field.Invalid(specPath.Child("admission", "enablePlugins").Index(i), p,
				"AlwaysDeny refuses every write to the tenant, the control plane's own included: it is for tests of admission only"))
		}
	}
	for i, r := range spec.ServiceClusterIPRange {
		prefix, err := netip.ParsePrefix(r)
		if err == nil && prefix.Addr().Is6() && prefix.Bits() < 64 {
			errs = append(errs, field.Invalid(specPath.Child("serviceClusterIPRange").Index(i), r,
				"an IPv6 service range must be a /64 or narrower: kube-apiserver starts with a wider one, but its allocator refuses it and no Service can get an IPv6 ClusterIP"))
		}
	}
	if e := spec.Encryption; e != nil && catalog != nil {
		for i, r := range e.Resources {
			errs = append(errs, encryptionResourcePolicy(r, catalog, specPath.Child("encryption", "resources").Index(i))...)
		}
	}
	return errs
}

// authorizationPolicy refuses modes (or the types of the authorizers'
// chain, each at path[i]+leaf) that leave the tenant open to everyone, or
// that deny the anonymous requests of kubelet's probes on /livez and
// /readyz (RBAC allows them through system:public-info-viewer), so that
// the pods would never become Ready.
func authorizationPolicy(cfg *v1alpha1.ApiServerConfig, modes []v1alpha1.AuthorizationMode, path *field.Path, leaf string) field.ErrorList {
	alwaysAllowOK := cfg.Annotations[AllowAlwaysAllowAnnotation] == "true"
	at := func(i int) *field.Path {
		if leaf == "" {
			return path.Index(i)
		}
		return path.Index(i).Child(strings.TrimPrefix(leaf, "."))
	}
	var errs field.ErrorList
	if i := slices.Index(modes, "AlwaysAllow"); i >= 0 && !alwaysAllowOK {
		errs = append(errs, field.Forbidden(at(i), fmt.Sprintf(
			"AlwaysAllow authorizes every request, anonymous ones included (CIS 1.2.6): leave it out, or annotate the object with %s=true for a throwaway test tenant", AllowAlwaysAllowAnnotation)))
	}
	// Modes are asked in order; Node and Webhook have no opinion on the
	// probes' anonymous requests, the first of these decides.
	for i, m := range modes {
		switch m {
		case "RBAC", "AlwaysAllow":
			return errs
		case "AlwaysDeny":
			return append(errs, field.Invalid(at(i), m,
				"AlwaysDeny before RBAC refuses every request, kubelet's probes of /livez and /readyz included: the pods would never become Ready"))
		}
	}
	return append(errs, field.Invalid(path, modes,
		fmt.Sprintf("%s must include RBAC: without it nothing authorizes kubelet's anonymous probes of /livez and /readyz, and the pods never become Ready", path.String())))
}

// encryptionResourcePolicy refuses a resource that kube-apiserver would
// accept but that names nothing it stores, so that nothing would be
// encrypted without a word: a misspelling in a built-in group. Wildcards
// and resources of groups that are not built in (custom resources) are
// left to kube-apiserver.
func encryptionResourcePolicy(r string, catalog *Catalog, path *field.Path) field.ErrorList {
	if strings.HasPrefix(r, "*") {
		return nil
	}
	resource, group, _ := strings.Cut(r, ".")
	builtIn := false
	var inGroup []string
	for known := range catalog.Resources {
		if known.Group == group {
			builtIn = true
			inGroup = append(inGroup, known.Resource)
		}
	}
	if !builtIn && group != "" {
		return nil
	}
	if _, ok := catalog.Resources[schema.GroupResource{Group: group, Resource: resource}]; ok {
		return nil
	}
	msg := fmt.Sprintf("kube-apiserver %s stores no resource %q in group %q, so nothing would be encrypted for it", catalog.Version, resource, group)
	if s := Suggest(resource, inGroup); s != "" {
		if group != "" {
			s += "." + group
		}
		msg += fmt.Sprintf(", did you mean %q?", s)
	}
	return field.ErrorList{field.Invalid(path, r, msg)}
}

// encryptionSwitchPolicy refuses a move between the operator's keys
// (provider) and the user's own configuration (configSecretName) that
// would leave stored values encrypted with keys the new side does not
// have: kube-apiserver would start, and fail to read them. The way across
// is plain text: provider identity decrypts everything (proven in etcd)
// before the user's configuration takes over; the other way, the user's
// configuration is made to store plain text first.
func encryptionSwitchPolicy(old, cur *v1alpha1.EncryptionSpec, path *field.Path) field.ErrorList {
	if old == nil || cur == nil {
		return nil
	}
	switch {
	case old.Provider != "" && old.Provider != v1alpha1.EncryptionIdentity && cur.ConfigSecretName != "":
		return field.ErrorList{field.Forbidden(path.Child("configSecretName"), fmt.Sprintf(
			"what the operator's %s key encrypted would be unreadable with your own configuration: set provider: identity first, wait for the condition Encrypted to read EncryptionDisabled (everything decrypted and proven in etcd), then set configSecretName", old.Provider))}
	case old.ConfigSecretName != "" && cur.Provider != "" && cur.Provider != v1alpha1.EncryptionIdentity:
		return field.ErrorList{field.Forbidden(path.Child("provider"), fmt.Sprintf(
			"the operator does not have the keys of your configuration (Secret %s): make it store plain text first (identity as its first provider, your keys after it) and rewrite what it encrypted, then set provider: identity, then provider: %s", old.ConfigSecretName, cur.Provider))}
	}
	return nil
}

// ValidateUpdate refuses changes that kube-apiserver would start with but
// never carry out, or that lose data: moving etcd.prefix (every stored
// object is left behind), changing or dropping the secondary service range
// (kube-apiserver keeps the one it started with and only logs), a
// downgrade or a skipped minor version (upstream supports one minor at a
// time, upwards), and an upgrade to a minor that removed something the
// spec uses.
func ValidateUpdate(old, cfg *v1alpha1.ApiServerConfig) field.ErrorList {
	oldSpec, spec := old.Spec.DeepCopy(), cfg.Spec.DeepCopy()
	SetDefaults(oldSpec)
	SetDefaults(spec)
	specPath := field.NewPath("spec")
	var errs field.ErrorList
	if spec.Etcd.Prefix != oldSpec.Etcd.Prefix {
		errs = append(errs, field.Forbidden(specPath.Child("etcd", "prefix"), fmt.Sprintf(
			"is immutable (was %q): every object the tenant stored is under the old prefix and would be left behind; create a new ApiServerConfig and migrate instead", oldSpec.Etcd.Prefix)))
	}
	if len(oldSpec.ServiceClusterIPRange) > 1 {
		was := oldSpec.ServiceClusterIPRange[1]
		switch {
		case len(spec.ServiceClusterIPRange) < 2:
			errs = append(errs, field.Forbidden(specPath.Child("serviceClusterIPRange"), fmt.Sprintf(
				"the secondary range %s cannot be removed: kube-apiserver keeps serving the ServiceCIDR it was created with and only logs the change", was)))
		case spec.ServiceClusterIPRange[1] != was:
			errs = append(errs, field.Forbidden(specPath.Child("serviceClusterIPRange").Index(1), fmt.Sprintf(
				"the secondary range is immutable once set (was %s): kube-apiserver keeps serving the ServiceCIDR it was created with and only logs the change", was)))
		}
	}
	errs = append(errs, encryptionSwitchPolicy(oldSpec.Encryption, spec.Encryption, specPath.Child("encryption"))...)
	errs = append(errs, versionChangePolicy(oldSpec.Version, old.Status.Version, spec.Version, specPath.Child("version"))...)
	errs = append(errs, upgradePolicy(oldSpec, spec)...)
	return errs
}
