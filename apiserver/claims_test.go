package apiserver

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

func TestClaimOf(t *testing.T) {
	controller := func(apiVersion, kind, name, uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID("u-" + uid), Controller: ptr.To(true)}}
	}
	ours := v1alpha1.GroupVersion.String()
	for _, tc := range []struct {
		name        string
		meta        metav1.ObjectMeta
		holder      string // "" for own
		predecessor bool
	}{
		{"controlled by it", metav1.ObjectMeta{OwnerReferences: controller(ours, "ApiServerConfig", "x", "x")}, "", false},
		{"kept by Retain: no owner, its name label", metav1.ObjectMeta{Labels: map[string]string{NameLabel: "x"}}, "", false},
		{"an earlier ApiServerConfig of its name", metav1.ObjectMeta{OwnerReferences: controller(ours, "ApiServerConfig", "x", "old")}, "an earlier ApiServerConfig x", true},
		{"another tenant's", metav1.ObjectMeta{Labels: map[string]string{NameLabel: "x"}, OwnerReferences: controller(ours, "ApiServerConfig", "x-front-proxy", "y")}, "ApiServerConfig x-front-proxy", false},
		{"kept for another tenant", metav1.ObjectMeta{Labels: map[string]string{NameLabel: "w"}}, "ApiServerConfig w (by its", false},
		{"another controller's, even with the label", metav1.ObjectMeta{Labels: map[string]string{NameLabel: "x"}, OwnerReferences: controller("apps/v1", "ReplicaSet", "x", "r")}, "ReplicaSet x", false},
		{"an ApiServerConfig of another group", metav1.ObjectMeta{OwnerReferences: controller("example.com/v1", "ApiServerConfig", "x", "x")}, "ApiServerConfig x", false},
		{"nobody's", metav1.ObjectMeta{}, "no ApiServerConfig", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ClaimOf("x", "u-x", &tc.meta)
			if c.Own() != (tc.holder == "") || !strings.HasPrefix(c.Holder, tc.holder) || c.Predecessor != tc.predecessor {
				t.Fatalf("ClaimOf = %+v, want holder %q (own: %v), predecessor %v", c, tc.holder, tc.holder == "", tc.predecessor)
			}
		})
	}
}

func TestGeneratedNames_CollideOnlyForNamesThatDifferByASuffix(t *testing.T) {
	collide := func(a, b string) bool {
		for _, n := range GeneratedNames(a) {
			for _, m := range GeneratedNames(b) {
				if n == m {
					return true
				}
			}
		}
		return false
	}
	if !slices.Contains(GeneratedNames("x"), "Service/x-konnectivity") {
		t.Errorf("x's names %v lack its konnectivity Service", GeneratedNames("x"))
	}
	if !collide("x", "x-front-proxy") {
		t.Errorf("x and x-front-proxy share no name: %v, %v", GeneratedNames("x"), GeneratedNames("x-front-proxy"))
	}
	for _, other := range []string{"x-front", "front-proxy", "xx", "x-apiserver", "x-sa"} {
		if collide("x", other) {
			t.Errorf("x and %s share a name", other)
		}
	}
}
