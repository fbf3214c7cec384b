package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

func version(rv string, phase string) *v1alpha1.ApiServerConfig {
	return &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "a", ResourceVersion: rv},
		Status:     v1alpha1.ApiServerConfigStatus{Endpoint: phase},
	}
}

// A pass that starts from a cache older than the operator's own last write
// works from that write instead, so it neither writes the same status again
// nor repeats its events.
func TestApiServerConfigReconciler_WorksFromItsLastWriteWhileTheCacheLags(t *testing.T) {
	tests := []struct {
		name   string
		writes [][2]*v1alpha1.ApiServerConfig // from, to
		cached *v1alpha1.ApiServerConfig
		wantRV string
		thenRV string // what a later pass that reads version 10 works from
	}{{
		name:   "the cache has not seen the status write",
		writes: [][2]*v1alpha1.ApiServerConfig{{version("10", ""), version("11", "written")}},
		cached: version("10", ""), wantRV: "11", thenRV: "11",
	}, {
		name: "the cache is two writes behind (finalizer, then status)",
		writes: [][2]*v1alpha1.ApiServerConfig{
			{version("10", ""), version("11", "")},
			{version("11", ""), version("12", "written")},
		},
		cached: version("10", ""), wantRV: "12", thenRV: "12",
	}, {
		name:   "the cache caught up",
		writes: [][2]*v1alpha1.ApiServerConfig{{version("10", ""), version("11", "written")}},
		cached: version("11", "written"), wantRV: "11", thenRV: "10",
	}, {
		name:   "someone wrote after the operator: the cache wins, and the record is dropped",
		writes: [][2]*v1alpha1.ApiServerConfig{{version("10", ""), version("11", "written")}},
		cached: version("13", "user"), wantRV: "13", thenRV: "10",
	}, {
		name:   "a write the server found no change in is not a newer version",
		writes: [][2]*v1alpha1.ApiServerConfig{{version("10", ""), version("10", "")}},
		cached: version("10", ""), wantRV: "10", thenRV: "10",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &ApiServerConfigReconciler{}
			for _, w := range tt.writes {
				r.remember(w[0].ResourceVersion, w[1])
			}
			got := r.fresher(tt.cached.DeepCopy())
			if got.ResourceVersion != tt.wantRV {
				t.Fatalf("the pass works from resourceVersion %s, want %s", got.ResourceVersion, tt.wantRV)
			}
			if tt.wantRV != tt.cached.ResourceVersion && got.Status.Endpoint != "written" {
				t.Fatalf("the pass works from a copy without the written status: %+v", got.Status)
			}
			got.Status.Endpoint = "changed by the pass"
			// A later pass on the stale version of 10 still gets the write,
			// unchanged by what the first pass did to its copy.
			again := r.fresher(version("10", ""))
			if again.ResourceVersion != tt.thenRV {
				t.Fatalf("a later pass from version 10 works from %s, want %s", again.ResourceVersion, tt.thenRV)
			}
			if again.Status.Endpoint == "changed by the pass" {
				t.Fatal("the record shares memory with what a pass changed")
			}
		})
	}
}
