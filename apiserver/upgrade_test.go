package apiserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// TestBundledVersions_HaveTheirOwnCatalogs: every bundled version has
// catalogs of its own (make generate), and no catalog is left for a
// version that is no longer bundled.
func TestBundledVersions_HaveTheirOwnCatalogs(t *testing.T) {
	all, err := loadCatalogs()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range v1alpha1.BundledVersions {
		c, err := CatalogFor(utilversion.MustParseSemantic(v))
		if err != nil || c == nil || c.Version != v {
			t.Errorf("CatalogFor(%s) = %v, %v: want the catalogs of %s (run make generate)", v, c, err, v)
			continue
		}
		if len(c.Flags) == 0 || len(c.FeatureGates) == 0 || len(c.AdmissionPlugins) == 0 || len(c.Resources) == 0 {
			t.Errorf("the catalogs of %s are partly empty: %d flags, %d gates, %d plugins, %d resources",
				v, len(c.Flags), len(c.FeatureGates), len(c.AdmissionPlugins), len(c.Resources))
		}
	}
	for v := range all {
		if !IsBundled(v) {
			t.Errorf("apiserver/catalog has catalogs of %s, which apiserver/bundled/versions does not list", v)
		}
	}
	if v1alpha1.BundledVersion != v1alpha1.BundledVersions[len(v1alpha1.BundledVersions)-1] {
		t.Errorf("the default version %s is not the newest bundled one (%v)", v1alpha1.BundledVersion, v1alpha1.BundledVersions)
	}
}

// TestAdmission_EachVersionIsJudgedByItsOwnCode: a spec is judged by the
// catalogs and the validator of its own version, and an upgrade names what
// the target removed at the field that uses it.
func TestAdmission_EachVersionIsJudgedByItsOwnCode(t *testing.T) {
	if len(v1alpha1.BundledVersions) < 2 {
		t.Skip("one bundled version")
	}
	a := Admission{Validator: validators(t)}
	ctx := context.Background()
	older := v1alpha1.BundledVersions[len(v1alpha1.BundledVersions)-2]

	// An admission plugin the older version has and the newer has not.
	oldCatalog, _ := CatalogFor(utilversion.MustParseSemantic(older))
	newCatalog, _ := CatalogFor(utilversion.MustParseSemantic(v1alpha1.BundledVersion))
	var gone []string
	for name := range oldCatalog.AdmissionPlugins {
		if _, ok := newCatalog.AdmissionPlugins[name]; !ok && name != "AlwaysDeny" {
			gone = append(gone, name)
		}
	}
	if len(gone) == 0 {
		t.Logf("no admission plugin of %s is gone in %s: only the upgrade itself is judged", older, v1alpha1.BundledVersion)
	} else {
		slices.Sort(gone)
		plugin := gone[0]
		onOlder := tenant(func(cfg *v1alpha1.ApiServerConfig) {
			cfg.Spec.Version = older
			cfg.Spec.Admission.DisablePlugins = []string{plugin}
		})
		if errs, _ := a.Admit(ctx, nil, onOlder); len(errs) > 0 {
			t.Fatalf("a %s spec disabling its own %s plugin is refused: %v", older, plugin, errs.ToAggregate())
		}
		onNewer := onOlder.DeepCopy()
		onNewer.Spec.Version = v1alpha1.BundledVersion
		errs, _ := a.Admit(ctx, nil, onNewer)
		if len(errs) != 1 || errs[0].Field != "spec.admission.disablePlugins[0]" ||
			!strings.Contains(errs[0].Detail, "kube-apiserver "+v1alpha1.BundledVersion+" has no admission plugin "+plugin) {
			t.Fatalf("creating a %s spec with %s: want one refusal on spec.admission.disablePlugins[0], got %v", v1alpha1.BundledVersion, plugin, errs.ToAggregate())
		}
		errs, _ = a.Admit(ctx, onOlder, onNewer)
		if len(errs) != 1 || errs[0].Field != "spec.admission.disablePlugins[0]" ||
			!strings.Contains(errs[0].Detail, "was removed in kube-apiserver "+v1alpha1.BundledVersion) {
			t.Fatalf("upgrading with %s: want one refusal saying it was removed, got %v", plugin, errs.ToAggregate())
		}
	}

	// The upgrade itself, and the same spec without what was removed.
	plain := tenant(func(cfg *v1alpha1.ApiServerConfig) { cfg.Spec.Version = older })
	upgraded := plain.DeepCopy()
	upgraded.Spec.Version = v1alpha1.BundledVersion
	if errs, _ := a.Admit(ctx, plain, upgraded); len(errs) > 0 {
		t.Fatalf("upgrading %s to %s is refused: %v", older, v1alpha1.BundledVersion, errs.ToAggregate())
	}
	// Another patch release of a bundled minor, from a user's image, is
	// judged by that minor's bundled code.
	if newest := utilversion.MustParseSemantic(v1alpha1.BundledVersion); newest.Patch() > 0 {
		other := fmt.Sprintf("v%d.%d.%d", newest.Major(), newest.Minor(), newest.Patch()-1)
		patch := upgraded.DeepCopy()
		patch.Spec.Version, patch.Spec.Image = other, "registry.example.com/kube-apiserver:"+other
		if errs, _ := a.Admit(ctx, nil, patch); len(errs) > 0 {
			t.Fatalf("%s with an image is refused: %v", other, errs.ToAggregate())
		}
	}
	if errs, _ := a.Admit(ctx, upgraded, plain); len(errs) != 1 || errs[0].Field != "spec.version" || !strings.Contains(errs[0].Detail, "downgrade") {
		t.Fatalf("downgrading: want one refusal on spec.version, got %v", errs.ToAggregate())
	}
}

// TestValidate_UnbundledVersionNeedsAnImage: a version the operator does
// not ship runs only from a user's image, and the refusal lists what is
// bundled.
func TestValidate_UnbundledVersionNeedsAnImage(t *testing.T) {
	cfg := tenant(func(cfg *v1alpha1.ApiServerConfig) { cfg.Spec.Version = "v1.37.0" })
	errs, _ := Validate(cfg)
	expectRefusal(t, errs, "spec.version", "is not a bundled version ("+strings.Join(v1alpha1.BundledVersions, ", ")+")")
	cfg.Spec.Image = "registry.example.com/kube-apiserver:v1.37.0"
	if errs, _ := Validate(cfg); len(errs) > 0 {
		t.Fatalf("v1.37.0 with an image is refused: %v", errs.ToAggregate())
	}
	for _, v := range v1alpha1.BundledVersions {
		cfg := tenant(func(cfg *v1alpha1.ApiServerConfig) { cfg.Spec.Version = v })
		if errs, _ := Validate(cfg); len(errs) > 0 {
			t.Errorf("bundled %s without an image is refused: %v", v, errs.ToAggregate())
		}
	}
}

// TestValidateUpdate_SkipIsJudgedFromWhatRan: a hibernated tenant keeps
// the version it ran (status.version) while its recorded upgrade waits;
// a second minor on top of that would skip one when it wakes.
func TestValidateUpdate_SkipIsJudgedFromWhatRan(t *testing.T) {
	old := tenant(func(cfg *v1alpha1.ApiServerConfig) {
		cfg.Spec.Version, cfg.Spec.Image = "v1.36.4", ""
		cfg.Status.Version = "v1.35.2"
	})
	cfg := old.DeepCopy()
	cfg.Spec.Version = "v1.37.1"
	expectRefusal(t, ValidateUpdate(old, cfg), "spec.version", "the apiservers last ran v1.35.2 (the upgrade to v1.36.4 has not happened yet")
	old.Status.Version = "v1.36.4"
	expectRefusal(t, ValidateUpdate(old, cfg), "", "")
}
