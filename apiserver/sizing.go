package apiserver

import (
	"sort"
	"time"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// The cache-sizing model.
//
// kube-apiserver once sized its caches from --target-ram-mb: it took about
// 60 MB of apiserver memory per node (120 GB was the recommendation for 2000
// nodes), so a cluster-size estimate of targetRAMMB/60, and from it the
// watch-cache size of each resource and the deserialization cache. Since
// 1.19 the watch cache sizes itself and --target-ram-mb no longer matters; it
// was removed in 1.24. What still needs sizing is the number of requests
// served at once and the Go runtime's memory limit. The operator keeps the
// historic estimate as its notion of what a memory budget can carry and
// derives:
//
//   - capacity: the nodes the target RAM carries, targetRAMMB / 60;
//   - demand (Auto only): the nodes the cluster has, at least one per 30 pods
//     (a busy node's density), counted in etcd;
//   - the estimated cluster size: demand capped by capacity under Auto, the
//     capacity under Static;
//   - in-flight limits: kube-apiserver's defaults (400 read, 200 mutating) up
//     to 500 nodes, rising linearly to the values SIG Scalability runs 5000
//     node clusters with (3000 and 1000) and capped there;
//   - GOMEMLIMIT: 90% of the container's memory limit, so the garbage
//     collector works harder before the kernel kills the container;
//   - the watch cache: on or off, and off (size 0) for the resources listed;
//   - --target-ram-mb itself for the versions that still have it (before
//     1.24). The operator does not run versions before 1.19, whose watch
//     cache had fixed per-resource sizes.
const (
	// MBPerNode is the apiserver memory the historic heuristic allots to
	// each node.
	MBPerNode = 60
	// PodsPerNode turns a pod count into a node-equivalent demand.
	PodsPerNode = 30

	defaultMaxInflight         = 400
	defaultMaxMutatingInflight = 200
	largeClusterNodes          = 5000
	smallClusterNodes          = 500
	largeMaxInflight           = 3000
	largeMaxMutatingInflight   = 1000
	// GoMemLimitPercent of the memory limit becomes GOMEMLIMIT.
	GoMemLimitPercent = 90
)

// SizingInput is what the sizing depends on.
type SizingInput struct {
	Spec v1alpha1.CacheSizingSpec
	// MemoryLimitBytes is the kube-apiserver container's memory limit; 0
	// when it has none.
	MemoryLimitBytes int64
	// ObservedNodes and ObservedPods are counted in etcd (Auto only).
	ObservedNodes *int64
	ObservedPods  *int64
	// Requests holds in-flight limits that the user set; they win.
	Requests v1alpha1.RequestsSpec
}

// Sizing is the outcome, all of it reported in status.
type Sizing struct {
	// TargetRAMMB is spec.cacheSizing.targetRAMMB, or the memory limit; 0
	// when neither is set.
	TargetRAMMB int64
	// CapacityNodes is what TargetRAMMB carries; 0 when it is unknown.
	CapacityNodes int64
	// DemandNodes is the observed size (Auto); 0 under Static.
	DemandNodes int64
	// EstimatedClusterSize is the size the limits are set for.
	EstimatedClusterSize int64
	MaxInflight          int64
	MaxMutatingInflight  int64
	// GoMemLimitBytes is the GOMEMLIMIT of the container; 0 for none.
	GoMemLimitBytes int64
	// WatchCache is --watch-cache.
	WatchCache bool
	// DisabledWatchCaches are resource[.group] names whose cache is off.
	DisabledWatchCaches []string
	// OverCapacity is true when the observed cluster is larger than the
	// memory budget carries: the apiserver needs more memory.
	OverCapacity bool
}

// ComputeSizing applies the model above. It is a pure function: the same
// input always gives the same sizing.
func ComputeSizing(in SizingInput) Sizing {
	s := Sizing{WatchCache: in.Spec.WatchCache == nil || *in.Spec.WatchCache}
	switch {
	case in.Spec.TargetRAMMB != nil && *in.Spec.TargetRAMMB > 0:
		s.TargetRAMMB = int64(*in.Spec.TargetRAMMB)
	case in.MemoryLimitBytes > 0:
		s.TargetRAMMB = in.MemoryLimitBytes / (1 << 20)
	}
	s.CapacityNodes = s.TargetRAMMB / MBPerNode

	s.EstimatedClusterSize = s.CapacityNodes
	if in.Spec.Policy == v1alpha1.CacheSizingAuto {
		s.DemandNodes = demandNodes(in.ObservedNodes, in.ObservedPods)
		s.EstimatedClusterSize = s.DemandNodes
		if s.CapacityNodes > 0 && s.DemandNodes > s.CapacityNodes {
			s.EstimatedClusterSize = s.CapacityNodes
			s.OverCapacity = true
		}
	}

	s.MaxInflight = interpolate(s.EstimatedClusterSize, defaultMaxInflight, largeMaxInflight)
	s.MaxMutatingInflight = interpolate(s.EstimatedClusterSize, defaultMaxMutatingInflight, largeMaxMutatingInflight)
	if in.Requests.MaxInflight != nil {
		s.MaxInflight = int64(*in.Requests.MaxInflight)
	}
	if in.Requests.MaxMutatingInflight != nil {
		s.MaxMutatingInflight = int64(*in.Requests.MaxMutatingInflight)
	}

	if in.MemoryLimitBytes > 0 {
		s.GoMemLimitBytes = in.MemoryLimitBytes / 100 * GoMemLimitPercent
	}

	for _, r := range in.Spec.DisabledResources {
		s.DisabledWatchCaches = append(s.DisabledWatchCaches, watchCacheName(r.Group, r.Resource))
	}
	sort.Strings(s.DisabledWatchCaches)
	return s
}

// demandNodes is the node-equivalent size of what was observed.
func demandNodes(nodes, pods *int64) int64 {
	var d int64
	if nodes != nil {
		d = *nodes
	}
	if pods != nil {
		d = max(d, (*pods+PodsPerNode-1)/PodsPerNode)
	}
	return d
}

// interpolate grows a limit from its default at smallClusterNodes to its
// large-cluster value at largeClusterNodes, rounded to tens.
func interpolate(nodes, small, large int64) int64 {
	switch {
	case nodes <= smallClusterNodes:
		return small
	case nodes >= largeClusterNodes:
		return large
	}
	v := small + (large-small)*(nodes-smallClusterNodes)/(largeClusterNodes-smallClusterNodes)
	return (v + 5) / 10 * 10
}

// watchCacheName is the resource[.group] form of --watch-cache-sizes.
func watchCacheName(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

// ResizePolicy bounds how Auto sizing follows the cluster, so that its
// observations never cause flapping rollouts.
type ResizePolicy struct {
	// Threshold is the relative change of the observed size (in nodes)
	// below which nothing changes: 0.2 is 20%.
	Threshold float64
	// MinInterval is the least time between two resizes.
	MinInterval time.Duration
}

// DecideResize reports whether Auto sizing should move from the counts it
// was sized for (nil: never sized) to the observed ones at now, given
// when it last resized.
func DecideResize(sizedNodes, sizedPods *int64, lastResize *time.Time, observedNodes, observedPods int64, now time.Time, p ResizePolicy) bool {
	if sizedNodes == nil && sizedPods == nil {
		return true
	}
	if lastResize != nil && now.Sub(*lastResize) < p.MinInterval {
		return false
	}
	before := demandNodes(sizedNodes, sizedPods)
	after := demandNodes(&observedNodes, &observedPods)
	if before == 0 {
		return after > 0
	}
	change := float64(after-before) / float64(before)
	return change > p.Threshold || change < -p.Threshold
}
