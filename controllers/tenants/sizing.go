package tenants

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// reconcileSizing counts, with Auto cache sizing and a reachable etcd, the
// tenant's nodes and pods, and completes the spec again when the counts it
// is sized for moved.
func (r *Reconciler) reconcileSizing(ctx context.Context, p *pass) error {
	etcdAnswered := p.obs.etcdChecked && p.obs.etcdErr == nil
	if r.Reach == nil || !etcdAnswered || p.c.Spec.CacheSizing.Policy != v1alpha1.CacheSizingAuto {
		return nil
	}
	var resized bool
	var next time.Duration
	err := r.waitOnTenant(ctx, p, func() (err error) {
		resized, next, err = r.observeClusterSize(ctx, p.cfg, p.c, p.etcdTLS, p.now, func(nodes, pods int64) bool {
			// A running tenant's resize rolls its pods; a new one's first
			// sizing does not wait.
			return p.current.ResourceVersion != "" && p.waitForWindow(fmt.Sprintf("a cache resize for %d nodes and %d pods", nodes, pods))
		})
		return err
	})
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Counting the tenant's nodes and pods failed", "apiServerConfig", klog.KObj(p.cfg), "error", tenantio.Detail(err))
	}
	p.requeueWithin(next)
	if !resized {
		return nil
	}
	s := p.cfg.Status.CacheSizing
	p.in.ObservedNodes, p.in.ObservedPods = s.SizedForNodes, s.SizedForPods
	return p.complete()
}

// sizingStatus carries the sizing in force into status, keeping what Auto
// observed.
func sizingStatus(prev *v1alpha1.CacheSizingStatus, s apiserver.Sizing) *v1alpha1.CacheSizingStatus {
	out := &v1alpha1.CacheSizingStatus{}
	if prev != nil {
		out = prev.DeepCopy()
	}
	out.TargetRAMMB, out.CapacityNodes, out.EstimatedClusterSize = s.TargetRAMMB, s.CapacityNodes, s.EstimatedClusterSize
	out.MaxInflight, out.MaxMutatingInflight, out.GoMemLimitBytes, out.OverCapacity = s.MaxInflight, s.MaxMutatingInflight, s.GoMemLimitBytes, s.OverCapacity
	return out
}

// observeClusterSize counts the tenant's nodes and pods in etcd, at most
// every r.AutoSizingInterval, and moves the counts the sizing is computed
// from when apiserver.DecideResize says so. It returns whether they moved
// and when to count again. A resize (not the first sizing) waits when
// wait says so.
func (r *Reconciler) observeClusterSize(ctx context.Context, cfg *v1alpha1.ApiServerConfig, c *apiserver.Completed, tlsConfig *tls.Config, now time.Time, wait func(nodes, pods int64) bool) (bool, time.Duration, error) {
	cs := c.Spec.CacheSizing
	interval := cs.ObservationInterval.Duration
	policy := apiserver.ResizePolicy{Threshold: float64(*cs.ResizeThresholdPercent) / 100, MinInterval: cs.MinResizeInterval.Duration}
	if r.AutoSizingInterval > 0 {
		interval = r.AutoSizingInterval
	}
	if r.ResizePolicy != (apiserver.ResizePolicy{}) {
		policy = r.ResizePolicy
	}
	st := cfg.Status.CacheSizing
	if st == nil {
		st = &v1alpha1.CacheSizingStatus{}
		cfg.Status.CacheSizing = st
	}
	next := interval
	var nodes, pods int64
	if st.ObservationTime != nil && now.Sub(st.ObservationTime.Time) < interval {
		// Not counted again yet: the last counts decide, so that a resize
		// that waited for a maintenance window is done when it opens, and
		// says that it waits on every pass meanwhile.
		next = interval - now.Sub(st.ObservationTime.Time)
		if st.ObservedNodes == nil || st.ObservedPods == nil {
			return false, next, nil
		}
		nodes, pods = *st.ObservedNodes, *st.ObservedPods
	} else {
		for resource, n := range map[string]*int64{"nodes": &nodes, "pods": &pods} {
			servers, key, err := countKey(c, resource)
			if err != nil {
				return false, interval, err
			}
			counted, err := r.Reach.Count(ctx, servers, tlsConfig, key)
			if err != nil {
				return false, interval, err
			}
			*n = counted[0]
		}
		st.ObservedNodes, st.ObservedPods = &nodes, &pods
		st.ObservationTime = &metav1.Time{Time: now.UTC().Truncate(time.Second)}
	}
	var last *time.Time
	if st.LastResizeTime != nil {
		last = &st.LastResizeTime.Time
	}
	if !apiserver.DecideResize(st.SizedForNodes, st.SizedForPods, last, nodes, pods, now, policy) {
		return false, next, nil
	}
	if st.SizedForNodes != nil && wait(nodes, pods) {
		return false, next, nil
	}
	sizedNodes, sizedPods := nodes, pods
	st.SizedForNodes, st.SizedForPods = &sizedNodes, &sizedPods
	st.LastResizeTime = &metav1.Time{Time: now.UTC().Truncate(time.Second)}
	sizingDecisions.WithLabelValues(cfg.Namespace, cfg.Name).Inc()
	r.event(cfg, corev1.EventTypeNormal, "Resized", "Resize", "Sized for %d nodes and %d pods observed in etcd", nodes, pods)
	return true, next, nil
}

// countKey is where the tenant keeps a core resource's objects: its etcd
// servers and the prefix of their keys.
func countKey(c *apiserver.Completed, resource string) ([]string, string, error) {
	catalog, err := apiserver.StorageCatalog(c)
	if err != nil {
		return nil, "", err
	}
	gr := schema.GroupResource{Resource: resource}
	return c.Etcd.ServersOf(gr), apiserver.EtcdKeyPrefix(c, catalog.EtcdPrefixes[gr]), nil
}
