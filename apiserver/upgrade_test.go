package apiserver

import (
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

// TestValidate_UnbundledVersionNeedsAnImage: a version the operator does
// not ship runs only from a user's image, and the refusal lists what is
// bundled.
func TestValidate_UnbundledVersionNeedsAnImage(t *testing.T) {
	cfg := sample(t, "minimal")
	cfg.Spec.Version = "v1.37.0"
	errs, _ := Validate(cfg)
	expectRefusal(t, errs, "spec.version", "is not a bundled version ("+strings.Join(v1alpha1.BundledVersions, ", ")+")")
	cfg.Spec.Image = "registry.example.com/kube-apiserver:v1.37.0"
	if errs, _ := Validate(cfg); len(errs) > 0 {
		t.Fatalf("v1.37.0 with an image is refused: %v", errs.ToAggregate())
	}
	for _, v := range v1alpha1.BundledVersions {
		cfg := sample(t, "minimal")
		cfg.Spec.Version = v
		if errs, _ := Validate(cfg); len(errs) > 0 {
			t.Errorf("bundled %s without an image is refused: %v", v, errs.ToAggregate())
		}
	}
}

// TestValidateUpdate_SkipIsJudgedFromWhatRan: a hibernated tenant keeps
// the version it ran (status.version) while its recorded upgrade waits;
// a second minor on top of that would skip one when it wakes.
func TestValidateUpdate_SkipIsJudgedFromWhatRan(t *testing.T) {
	old := sample(t, "minimal")
	old.Spec.Version, old.Spec.Image = "v1.36.4", ""
	old.Status.Version = "v1.35.2"
	cfg := old.DeepCopy()
	cfg.Spec.Version = "v1.37.1"
	expectRefusal(t, ValidateUpdate(old, cfg), "spec.version", "the apiservers last ran v1.35.2 (the upgrade to v1.36.4 has not happened yet")
	old.Status.Version = "v1.36.4"
	expectRefusal(t, ValidateUpdate(old, cfg), "", "")
}
