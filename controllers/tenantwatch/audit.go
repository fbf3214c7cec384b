package tenantwatch

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"

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

// AuditReader reads the audit error counts of the apiserver pod at podIP.
type AuditReader func(ctx context.Context, podIP string) (apiserver.AuditErrors, error)

// AuditLook is what a read of a tenant's apiservers found.
type AuditLook struct {
	// Counts by pod: as read, or, for a pod that could not be read, as
	// read before (what the next read is compared with).
	Counts map[string]apiserver.AuditErrors
	// Read are the pods Read this time.
	Read map[string]bool
	// Lost are the events Lost since the look before, all pods together,
	// and lostBy the pods that Lost them.
	Lost   apiserver.AuditErrors
	LostBy []string
	// Unsure are the pods read for the first time (a new pod, or an
	// operator that restarted) whose counts are not 0: they lost events
	// since they started, which may be long ago.
	Unsure []string
	// Since is when the look before was taken.
	Since, At time.Time
}

// after completes l with what it says against before: the events lost
// since, by the pods read both times.
func (l AuditLook) after(before AuditLook) AuditLook {
	l.Lost = apiserver.AuditErrors{}
	l.Since = before.At
	for _, pod := range slices.Sorted(maps.Keys(l.Read)) {
		now, prev := l.Counts[pod], before.Counts[pod]
		if prev == nil {
			// A first read sets where the counts start: what was lost
			// before it is not this look's (nor counted again by a new
			// leader).
			if now.Total() > 0 {
				l.Unsure = append(l.Unsure, pod)
			}
			continue
		}
		lost := now.Since(prev)
		if lost.Total() > 0 {
			l.LostBy = append(l.LostBy, pod)
		}
		for plugin, n := range lost {
			l.Lost[plugin] += n
		}
	}
	return l
}

// AuditDecision is the AuditDelivered condition.
type AuditDecision struct {
	Status          metav1.ConditionStatus
	Reason, Message string
}

// DecideAudit says whether pods lost audit events in l.
func DecideAudit(pods []Server, l AuditLook) AuditDecision {
	var unread []string
	for _, p := range pods {
		if !l.Read[p.Pod] {
			unread = append(unread, p.Pod)
		}
	}
	switch {
	case l.Lost.Total() > 0:
		return AuditDecision{metav1.ConditionFalse, v1alpha1.ReasonAuditEventsLost, fmt.Sprintf(
			"apiserver pod(s) %s lost %d audit events since %s: %s; check that the webhook of spec.audit.webhook answers and that spec.networkPolicy.egress reaches it (kube-apiserver logs each failure)",
			strings.Join(l.LostBy, ", "), int64(l.Lost.Total()), l.Since.UTC().Format(time.RFC3339), l.Lost)}
	case len(pods) == 0:
		return AuditDecision{metav1.ConditionUnknown, v1alpha1.ReasonAuditNotRead, "no apiserver pod runs"}
	case len(unread) > 0:
		return AuditDecision{metav1.ConditionUnknown, v1alpha1.ReasonAuditNotRead, fmt.Sprintf(
			"the audit counters of apiserver pod(s) %s could not be read", strings.Join(unread, ", "))}
	case len(l.Unsure) > 0:
		return AuditDecision{metav1.ConditionUnknown, v1alpha1.ReasonAuditNotRead, fmt.Sprintf(
			"apiserver pod(s) %s lost audit events since they started, before the operator first read them: whether they still lose some shows at the next read",
			strings.Join(l.Unsure, ", "))}
	}
	return AuditDecision{metav1.ConditionTrue, v1alpha1.ReasonAuditDelivering, "no audit event was lost since the read before"}
}

// ReadAudit reads pods' audit counters within one timeout, as many at once
// as auditWatchConcurrency, and says what they lost since before.
func ReadAudit(ctx context.Context, pods []Server, read AuditReader, before AuditLook, limiter *rate.Limiter) AuditLook {
	l := AuditLook{Counts: make(map[string]apiserver.AuditErrors, len(pods)), Read: make(map[string]bool, len(pods)), At: time.Now()}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(auditWatchConcurrency)
	for _, p := range pods {
		if limiter != nil && limiter.Wait(gctx) != nil {
			break
		}
		g.Go(func() error {
			readCtx, cancel := context.WithTimeout(gctx, auditReadTimeout)
			counts, err := read(readCtx, p.IP)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				l.Counts[p.Pod], l.Read[p.Pod] = counts, true
			} else if prev := before.Counts[p.Pod]; prev != nil {
				l.Counts[p.Pod] = prev // compared with the next read instead
			}
			return nil
		})
	}
	_ = g.Wait() // the reads return no error
	return l.after(before)
}

// Audit reads, between passes, the audit error counters of the
// apiservers of every tenant with spec.audit.webhook, as Gardener alerts
// on them: a webhook that refuses or does not answer loses events in
// mode batch without a failed request. A tenant is brought back when the
// AuditDelivered condition its look decides differs from what its last
// pass wrote, or it keeps losing events; each look adds what was lost to
// apiserver_operator_audit_events_lost_total. One GET of /metrics per
// apiserver per interval, no write at rest.
type Audit struct {
	*tenantmemory.Watch[auditTarget]
	budget rate.Limit
}

// auditTarget is a tenant's apiservers as its last pass saw them, how to
// read them, and the last look.
type auditTarget struct {
	pods    []Server
	read    AuditReader
	look    AuditLook
	written AuditDecision
}

func NewAudit(interval time.Duration) *Audit {
	w := &Audit{budget: auditReadsPerSecond}
	w.Watch = tenantmemory.NewWatch(tenantmemory.WatchOptions[auditTarget]{Interval: interval, Look: w.look, Settle: settleAudit})
	return w
}

// Recent is the last look at key's apiservers when it is of the same pods,
// read them all and is younger than the interval (ok: a pass writes it
// rather than reading again), and the last look in any case, which a new
// one is compared with. A look that could not read a pod (one that was
// not serving yet) is read again by the next pass.
func (w *Audit) Recent(key types.NamespacedName, pods []Server, now time.Time) (look, before AuditLook, ok bool) {
	t, found := w.Load(key)
	allRead := !slices.ContainsFunc(pods, func(p Server) bool { return !t.look.Read[p.Pod] })
	if !found || !SamePods(t.pods, pods) || now.Sub(t.look.At) >= w.Interval() || !allRead {
		return AuditLook{}, t.look, false
	}
	return t.look, t.look, true
}

// Record is what a pass wrote.
func (w *Audit) Record(key types.NamespacedName, pods []Server, read AuditReader, look AuditLook, written AuditDecision) {
	w.Store(key, auditTarget{pods: slices.Clone(pods), read: read, look: look, written: written})
}

// look reads every tenant's apiservers, spread over the interval within
// the budget.
func (w *Audit) look(ctx context.Context, targets map[types.NamespacedName]auditTarget) map[types.NamespacedName]auditTarget {
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
			l := ReadAudit(gctx, t.pods, t.read, t.look, limiter)
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
	if !SamePods(current.pods, seen.pods) || current.look.At.After(seen.look.At) {
		return current, false, false
	}
	current.look = found.look
	CountAuditLoss(key, found.look)
	d := DecideAudit(current.pods, found.look)
	bring := d.Status != current.written.Status || d.Reason != current.written.Reason ||
		d.Status == metav1.ConditionFalse && d.Message != current.written.Message
	return current, bring, true
}

// CountAuditLoss adds what l lost to the operator's counter.
func CountAuditLoss(key types.NamespacedName, l AuditLook) {
	for plugin, n := range l.Lost {
		AuditEventsLost.WithLabelValues(key.Namespace, key.Name, plugin).Add(n)
	}
}
