package apiserver

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// Claim says whose an existing object is that has one of the names an
// ApiServerConfig generates (OwnedObjects).
type Claim struct {
	// Holder describes who holds the object when it is not the
	// ApiServerConfig's own: "" when it is.
	Holder string
	// Predecessor: the holder is an earlier ApiServerConfig of the same
	// name, deleted, whose objects the garbage collector is removing.
	Predecessor bool
}

// Own reports whether the object is the ApiServerConfig's own.
func (c Claim) Own() bool { return c.Holder == "" }

// ClaimOf says whose obj is, for the ApiServerConfig name with uid. Its
// own objects are those it controls, and those no one controls that carry
// its name label: the Secrets pkiRetention Retain keeps for it (which
// have no owner), what `render` wrote for it. Anything else is someone
// else's, which the operator never adopts, overwrites or reads as key
// material: another tenant's object whose generated name is the same
// (tenant x-front-proxy's CA is x-front-proxy-ca, tenant x's front-proxy
// CA too), or a user's own object.
func ClaimOf(name string, uid types.UID, obj metav1.Object) Claim {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil {
		if obj.GetLabels()[NameLabel] == name {
			return Claim{}
		}
		if n := obj.GetLabels()[NameLabel]; n != "" {
			return Claim{Holder: fmt.Sprintf("ApiServerConfig %s (by its %s label)", n, NameLabel)}
		}
		return Claim{Holder: "no ApiServerConfig: it has no controller and no " + NameLabel + " label"}
	}
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	if gv.Group != v1alpha1.GroupVersion.Group || ref.Kind != "ApiServerConfig" {
		return Claim{Holder: fmt.Sprintf("%s %s", ref.Kind, ref.Name)}
	}
	switch {
	case ref.Name != name:
		return Claim{Holder: "ApiServerConfig " + ref.Name}
	case ref.UID != uid:
		return Claim{Holder: fmt.Sprintf("an earlier ApiServerConfig %s (uid %s)", ref.Name, ref.UID), Predecessor: true}
	}
	return Claim{}
}

// GeneratedNames are the names the ApiServerConfig name gives its objects,
// each as kind/name, sorted: two ApiServerConfigs of a namespace may not
// share one.
func GeneratedNames(name string) []string {
	seen := map[string]bool{}
	for _, o := range OwnedObjects(name) {
		seen[o.Kind+"/"+o.Name] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
