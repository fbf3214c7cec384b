package controllers

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantmemory"
)

// DefaultAuditWatchInterval is how often the audit counters of every
// tenant with spec.audit.webhook are read between passes.
const DefaultAuditWatchInterval = 5 * time.Minute

const (
	// auditWatchConcurrency bounds the reads under way at once.
	auditWatchConcurrency = 16
	// auditReadTimeout bounds one read of an apiserver's /metrics.
	auditReadTimeout = 5 * time.Second
	// auditReadsPerSecond is the watch's budget: a fleet with more
	// apiservers than the interval lets it read at this rate has them read
	// less often, at the same cost. A read asks for one family (1.37
	// serves only it; 1.36 its whole /metrics, 2.2 MB for an empty one):
	// at most 7.7 ms of the operator's CPU (BenchmarkAuditRead), so 20 a
	// second is at most about 0.15 core. 10 000 tenants of 2 apiservers
	// with spec.audit.webhook are then read every 17 minutes rather than 5.
	auditReadsPerSecond = 20
)

// auditReader reads the audit error counts of the apiserver pod at podIP.
type auditReader func(ctx context.Context, podIP string) (apiserver.AuditErrors, error)

// auditLook is what a read of a tenant's apiservers found.
type auditLook struct {
	// counts by pod: as read, or, for a pod that could not be read, as
	// read before (what the next read is compared with).
	counts map[string]apiserver.AuditErrors
	// read are the pods read this time.
	read map[string]bool
	// lost are the events lost since the look before, all pods together,
	// and lostBy the pods that lost them.
	lost   apiserver.AuditErrors
	lostBy []string
	// unsure are the pods read for the first time (a new pod, or an
	// operator that restarted) whose counts are not 0: they lost events
	// since they started, which may be long ago.
	unsure []string
	// since is when the look before was taken.
	since, at time.Time
}

// after completes l with what it says against before: the events lost
// since, by the pods read both times.
func (l auditLook) after(before auditLook) auditLook {
	l.lost = apiserver.AuditErrors{}
	l.since = before.at
	for _, pod := range slices.Sorted(maps.Keys(l.read)) {
		now, prev := l.counts[pod], before.counts[pod]
		if prev == nil {
			// A first read sets where the counts start: what was lost
			// before it is not this look's (nor counted again by a new
			// leader).
			if now.Total() > 0 {
				l.unsure = append(l.unsure, pod)
			}
			continue
		}
		lost := now.Since(prev)
		if lost.Total() > 0 {
			l.lostBy = append(l.lostBy, pod)
		}
		for plugin, n := range lost {
			l.lost[plugin] += n
		}
	}
	return l
}

// auditDecision is the AuditDelivered condition.
type auditDecision struct {
	status          metav1.ConditionStatus
	reason, message string
}

// decideAudit says whether pods lost audit events in l.
func decideAudit(pods []agentServer, l auditLook) auditDecision {
	var unread []string
	for _, p := range pods {
		if !l.read[p.pod] {
			unread = append(unread, p.pod)
		}
	}
	switch {
	case l.lost.Total() > 0:
		return auditDecision{metav1.ConditionFalse, v1alpha1.ReasonAuditEventsLost, fmt.Sprintf(
			"apiserver pod(s) %s lost %d audit events since %s: %s; check that the webhook of spec.audit.webhook answers and that spec.networkPolicy.egress reaches it (kube-apiserver logs each failure)",
			strings.Join(l.lostBy, ", "), int64(l.lost.Total()), l.since.UTC().Format(time.RFC3339), l.lost)}
	case len(pods) == 0:
		return auditDecision{metav1.ConditionUnknown, v1alpha1.ReasonAuditNotRead, "no apiserver pod runs"}
	case len(unread) > 0:
		return auditDecision{metav1.ConditionUnknown, v1alpha1.ReasonAuditNotRead, fmt.Sprintf(
			"the audit counters of apiserver pod(s) %s could not be read", strings.Join(unread, ", "))}
	case len(l.unsure) > 0:
		return auditDecision{metav1.ConditionUnknown, v1alpha1.ReasonAuditNotRead, fmt.Sprintf(
			"apiserver pod(s) %s lost audit events since they started, before the operator first read them: whether they still lose some shows at the next read",
			strings.Join(l.unsure, ", "))}
	}
	return auditDecision{metav1.ConditionTrue, v1alpha1.ReasonAuditDelivering, "no audit event was lost since the read before"}
}

// readAudit reads pods' audit counters within one timeout, as many at once
// as auditWatchConcurrency, and says what they lost since before.
func readAudit(ctx context.Context, pods []agentServer, read auditReader, before auditLook, limiter *rate.Limiter) auditLook {
	l := auditLook{counts: make(map[string]apiserver.AuditErrors, len(pods)), read: make(map[string]bool, len(pods)), at: time.Now()}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(auditWatchConcurrency)
	for _, p := range pods {
		if limiter != nil && limiter.Wait(gctx) != nil {
			break
		}
		g.Go(func() error {
			readCtx, cancel := context.WithTimeout(gctx, auditReadTimeout)
			counts, err := read(readCtx, p.ip)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				l.counts[p.pod], l.read[p.pod] = counts, true
			} else if prev := before.counts[p.pod]; prev != nil {
				l.counts[p.pod] = prev // compared with the next read instead
			}
			return nil
		})
	}
	_ = g.Wait() // the reads return no error
	return l.after(before)
}

// auditWatch reads, between passes, the audit error counters of the
// apiservers of every tenant with spec.audit.webhook, as Gardener alerts
// on them: a webhook that refuses or does not answer loses events in
// mode batch without a failed request. A tenant is brought back when the
// AuditDelivered condition its look decides differs from what its last
// pass wrote, or it keeps losing events; each look adds what was lost to
// apiserver_operator_audit_events_lost_total. One GET of /metrics per
// apiserver per interval, no write at rest.
type auditWatch struct {
	*tenantmemory.Watch[auditTarget]
	budget rate.Limit
}

// auditTarget is a tenant's apiservers as its last pass saw them, how to
// read them, and the last look.
type auditTarget struct {
	pods    []agentServer
	read    auditReader
	look    auditLook
	written auditDecision
}

func newAuditWatch(interval time.Duration) *auditWatch {
	w := &auditWatch{budget: auditReadsPerSecond}
	w.Watch = tenantmemory.NewWatch(tenantmemory.WatchOptions[auditTarget]{Interval: interval, Look: w.look, Settle: settleAudit})
	return w
}

// recent is the last look at key's apiservers when it is of the same pods,
// read them all and is younger than the interval (ok: a pass writes it
// rather than reading again), and the last look in any case, which a new
// one is compared with. A look that could not read a pod (one that was
// not serving yet) is read again by the next pass.
func (w *auditWatch) recent(key types.NamespacedName, pods []agentServer, now time.Time) (look, before auditLook, ok bool) {
	t, found := w.Load(key)
	allRead := !slices.ContainsFunc(pods, func(p agentServer) bool { return !t.look.read[p.pod] })
	if !found || !samePods(t.pods, pods) || now.Sub(t.look.at) >= w.Interval() || !allRead {
		return auditLook{}, t.look, false
	}
	return t.look, t.look, true
}

// record is what a pass wrote.
func (w *auditWatch) record(key types.NamespacedName, pods []agentServer, read auditReader, look auditLook, written auditDecision) {
	w.Store(key, auditTarget{pods: slices.Clone(pods), read: read, look: look, written: written})
}

// look reads every tenant's apiservers, spread over the interval within
// the budget.
func (w *auditWatch) look(ctx context.Context, targets map[types.NamespacedName]auditTarget) map[types.NamespacedName]auditTarget {
	reads := 0
	for _, t := range targets {
		reads += len(t.pods)
	}
	limiter := tenantmemory.Spread(reads, w.Interval(), w.budget)
	found := make(map[types.NamespacedName]auditTarget, len(targets))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(auditWatchConcurrency)
	for key, t := range targets {
		if t.read == nil {
			continue
		}
		g.Go(func() error {
			l := readAudit(gctx, t.pods, t.read, t.look, limiter)
			mu.Lock()
			t.look = l
			found[key] = t
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	return found
}

// settleAudit brings back a tenant whose condition moved, or that has new
// losses to report (a tenant that keeps losing events is written once a
// round, to say how many). A tenant whose pods changed, or that a pass
// read since, keeps what its pass recorded.
func settleAudit(key types.NamespacedName, seen, current, found auditTarget) (auditTarget, bool, bool) {
	if !samePods(current.pods, seen.pods) || current.look.at.After(seen.look.at) {
		return current, false, false
	}
	current.look = found.look
	countAuditLoss(key, found.look)
	d := decideAudit(current.pods, found.look)
	bring := d.status != current.written.status || d.reason != current.written.reason ||
		d.status == metav1.ConditionFalse && d.message != current.written.message
	return current, bring, true
}

// countAuditLoss adds what l lost to the operator's counter.
func countAuditLoss(key types.NamespacedName, l auditLook) {
	for plugin, n := range l.lost {
		auditEventsLost.WithLabelValues(key.Namespace, key.Name, plugin).Add(n)
	}
}

// runningAPIServers are the apiserver pods that run, by name, ready or
// not: a pod whose readiness flaps keeps where its counts stood.
func runningAPIServers(pods []corev1.Pod) []agentServer {
	var out []agentServer
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || podEnded(pod) || pod.Status.PodIP == "" {
			continue
		}
		out = append(out, agentServer{pod: pod.Name, ip: pod.Status.PodIP, ready: true})
	}
	slices.SortFunc(out, func(a, b agentServer) int { return strings.Compare(a.pod, b.pod) })
	return out
}

// reconcileAudit is the pass's step for the AuditDelivered condition:
// what the audit watch last found of the pods the pass finds, or else a
// read of the pass's own (new pods), which the watch then compares its
// reads with.
func (r *ApiServerConfigReconciler) reconcileAudit(ctx context.Context, p *pass) error {
	key := client.ObjectKeyFromObject(p.cfg)
	if p.cfg.Spec.Audit.Webhook == nil || ptr.Deref(p.cfg.Spec.MasterCount, 1) == 0 {
		p.obs.audit = &auditDecision{}
		r.forgetAudit(key)
		return nil
	}
	pods := runningAPIServers(p.pods)
	var read auditReader
	if len(pods) > 0 {
		api, err := r.tenants()(ctx, p)
		if err == nil {
			read = func(ctx context.Context, podIP string) (apiserver.AuditErrors, error) {
				data, err := api.Metrics(ctx, podIP, apiserver.AuditErrorsMetric)
				if err != nil {
					return nil, err
				}
				return apiserver.ParseAuditErrors(bytes.NewReader(data))
			}
		}
	}
	var look, before auditLook
	ok := false
	if r.memory.auditWatch != nil {
		look, before, ok = r.memory.auditWatch.recent(key, pods, p.now)
	}
	if !ok {
		if read != nil {
			look = readAudit(ctx, pods, read, before, nil)
			look.at = p.now // the pass's clock, which recent compares with
			countAuditLoss(key, look)
		} else {
			// Not read: what was read before stays to compare with.
			look = auditLook{counts: before.counts, at: p.now}
		}
	}
	d := decideAudit(pods, look)
	if r.memory.auditWatch != nil {
		r.memory.auditWatch.record(key, pods, read, look, d)
	}
	if d.status == metav1.ConditionFalse {
		if prev := meta.FindStatusCondition(p.before.Status.Conditions, v1alpha1.ConditionAuditDelivered); prev == nil || prev.Status != metav1.ConditionFalse {
			r.event(p.cfg, corev1.EventTypeWarning, d.reason, "Audit", "%s", d.message)
		}
	}
	p.obs.audit = &d
	return nil
}

func (r *ApiServerConfigReconciler) forgetAudit(key types.NamespacedName) {
	if r.memory.auditWatch != nil {
		r.memory.auditWatch.Forget(key)
	}
	auditEventsLost.DeletePartialMatch(map[string]string{"namespace": key.Namespace, "name": key.Name})
}

// auditCondition is AuditDelivered as d decided it.
func auditCondition(d auditDecision, generation int64) metav1.Condition {
	return metav1.Condition{Type: v1alpha1.ConditionAuditDelivered, Status: d.status, Reason: d.reason, Message: d.message, ObservedGeneration: generation}
}
