package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// fakeAuditCounters answers reads of audit counters by pod address, as
// the apiservers' /metrics would; a down address does not answer.
type fakeAuditCounters struct {
	mu     sync.Mutex
	counts map[string]apiserver.AuditErrors
	down   map[string]bool
	reads  int
}

func (f *fakeAuditCounters) set(ip string, counts apiserver.AuditErrors, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[ip], f.down[ip] = counts, down
}

func (f *fakeAuditCounters) read(_ context.Context, ip string) (apiserver.AuditErrors, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.down[ip] {
		return nil, fmt.Errorf("%s does not answer", ip)
	}
	out := apiserver.AuditErrors{}
	for k, v := range f.counts[ip] {
		out[k] = v
	}
	return out, nil
}

func lostCounter(t *testing.T, key client.ObjectKey, plugin string) float64 {
	t.Helper()
	var m dto.Metric
	if err := auditEventsLost.WithLabelValues(key.Namespace, key.Name, plugin).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestAuditWatch_BringsBackATenantThatStartsOrStopsLosingEvents: the
// watch reads each apiserver's audit error counters once a round and
// brings the tenant back when the condition it decides differs from what
// its pass wrote, or new losses are to be reported: events lost since the
// read before (in any apiserver, a restarted one counting again from 0),
// then none. A first read only sets where the counts start (an operator
// that restarts reports no old losses as new, nor counts them again); a
// read that fails keeps the counts before it to compare the next one
// with, and says Unknown rather than that nothing was lost.
func TestAuditWatch_BringsBackATenantThatStartsOrStopsLosingEvents(t *testing.T) {
	f := &fakeAuditCounters{counts: map[string]apiserver.AuditErrors{}, down: map[string]bool{}}
	f.set("10.3.0.1", apiserver.AuditErrors{"webhook": 4}, false)
	f.set("10.3.0.2", nil, false)
	w := newAuditWatch(time.Hour)
	key := client.ObjectKey{Namespace: "audit-ns", Name: "t"}
	defer auditEventsLost.DeletePartialMatch(map[string]string{"namespace": key.Namespace})
	pods := []agentServer{{pod: "t-a", ip: "10.3.0.1", ready: true}, {pod: "t-b", ip: "10.3.0.2", ready: true}}

	// The pass's own first read: t-a lost events at some time since it
	// started, which says nothing of now.
	first := readAudit(context.Background(), pods, f.read, auditLook{}, nil)
	d := decideAudit(pods, first)
	if d.status != metav1.ConditionUnknown || !strings.Contains(d.message, "apiserver pod(s) t-a lost audit events since they started, before the operator first read them") {
		t.Fatalf("the first read decides %+v", d)
	}
	countAuditLoss(key, first) // as the pass does
	w.record(key, pods, f.read, first, d)
	round := func() (bool, auditDecision) {
		t.Helper()
		w.Round(context.Background())
		target, _ := w.Load(key)
		l := target.look
		select {
		case e := <-w.Events():
			if got := client.ObjectKeyFromObject(e.Object); got != key {
				t.Fatalf("the watch brought back %v, want %v", got, key)
			}
			return true, decideAudit(pods, l)
		default:
			return false, decideAudit(pods, l)
		}
	}
	written := func(d auditDecision) {
		target, _ := w.Load(key)
		w.record(key, pods, f.read, target.look, d)
	}
	// Nothing lost since: True.
	back, d := round()
	if !back || d.status != metav1.ConditionTrue || d.reason != v1alpha1.ReasonAuditDelivering {
		t.Fatalf("a read without new losses: brought back %v, decided %+v", back, d)
	}
	written(d)
	if back, _ := round(); back {
		t.Fatal("a read that found what the pass wrote brought the tenant back")
	}
	// t-b fails once, while t-a loses 3 dropped from its buffer: False.
	f.set("10.3.0.2", nil, true)
	f.set("10.3.0.1", apiserver.AuditErrors{"webhook": 4, "buffered": 3}, false)
	back, d = round()
	if !back || d.status != metav1.ConditionFalse || !strings.Contains(d.message, "apiserver pod(s) t-a lost 3 audit events since ") || !strings.Contains(d.message, "3 dropped from a full buffer") {
		t.Fatalf("losses at t-a while t-b does not answer: brought back %v, decided %+v", back, d)
	}
	written(d)
	// t-b answers again, having lost 2 to truncation meanwhile, and t-a
	// restarted (its counts start again from 0, with 1 lost since).
	f.set("10.3.0.2", apiserver.AuditErrors{"truncate": 2}, false)
	f.set("10.3.0.1", apiserver.AuditErrors{"webhook": 1}, false)
	back, d = round()
	if !back || d.status != metav1.ConditionFalse || !strings.Contains(d.message, "apiserver pod(s) t-a, t-b lost 3 audit events") ||
		!strings.Contains(d.message, "2 cut for their size, 1 not taken by the webhook") {
		t.Fatalf("new losses at both: brought back %v (to report them), decided %+v", back, d)
	}
	written(d)
	// t-b stops answering, twice, and nothing else is lost: Unknown, not
	// that nothing was lost.
	f.set("10.3.0.2", apiserver.AuditErrors{"truncate": 2}, true)
	for range 2 {
		if _, d = round(); d.status != metav1.ConditionUnknown || !strings.Contains(d.message, "apiserver pod(s) t-b could not be read") {
			t.Fatalf("t-b not read: decided %+v", d)
		}
	}
	// The first read's 4 are not counted: they are older than the watch.
	for plugin, want := range map[string]float64{"webhook": 1, "buffered": 3, "truncate": 2} {
		if got := lostCounter(t, key, plugin); got != want {
			t.Errorf("apiserver_operator_audit_events_lost_total{plugin=%q} is %v, want %v", plugin, got, want)
		}
	}
	if w.CompletedRounds() != 6 {
		t.Errorf("%d rounds completed, want 6", w.CompletedRounds())
	}
	// A pod that does not answer at all (not serving yet), and has
	// nothing before: Unknown, and a pass reads it again rather than
	// taking that look as recent.
	other := []agentServer{{pod: "t-c", ip: "10.3.0.3", ready: false}}
	f.set("10.3.0.3", nil, true)
	otherKey := client.ObjectKey{Namespace: "audit-ns", Name: "other"}
	l := readAudit(context.Background(), other, f.read, auditLook{}, nil)
	if d := decideAudit(other, l); d.status != metav1.ConditionUnknown || !strings.Contains(d.message, "t-c could not be read") {
		t.Errorf("an apiserver that does not answer: %+v", d)
	}
	w.record(otherKey, other, f.read, l, decideAudit(other, l))
	if _, _, ok := w.recent(otherKey, other, time.Now()); ok {
		t.Error("a look that could not read a pod is taken as recent: the pass would not read it again")
	}
	f.set("10.3.0.3", nil, false)
	l = readAudit(context.Background(), other, f.read, l, nil)
	w.record(otherKey, other, f.read, l, decideAudit(other, l))
	if _, _, ok := w.recent(otherKey, other, time.Now()); !ok {
		t.Error("a look that read every pod is not taken as recent")
	}
	w.Forget(otherKey)
	if d := decideAudit(nil, auditLook{}); d.status != metav1.ConditionUnknown || d.message != "no apiserver pod runs" {
		t.Errorf("no apiserver: %+v", d)
	}
	w.Forget(key)
	reads := f.reads
	w.Round(context.Background())
	if f.reads != reads {
		t.Error("a forgotten tenant is still read")
	}
}

// auditingTenant is a tenant whose apiservers' /metrics count the audit
// events they lost.
type auditingTenant struct{ lost atomic.Int64 }

func (f *auditingTenant) Resources(context.Context) (map[schema.GroupResource]tenantio.Resource, error) {
	return map[schema.GroupResource]tenantio.Resource{}, nil
}

func (f *auditingTenant) Rewrite(context.Context, tenantio.Resource, string, string) error {
	return nil
}

func (f *auditingTenant) Metrics(_ context.Context, _ string, families ...string) ([]byte, error) {
	if !slices.Equal(families, []string{apiserver.AuditErrorsMetric}) {
		return nil, fmt.Errorf("asked for the metrics %v", families)
	}
	return fmt.Appendf(nil, "# TYPE apiserver_audit_error_total counter\napiserver_audit_error_total{plugin=\"webhook\"} %d\n", f.lost.Load()), nil
}

// TestApiServerConfigReconciler_ReportsAuditEventsTheApiserversLost: with
// spec.audit.webhook, a pass reads the audit error counters of apiservers
// it has not read (the audit watch reads them between passes): events lost
// since a read say AuditDelivered False, with a Warning event, and Ready
// stays True; without spec.audit.webhook the condition goes.
func TestApiServerConfigReconciler_ReportsAuditEventsTheApiserversLost(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "audit-webhook"},
		Data: map[string][]byte{"kubeconfig": webhookKubeconfig("https://audit.example.com", "{token: t}")}}); err != nil {
		t.Fatal(err)
	}
	cfg := tenant(ns, "lossy", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Audit.Webhook = &v1alpha1.AuditWebhookSpec{KubeconfigSecretName: "audit-webhook"}
	})
	fake := &auditingTenant{}
	fake.lost.Store(7)
	testTenants.Store(client.ObjectKeyFromObject(cfg), fake)
	t.Cleanup(func() { testTenants.Delete(client.ObjectKeyFromObject(cfg)) })
	createReady(t, cfg)
	pod := createAPIServerPod(t, cfg, "lossy-apiserver-x")
	pod.Status.PodIP = "10.0.0.7"
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	condition := func() *metav1.Condition {
		return conditionOf(get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}), v1alpha1.ConditionAuditDelivered)
	}
	eventually(t, 20*time.Second, "a first read of an apiserver that lost events before says Unknown", func() error {
		if c := condition(); c == nil || c.Status != metav1.ConditionUnknown || !strings.Contains(c.Message, "lossy-apiserver-x lost audit events since they started") {
			return fmt.Errorf("AuditDelivered is %v", c)
		}
		return nil
	})
	// It loses 3 more, and a second apiserver starts (a new set of pods
	// is read by the pass): False, with what was lost since.
	fake.lost.Store(10)
	pod2 := createAPIServerPod(t, cfg, "lossy-apiserver-y")
	pod2.Status.PodIP = "10.0.0.8"
	pod2.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := env.Client.Status().Update(ctx, pod2); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "AuditDelivered says what was lost", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		c := conditionOf(got, v1alpha1.ConditionAuditDelivered)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonAuditEventsLost ||
			!strings.Contains(c.Message, "apiserver pod(s) lossy-apiserver-x lost 3 audit events since ") || !strings.Contains(c.Message, "3 not taken by the webhook") {
			return fmt.Errorf("AuditDelivered is %v", c)
		}
		if r := conditionOf(got, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready is %v: the apiservers serve", r)
		}
		return nil
	})
	eventually(t, 20*time.Second, "a Warning event says what was lost", func() error {
		events := &eventsv1.EventList{}
		if err := env.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == v1alpha1.ReasonAuditEventsLost && strings.Contains(e.Note, "lost 3 audit events") {
				return nil
			}
		}
		return fmt.Errorf("no Warning event %s among %d", v1alpha1.ReasonAuditEventsLost, len(events.Items))
	})
	if got := lostCounter(t, client.ObjectKeyFromObject(cfg), "webhook"); got != 3 {
		t.Errorf("apiserver_operator_audit_events_lost_total{plugin=webhook} is %v, want 3 (not the 7 before the first read)", got)
	}

	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) { s.Audit.Webhook = nil })
	eventually(t, 20*time.Second, "without spec.audit.webhook the condition goes", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if c := conditionOf(got, v1alpha1.ConditionAuditDelivered); c != nil || got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("AuditDelivered is %v (generation %d of %d)", c, got.Status.ObservedGeneration, got.Generation)
		}
		return nil
	})
}
