package tenants

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/controllertest"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantwatch"
)

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
	if got := controllertest.CounterValue(t, tenantwatch.AuditEventsLost.WithLabelValues(cfg.Namespace, cfg.Name, "webhook")); got != 3 {
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
