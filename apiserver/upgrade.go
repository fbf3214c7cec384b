package apiserver

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// The version policy: which kube-apiserver versions a tenant may run, and
// which version changes it may go through. Upstream supports upgrades one
// minor at a time and no downgrade of the data it stored; patch releases
// of a minor are interchangeable upwards.

// IsBundled reports whether the operator ships kube-apiserver version (an
// image, a validator and catalogs), so that it runs without spec.image.
func IsBundled(version string) bool {
	return slices.Contains(v1alpha1.BundledVersions, version)
}

// versionPolicy refuses a version that is neither bundled nor given an
// image: there would be nothing to run. The CRD has the same rule; this
// one also serves `render` and names the bundled versions.
func versionPolicy(cfg *v1alpha1.ApiServerConfig, version string, path *field.Path) field.ErrorList {
	if cfg.Spec.Image != "" || IsBundled(version) {
		return nil
	}
	return field.ErrorList{field.Invalid(path, version, fmt.Sprintf(
		"is not a bundled version (%s): choose one of them, or set image to a kube-apiserver image of this version",
		strings.Join(v1alpha1.BundledVersions, ", ")))}
}

// versionChangePolicy refuses a downgrade (minor or patch) and a skipped
// minor; any patch upwards is free. ran is the version the apiservers
// last ran (status.version), which is older than the old spec's while an
// upgrade is recorded but not done (a hibernated tenant): the skip is
// judged from it too, since the data is still that version's.
func versionChangePolicy(oldVersion, ran, version string, path *field.Path) field.ErrorList {
	oldV, err1 := utilversion.ParseSemantic(oldVersion)
	newV, err2 := utilversion.ParseSemantic(version)
	if err1 != nil || err2 != nil {
		return nil // the syntax is the CRD's and Validate's to refuse
	}
	if newV.LessThan(oldV) {
		return field.ErrorList{field.Forbidden(path, fmt.Sprintf(
			"%s to %s is a downgrade: kube-apiserver cannot go back to an older version of the data it stored; keep %s or move forward (bundled: %s)",
			oldVersion, version, oldVersion, strings.Join(v1alpha1.BundledVersions, ", ")))}
	}
	if skipsMinor(oldV, newV) {
		return field.ErrorList{field.Forbidden(path, fmt.Sprintf(
			"%s to %s skips a minor version: kube-apiserver upgrades one minor at a time, to %s first", oldVersion, version, nextMinor(oldV)))}
	}
	if ranV, err := utilversion.ParseSemantic(ran); err == nil && ran != oldVersion && skipsMinor(ranV, newV) {
		return field.ErrorList{field.Forbidden(path, fmt.Sprintf(
			"the apiservers last ran %s (the upgrade to %s has not happened yet: status.version), and %s to %s skips a minor version: set %s and let the tenant run it first",
			ran, oldVersion, ran, version, nextMinor(ranV)))}
	}
	return nil
}

func skipsMinor(from, to *utilversion.Version) bool {
	return to.Major() != from.Major() || to.Minor() > from.Minor()+1
}

// nextMinor is the version to upgrade v to: the newest bundled version of
// the next minor, or just that minor.
func nextMinor(v *utilversion.Version) string {
	if b := newestBundledOf(v.Major(), v.Minor()+1); b != "" {
		return b
	}
	return fmt.Sprintf("v%d.%d", v.Major(), v.Minor()+1)
}

// newestBundledOf is the newest bundled version of a minor, or "".
func newestBundledOf(major, minor uint) string {
	newest := ""
	for _, b := range v1alpha1.BundledVersions {
		if v, err := utilversion.ParseSemantic(b); err == nil && v.Major() == major && v.Minor() == minor {
			newest = b
		}
	}
	return newest
}

// upgradePolicy names what the spec uses that the target minor removed:
// flags, feature gates, admission plugins, stored resources and served API
// versions the old version's catalog has and the new one's has not. The
// target's own checks would refuse the same spec, but only as "unknown";
// this says that the upgrade removed it, and what to do. Nil when either
// version has no catalog or the minor does not change.
func upgradePolicy(oldSpec, spec *v1alpha1.ApiServerConfigSpec) field.ErrorList {
	oldV, err1 := utilversion.ParseSemantic(oldSpec.Version)
	newV, err2 := utilversion.ParseSemantic(spec.Version)
	if err1 != nil || err2 != nil || (oldV.Major() == newV.Major() && oldV.Minor() == newV.Minor()) {
		return nil
	}
	from, err1 := CatalogFor(oldV)
	to, err2 := CatalogFor(newV)
	if err1 != nil || err2 != nil || from == nil || to == nil {
		return nil
	}
	specPath := field.NewPath("spec")
	removed := func(path *field.Path, what string) *field.Error {
		return field.Forbidden(path, fmt.Sprintf(
			"%s was removed in kube-apiserver %s (%s has it): take it out of the spec, in the same change as the upgrade or before it",
			what, spec.Version, oldSpec.Version))
	}
	var errs field.ErrorList
	for i, a := range spec.ExtraArgs {
		if _, had := from.Flags[a.Name]; had {
			if _, has := to.Flags[a.Name]; !has {
				errs = append(errs, removed(specPath.Child("extraArgs").Index(i).Child("name"), "--"+a.Name))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(spec.FeatureGates)) {
		_, had := from.FeatureGates[name]
		g, has := to.FeatureGates[name]
		switch {
		case had && !has:
			errs = append(errs, removed(specPath.Child("featureGates").Key(name), "the feature gate "+name))
		case has && g.LockToDefault && spec.FeatureGates[name] != g.Default:
			errs = append(errs, field.Forbidden(specPath.Child("featureGates").Key(name), fmt.Sprintf(
				"%s is locked to %t in kube-apiserver %s (it graduated or was deprecated): take it out of the spec, or set it to %t, before or with the upgrade",
				name, g.Default, spec.Version, g.Default)))
		}
	}
	for _, list := range []struct {
		plugins []string
		path    *field.Path
	}{
		{spec.Admission.EnablePlugins, specPath.Child("admission", "enablePlugins")},
		{spec.Admission.DisablePlugins, specPath.Child("admission", "disablePlugins")},
	} {
		for i, p := range list.plugins {
			if _, had := from.AdmissionPlugins[p]; had {
				if _, has := to.AdmissionPlugins[p]; !has {
					errs = append(errs, removed(list.path.Index(i), "the admission plugin "+p))
				}
			}
		}
	}
	resourceRemoved := func(group, resource string, path *field.Path) {
		gr := schema.GroupResource{Group: group, Resource: resource}
		if _, had := from.Resources[gr]; had {
			if _, has := to.Resources[gr]; !has {
				errs = append(errs, removed(path.Child("resource"), "the resource "+gr.String()))
			}
		}
	}
	for i, o := range spec.Etcd.Overrides {
		resourceRemoved(o.Group, o.Resource, specPath.Child("etcd", "overrides").Index(i))
	}
	for i, r := range spec.CacheSizing.DisabledResources {
		resourceRemoved(r.Group, r.Resource, specPath.Child("cacheSizing", "disabledResources").Index(i))
	}
	fromGVs, toGVs := from.GroupVersions(), to.GroupVersions()
	for _, key := range slices.Sorted(maps.Keys(spec.RuntimeConfig)) {
		gv := key
		if gv == "v1" || gv == "api/v1" {
			continue
		}
		if fromGVs[gv] && !toGVs[gv] {
			errs = append(errs, removed(specPath.Child("runtimeConfig").Key(key), "the API "+gv))
		}
	}
	return errs
}

// GroupVersions are the group/versions ("apps/v1", "v1" for the core
// group) that serve at least one stored resource.
func (c *Catalog) GroupVersions() map[string]bool {
	out := map[string]bool{}
	for gr, versions := range c.Resources {
		for _, v := range versions {
			out[schema.GroupVersion{Group: gr.Group, Version: v}.String()] = true
		}
	}
	return out
}
