package tenantwatch

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/controllertest"
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
	w := NewAudit(time.Hour)
	key := client.ObjectKey{Namespace: "audit-ns", Name: "t"}
	defer AuditEventsLost.DeletePartialMatch(map[string]string{"namespace": key.Namespace})
	pods := []Server{{Pod: "t-a", IP: "10.3.0.1", Ready: true}, {Pod: "t-b", IP: "10.3.0.2", Ready: true}}

	// The pass's own first read: t-a lost events at some time since it
	// started, which says nothing of now.
	first := ReadAudit(context.Background(), pods, f.read, AuditLook{}, nil)
	d := DecideAudit(pods, first)
	if d.Status != metav1.ConditionUnknown || !strings.Contains(d.Message, "apiserver pod(s) t-a lost audit events since they started, before the operator first read them") {
		t.Fatalf("the first read decides %+v", d)
	}
	CountAuditLoss(key, first) // as the pass does
	w.Record(key, pods, f.read, first, d)
	round := func() (bool, AuditDecision) {
		t.Helper()
		w.Round(context.Background())
		target, _ := w.Load(key)
		l := target.look
		select {
		case e := <-w.Events():
			if got := client.ObjectKeyFromObject(e.Object); got != key {
				t.Fatalf("the watch brought back %v, want %v", got, key)
			}
			return true, DecideAudit(pods, l)
		default:
			return false, DecideAudit(pods, l)
		}
	}
	written := func(d AuditDecision) {
		target, _ := w.Load(key)
		w.Record(key, pods, f.read, target.look, d)
	}
	// Nothing lost since: True.
	back, d := round()
	if !back || d.Status != metav1.ConditionTrue || d.Reason != v1alpha1.ReasonAuditDelivering {
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
	if !back || d.Status != metav1.ConditionFalse || !strings.Contains(d.Message, "apiserver pod(s) t-a lost 3 audit events since ") || !strings.Contains(d.Message, "3 dropped from a full buffer") {
		t.Fatalf("losses at t-a while t-b does not answer: brought back %v, decided %+v", back, d)
	}
	written(d)
	// t-b answers again, having lost 2 to truncation meanwhile, and t-a
	// restarted (its counts start again from 0, with 1 lost since).
	f.set("10.3.0.2", apiserver.AuditErrors{"truncate": 2}, false)
	f.set("10.3.0.1", apiserver.AuditErrors{"webhook": 1}, false)
	back, d = round()
	if !back || d.Status != metav1.ConditionFalse || !strings.Contains(d.Message, "apiserver pod(s) t-a, t-b lost 3 audit events") ||
		!strings.Contains(d.Message, "2 cut for their size, 1 not taken by the webhook") {
		t.Fatalf("new losses at both: brought back %v (to report them), decided %+v", back, d)
	}
	written(d)
	// t-b stops answering, twice, and nothing else is lost: Unknown, not
	// that nothing was lost.
	f.set("10.3.0.2", apiserver.AuditErrors{"truncate": 2}, true)
	for range 2 {
		if _, d = round(); d.Status != metav1.ConditionUnknown || !strings.Contains(d.Message, "apiserver pod(s) t-b could not be read") {
			t.Fatalf("t-b not read: decided %+v", d)
		}
	}
	// The first read's 4 are not counted: they are older than the watch.
	for plugin, want := range map[string]float64{"webhook": 1, "buffered": 3, "truncate": 2} {
		if got := controllertest.CounterValue(t, AuditEventsLost.WithLabelValues(key.Namespace, key.Name, plugin)); got != want {
			t.Errorf("apiserver_operator_audit_events_lost_total{plugin=%q} is %v, want %v", plugin, got, want)
		}
	}
	if w.CompletedRounds() != 6 {
		t.Errorf("%d rounds completed, want 6", w.CompletedRounds())
	}
	// A pod that does not answer at all (not serving yet), and has
	// nothing before: Unknown, and a pass reads it again rather than
	// taking that look as recent.
	other := []Server{{Pod: "t-c", IP: "10.3.0.3", Ready: false}}
	f.set("10.3.0.3", nil, true)
	otherKey := client.ObjectKey{Namespace: "audit-ns", Name: "other"}
	l := ReadAudit(context.Background(), other, f.read, AuditLook{}, nil)
	if d := DecideAudit(other, l); d.Status != metav1.ConditionUnknown || !strings.Contains(d.Message, "t-c could not be read") {
		t.Errorf("an apiserver that does not answer: %+v", d)
	}
	w.Record(otherKey, other, f.read, l, DecideAudit(other, l))
	if _, _, ok := w.Recent(otherKey, other, time.Now()); ok {
		t.Error("a look that could not read a pod is taken as recent: the pass would not read it again")
	}
	f.set("10.3.0.3", nil, false)
	l = ReadAudit(context.Background(), other, f.read, l, nil)
	w.Record(otherKey, other, f.read, l, DecideAudit(other, l))
	if _, _, ok := w.Recent(otherKey, other, time.Now()); !ok {
		t.Error("a look that read every pod is not taken as recent")
	}
	w.Forget(otherKey)
	if d := DecideAudit(nil, AuditLook{}); d.Status != metav1.ConditionUnknown || d.Message != "no apiserver pod runs" {
		t.Errorf("no apiserver: %+v", d)
	}
	w.Forget(key)
	reads := f.reads
	w.Round(context.Background())
	if f.reads != reads {
		t.Error("a forgotten tenant is still read")
	}
}
