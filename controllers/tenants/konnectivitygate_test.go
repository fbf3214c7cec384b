package tenants

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// testServer is a konnectivity server as the tests' pods have one: how
// many agents hold a tunnel to it (connected: one), or why it does not
// answer, and how often the operator looked.
type testServer struct {
	connected atomic.Bool
	agents    atomic.Int32
	down      atomic.Bool
	looks     atomic.Int64
}

// testKonnectivity are the konnectivity servers of the tests' pods, by pod
// address.
var testKonnectivity sync.Map

func probeTestKonnectivity(_ context.Context, podIP string) (int32, error) {
	v, ok := testKonnectivity.Load(podIP)
	if !ok {
		return 0, fmt.Errorf("no konnectivity server at %s in this test", podIP)
	}
	s := v.(*testServer)
	s.looks.Add(1)
	if s.down.Load() {
		return 0, errors.New("connection refused")
	}
	if n := s.agents.Load(); n > 0 {
		return n, nil
	}
	if s.connected.Load() {
		return 1, nil
	}
	return 0, nil
}

// gatedPod creates an apiserver pod of cfg with the konnectivity gate, as
// the Deployment's template has it, at address ip, with ready containers;
// its gate's condition has status gate (none when empty) since since. Its
// server is returned.
func gatedPod(t *testing.T, cfg *v1alpha1.ApiServerConfig, name, ip string, gate corev1.ConditionStatus, since time.Time) (*corev1.Pod, *testServer) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: name, Labels: apiserver.SelectorLabels(cfg.Name),
			OwnerReferences: apiserverReplicaSet(t, cfg)},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "kube-apiserver", Image: "k"}, {Name: apiserver.KonnectivityServerContainer, Image: "s"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: apiserver.KonnectivityAgentsGate}},
		},
	}
	server := &testServer{}
	testKonnectivity.Store(ip, server)
	t.Cleanup(func() { testKonnectivity.Delete(ip) })
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	at := metav1.NewTime(since)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, Conditions: []corev1.PodCondition{
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: at},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: at},
	}}
	if gate != "" {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: apiserver.KonnectivityAgentsGate, Status: gate, Reason: "Test", LastTransitionTime: at})
		if gate == corev1.ConditionTrue {
			pod.Status.Conditions[1].Status = corev1.ConditionTrue
		}
	}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return pod, server
}

// gateOf is the reason of pod's open gate, "" while it is closed.
func gateOf(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	if c := gateCondition(t, pod); c != nil && c.Status == corev1.ConditionTrue {
		return c.Reason
	}
	return ""
}

// gateCondition is pod's gate's condition as the API server has it.
func gateCondition(t *testing.T, pod *corev1.Pod) *corev1.PodCondition {
	t.Helper()
	got := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Status.Conditions {
		if c.Type == apiserver.KonnectivityAgentsGate {
			return &c
		}
	}
	return nil
}

func waitGate(t *testing.T, pod *corev1.Pod, reason string) {
	t.Helper()
	eventually(t, 20*time.Second, "the gate of "+pod.Name+" opens with "+reason, func() error {
		if got := gateOf(t, pod); got != reason {
			return fmt.Errorf("gate %q", got)
		}
		return nil
	})
}

// waitLooks waits until the operator looked at s n more times: passes that
// ran and decided.
func waitLooks(t *testing.T, s *testServer, n int64) {
	t.Helper()
	from := s.looks.Load()
	eventually(t, 20*time.Second, "the operator looks at the server again", func() error {
		if got := s.looks.Load() - from; got < n {
			return fmt.Errorf("%d looks", got)
		}
		return nil
	})
}

func konnectivityTenant(ns, name string) *v1alpha1.ApiServerConfig {
	return tenant(ns, name, func(s *v1alpha1.ApiServerConfigSpec) {
		s.Konnectivity = &v1alpha1.KonnectivitySpec{Agent: v1alpha1.KonnectivityAgentSpec{Host: "agents.example.com"}}
	})
}

// TestApiServerConfigReconciler_NewApiserversWaitForAKonnectivityAgent: a
// new apiserver of a tenant whose agents hold tunnels to its other servers
// turns Ready only once an agent holds one to its own server, so that no
// call to a node lands on it before it can carry it.
func TestApiServerConfigReconciler_NewApiserversWaitForAKonnectivityAgent(t *testing.T) {
	ns := namespace(t, nil)
	cfg := konnectivityTenant(ns, "gated")
	createReady(t, cfg)
	d := waitForDeployment(t, cfg)
	if gates := d.Spec.Template.Spec.ReadinessGates; len(gates) != 1 || gates[0].ConditionType != apiserver.KonnectivityAgentsGate {
		t.Fatalf("the apiserver pods' readiness gates are %v, want %s", gates, apiserver.KonnectivityAgentsGate)
	}

	_, old := gatedPod(t, cfg, "gated-old", "10.1.0.1", corev1.ConditionTrue, time.Now())
	old.connected.Store(true)
	fresh, server := gatedPod(t, cfg, "gated-new", "10.1.0.2", "", time.Now())
	waitLooks(t, server, 3)
	if got := gateOf(t, fresh); got != "" {
		t.Fatalf("the new apiserver's gate opened (%s) while no agent held a tunnel to its server and one held a tunnel to the old one", got)
	}
	// Why it is not Ready, on the pod.
	if c := gateCondition(t, fresh); c == nil || c.Status != corev1.ConditionFalse || c.Reason != v1alpha1.ReasonWaitingForAgent {
		t.Errorf("the waiting pod's gate condition is %+v, want False %s", c, v1alpha1.ReasonWaitingForAgent)
	}
	server.connected.Store(true)
	waitGate(t, fresh, v1alpha1.ReasonAgentConnected)
}

// TestApiServerConfigReconciler_ApiserversOfATenantWithoutAgentsServe: a
// tenant without nodes has no agent; its apiservers do not wait for one.
func TestApiServerConfigReconciler_ApiserversOfATenantWithoutAgentsServe(t *testing.T) {
	ns := namespace(t, nil)
	cfg := konnectivityTenant(ns, "nodeless")
	createReady(t, cfg)
	// A pod from before spec.konnectivity, without the gate or a server
	// (its look would fail), does not hold the others.
	ungated := createAPIServerPod(t, cfg, "nodeless-before")
	ungated.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.1.9"}
	if err := env.Client.Status().Update(context.Background(), ungated); err != nil {
		t.Fatal(err)
	}
	pod, _ := gatedPod(t, cfg, "nodeless-a", "10.1.1.1", "", time.Now())
	waitGate(t, pod, v1alpha1.ReasonNoAgents)
}

// TestApiServerConfigReconciler_AnApiserverWaitsForAnAgentForALimitedTime:
// a server no agent reaches (or one that cannot be looked at) does not
// hold a rollout forever: after the wait, the pod serves and an event
// says why calls to nodes through it fail.
func TestApiServerConfigReconciler_AnApiserverWaitsForAnAgentForALimitedTime(t *testing.T) {
	ns := namespace(t, nil)
	cfg := konnectivityTenant(ns, "late")
	createReady(t, cfg)
	_, old := gatedPod(t, cfg, "late-old", "10.1.2.1", corev1.ConditionTrue, time.Now())
	old.down.Store(true)
	pod, server := gatedPod(t, cfg, "late-new", "10.1.2.2", "", time.Now())
	waitLooks(t, server, 3)
	if got := gateOf(t, pod); got != "" {
		t.Fatalf("the gate opened (%s) while the other server could not be looked at", got)
	}
	// One that has waited since before the timeout (its containers'
	// readiness is recent: the wait counts from the gate's own condition).
	stale, _ := gatedPod(t, cfg, "late-stale", "10.1.2.3", corev1.ConditionFalse, time.Now().Add(-konnectivityGateTimeout-time.Minute))
	waitGate(t, stale, v1alpha1.ReasonNoAgentInTime)
	eventually(t, 20*time.Second, "a Warning event names the pod", func() error {
		events := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == v1alpha1.ReasonNoAgentInTime && strings.Contains(e.Note, "late-stale") {
				return nil
			}
		}
		return fmt.Errorf("%d events, none about late-stale", len(events.Items))
	})
	if got := gateOf(t, pod); got != "" {
		t.Errorf("the gate of the pod that waited less than %s opened (%s)", konnectivityGateTimeout, got)
	}
}

// TestDecideKonnectivityGate: when the gate of a pod that waits opens, and
// how soon it is looked at again when it does not.
func TestDecideKonnectivityGate(t *testing.T) {
	for _, tt := range []struct {
		name                string
		connected, anyAgent bool
		unknown             int
		waited              time.Duration
		open                bool
		reason              string
		requeue             time.Duration
	}{
		{"its server has an agent", true, true, 0, 0, true, v1alpha1.ReasonAgentConnected, 0},
		{"its server has one, another could not be looked at", true, true, 1, 0, true, v1alpha1.ReasonAgentConnected, 0},
		{"no server has an agent", false, false, 0, 0, true, v1alpha1.ReasonNoAgents, 0},
		{"another server has one", false, true, 0, 5 * time.Second, false, v1alpha1.ReasonWaitingForAgent, konnectivityGateFastRequeue},
		{"another server has one, for a while", false, true, 0, time.Minute, false, v1alpha1.ReasonWaitingForAgent, konnectivityGateSlowRequeue},
		{"a server could not be looked at", false, false, 1, 0, false, v1alpha1.ReasonWaitingForAgent, konnectivityGateFastRequeue},
		{"waited long enough", false, true, 0, konnectivityGateTimeout, true, v1alpha1.ReasonNoAgentInTime, 0},
		{"waited long enough, unknown servers", false, false, 2, konnectivityGateTimeout + time.Second, true, v1alpha1.ReasonNoAgentInTime, 0},
	} {
		d := decideKonnectivityGate(tt.connected, tt.anyAgent, tt.unknown, tt.waited)
		if d.open != tt.open || d.reason != tt.reason || d.requeue != tt.requeue || d.message == "" {
			t.Errorf("%s: open %v, reason %s, requeue %s, message %q; want %v, %s, %s and a message", tt.name, d.open, d.reason, d.requeue, d.message, tt.open, tt.reason, tt.requeue)
		}
	}
}
