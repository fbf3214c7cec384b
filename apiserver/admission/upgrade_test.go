package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

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
	oldCatalog, _ := apiserver.CatalogFor(utilversion.MustParseSemantic(older))
	newCatalog, _ := apiserver.CatalogFor(utilversion.MustParseSemantic(v1alpha1.BundledVersion))
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
