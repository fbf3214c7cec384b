package tenants

import (
	"bytes"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// DefaultRemovedAPIQuietPeriod is how long no client may have called an
// API the target minor removed before a held upgrade goes ahead.
const DefaultRemovedAPIQuietPeriod = 10 * time.Minute

// removedAPICount is the last count of calls to removed APIs before an
// upgrade to target, per apiserver pod (by UID), and when a count last
// grew.
type removedAPICount struct {
	target   string
	requests map[types.UID]int64
	grewAt   time.Time
}

// observeRemovedAPIs records the requests each pod counted for the
// tenant's upgrade to target, and returns since when no pod's count has
// grown. Each apiserver counts its own requests from its start: a pod seen
// for the first time with calls counts as growth (a new pod counts only
// new calls), a pod missing from this look keeps its last count (it may be
// back, not ready for a moment), and a count lower than before is a
// restarted apiserver, not a call. The counts live in memory: after a
// restart the quiet period starts again, which only holds an upgrade
// longer.
func (r *Reconciler) observeRemovedAPIs(key types.NamespacedName, target string, requests map[types.UID]int64, now time.Time) time.Time {
	last := r.memory.removedAPIs.Update(key, func(last removedAPICount, ok bool) removedAPICount {
		if !ok || last.target != target {
			last = removedAPICount{target: target, requests: map[types.UID]int64{}, grewAt: now}
		}
		for uid, n := range requests {
			if n > last.requests[uid] {
				last.grewAt = now
			}
			last.requests[uid] = n
		}
		return last
	})
	return last.grewAt
}

// preflightUpgrade holds a minor upgrade that has not started while
// clients still call APIs the target no longer serves, as the running
// apiservers' own metrics tell: the pass applies all but the Deployment,
// so the Deployment keeps its template, and status names the APIs and the
// count. The upgrade goes ahead once no such call came for the quiet
// period, or when the user acknowledges with
// AllowRemovedAPICallsAnnotation set to the target version.
func (r *Reconciler) preflightUpgrade(ctx context.Context, p *pass) error {
	key := types.NamespacedName{Namespace: p.cfg.Namespace, Name: p.cfg.Name}
	v := p.obs.versions
	target := p.c.Spec.Version
	if !upgradeNotStarted(p) || p.cfg.Annotations[apiserver.AllowRemovedAPICallsAnnotation] == target {
		r.memory.removedAPIs.Forget(key)
		return nil
	}
	api, err := r.connect(ctx, p)
	if err != nil {
		return fmt.Errorf("reading the running apiservers' metrics before the upgrade to %s: %w", target, err)
	}
	var lists [][]apiserver.RemovedAPICalls
	perPod := map[types.UID]int64{}
	for _, pod := range p.pods {
		if pod.Status.PodIP == "" || !podReady(&pod) {
			continue
		}
		data, err := api.Metrics(ctx, pod.Status.PodIP, apiserver.RemovedAPIMetrics...)
		if err != nil {
			return fmt.Errorf("reading the metrics of apiserver %s before the upgrade to %s (the upgrade waits for them; annotate the object with %s=%s to upgrade without them): %w",
				pod.Name, target, apiserver.AllowRemovedAPICallsAnnotation, target, err)
		}
		calls, err := apiserver.ParseRemovedAPICalls(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("reading the metrics of apiserver %s before the upgrade to %s: %w", pod.Name, target, err)
		}
		calls = apiserver.RemovedBy(calls, target)
		perPod[pod.UID] = apiserver.TotalRequests(calls)
		lists = append(lists, calls)
	}
	removed := apiserver.MergeRemovedAPICalls(lists...)
	if len(removed) == 0 {
		r.memory.removedAPIs.Forget(key)
		return nil
	}
	quiet := r.RemovedAPIQuietPeriod
	if quiet == 0 {
		quiet = DefaultRemovedAPIQuietPeriod
	}
	grewAt := r.observeRemovedAPIs(key, target, perPod, p.now)
	if p.now.Sub(grewAt) >= quiet {
		r.event(p.cfg, corev1.EventTypeNormal, v1alpha1.ReasonUpgrading, "Preflight",
			"No new call to an API that %s removed for %s: the upgrade from %s goes ahead (calls counted: %s)", target, quiet, v.running, apiserver.DescribeRemovedAPICalls(removed))
		return nil
	}
	// The Deployment keeps the old version, and nothing that waits for a
	// rollout (a rotation's phase, the re-encryption) may take the
	// unapplied template for rolled out: the pass applies the rest and
	// ends.
	p.obs.hold = &envFailure{reason: v1alpha1.ReasonRemovedAPIsInUse,
		message: fmt.Sprintf("upgrade %s → %s held: clients called APIs that %s no longer serves: %s; it goes ahead once no new call came for %s (looked at every %s), or annotate the object with %s=%s to upgrade now",
			v.running, target, target, apiserver.DescribeRemovedAPICalls(removed), quiet, preflightInterval, apiserver.AllowRemovedAPICallsAnnotation, target),
		since: failingSince(p.before.Status.Conditions, v1alpha1.ReasonRemovedAPIsInUse, p.now),
		grace: quiet}
	p.held = true
	p.requeueWithin(min(quiet-p.now.Sub(grewAt), preflightInterval))
	return nil
}

// preflightInterval is how often a held upgrade's calls are counted again.
const preflightInterval = 30 * time.Second

// upgradeNotStarted: the spec asks for a newer minor than every apiserver
// runs, and no pod of it exists yet, nor does the Deployment's template
// ask for it (an upgrade under way is never held halfway).
func upgradeNotStarted(p *pass) bool {
	v := p.obs.versions
	if p.obs.masterCount == 0 || !apiserver.IsMinorUpgrade(v.running, p.c.Spec.Version) {
		return false
	}
	for _, c := range v.counts {
		if c.Version != v.running {
			return false
		}
	}
	if d := p.obs.deployment; d != nil && d.Spec.Template.Annotations[apiserver.VersionAnnotation] == p.c.Spec.Version {
		return false
	}
	return len(p.pods) > 0
}
