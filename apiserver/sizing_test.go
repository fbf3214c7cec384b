package apiserver

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

const gib = int64(1) << 30

func TestComputeSizing(t *testing.T) {
	auto := v1alpha1.CacheSizingSpec{Policy: v1alpha1.CacheSizingAuto}
	cases := []struct {
		name string
		in   SizingInput
		want Sizing
	}{{
		name: "nothing known keeps kube-apiserver's defaults",
		in:   SizingInput{},
		want: Sizing{MaxInflight: 400, MaxMutatingInflight: 200, WatchCache: true},
	}, {
		name: "the memory limit is the target and sets GOMEMLIMIT at 90%",
		in:   SizingInput{MemoryLimitBytes: 4 * gib},
		want: Sizing{TargetRAMMB: 4096, CapacityNodes: 68, EstimatedClusterSize: 68,
			MaxInflight: 400, MaxMutatingInflight: 200, GoMemLimitBytes: 4 * gib / 100 * 90, WatchCache: true},
	}, {
		name: "an explicit target wins over the memory limit",
		in: SizingInput{Spec: v1alpha1.CacheSizingSpec{TargetRAMMB: ptr.To[int32](120000)},
			MemoryLimitBytes: 128 * gib},
		// 2000 nodes: a third of the way from 500 to 5000.
		want: Sizing{TargetRAMMB: 120000, CapacityNodes: 2000, EstimatedClusterSize: 2000,
			MaxInflight: 1270, MaxMutatingInflight: 470, GoMemLimitBytes: 128 * gib / 100 * 90, WatchCache: true},
	}, {
		name: "a huge budget stops at the large-cluster limits",
		in:   SizingInput{Spec: v1alpha1.CacheSizingSpec{TargetRAMMB: ptr.To[int32](600000)}},
		want: Sizing{TargetRAMMB: 600000, CapacityNodes: 10000, EstimatedClusterSize: 10000,
			MaxInflight: 3000, MaxMutatingInflight: 1000, WatchCache: true},
	}, {
		name: "Auto follows the observed nodes within the budget",
		in: SizingInput{Spec: auto, MemoryLimitBytes: 256 * gib,
			ObservedNodes: ptr.To[int64](1400), ObservedPods: ptr.To[int64](9000)},
		want: Sizing{TargetRAMMB: 262144, CapacityNodes: 4369, DemandNodes: 1400, EstimatedClusterSize: 1400,
			MaxInflight: 920, MaxMutatingInflight: 360, GoMemLimitBytes: 256 * gib / 100 * 90, WatchCache: true},
	}, {
		name: "Auto counts dense pods as nodes",
		in:   SizingInput{Spec: auto, ObservedNodes: ptr.To[int64](10), ObservedPods: ptr.To[int64](60001)},
		want: Sizing{DemandNodes: 2001, EstimatedClusterSize: 2001, MaxInflight: 1270, MaxMutatingInflight: 470, WatchCache: true},
	}, {
		name: "Auto beyond the budget is capped and flagged",
		in:   SizingInput{Spec: auto, MemoryLimitBytes: 8 * gib, ObservedNodes: ptr.To[int64](3000)},
		want: Sizing{TargetRAMMB: 8192, CapacityNodes: 136, DemandNodes: 3000, EstimatedClusterSize: 136,
			MaxInflight: 400, MaxMutatingInflight: 200, GoMemLimitBytes: 8 * gib / 100 * 90, WatchCache: true, OverCapacity: true},
	}, {
		name: "the user's in-flight limits win",
		in: SizingInput{Spec: auto, ObservedNodes: ptr.To[int64](5000),
			Requests: v1alpha1.RequestsSpec{MaxInflight: ptr.To[int32](800), MaxMutatingInflight: ptr.To[int32](0)}},
		want: Sizing{DemandNodes: 5000, EstimatedClusterSize: 5000, MaxInflight: 800, MaxMutatingInflight: 0, WatchCache: true},
	}, {
		name: "disabled watch caches are listed as resource.group, sorted",
		in: SizingInput{Spec: v1alpha1.CacheSizingSpec{DisabledResources: []v1alpha1.GroupResource{
			{Group: "coordination.k8s.io", Resource: "leases"}, {Resource: "events"}}}},
		want: Sizing{MaxInflight: 400, MaxMutatingInflight: 200, WatchCache: true,
			DisabledWatchCaches: []string{"events", "leases.coordination.k8s.io"}},
	}, {
		name: "the watch cache can be turned off",
		in:   SizingInput{Spec: v1alpha1.CacheSizingSpec{WatchCache: ptr.To(false)}},
		want: Sizing{MaxInflight: 400, MaxMutatingInflight: 200},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ComputeSizing(tc.in)); diff != "" {
				t.Fatalf("ComputeSizing (-want +got):\n%s", diff)
			}
		})
	}
}

func TestComputeSizing_LimitsNeverShrinkAsTheClusterGrows(t *testing.T) {
	prev := ComputeSizing(SizingInput{Spec: v1alpha1.CacheSizingSpec{Policy: v1alpha1.CacheSizingAuto}, ObservedNodes: ptr.To[int64](0)})
	for nodes := int64(1); nodes <= 6000; nodes += 7 {
		s := ComputeSizing(SizingInput{Spec: v1alpha1.CacheSizingSpec{Policy: v1alpha1.CacheSizingAuto}, ObservedNodes: ptr.To(nodes)})
		if s.MaxInflight < prev.MaxInflight || s.MaxMutatingInflight < prev.MaxMutatingInflight {
			t.Fatalf("at %d nodes the limits fell from %d/%d to %d/%d", nodes, prev.MaxInflight, prev.MaxMutatingInflight, s.MaxInflight, s.MaxMutatingInflight)
		}
		if s.MaxInflight > 3000 || s.MaxMutatingInflight > 1000 || s.MaxInflight < 400 || s.MaxMutatingInflight < 200 {
			t.Fatalf("at %d nodes the limits %d/%d leave the documented bounds", nodes, s.MaxInflight, s.MaxMutatingInflight)
		}
		prev = s
	}
}
