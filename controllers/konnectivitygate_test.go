package controllers

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

// testServer is a konnectivity server as the tests' pods have one: whether
// an agent holds a tunnel to it, or why it does not answer, and how often
// the operator looked.
type testServer struct {
	connected atomic.Bool
	down      atomic.Bool
	looks     atomic.Int64
}

// testKonnectivity are the konnectivity servers of the tests' pods, by pod
// address.
var testKonnectivity sync.Map

func probeTestKonnectivity(_ context.Context, podIP string) (bool, error) {
	v, ok := testKonnectivity.Load(podIP)
	if !ok {
		return false, fmt.Errorf("no konnectivity server at %s in this test", podIP)
	}
	s := v.(*testServer)
	s.looks.Add(1)
	if s.down.Load() {
		return false, errors.New("connection refused")
	}
	return s.connected.Load(), nil
}

// gatedPod creates an apiserver pod of cfg with the konnectivity gate, as
// the Deployment's template has it, at address ip, with ready containers
// since readySince and the gate as open says; its server is returned.
func gatedPod(t *testing.T, cfg *v1alpha1.ApiServerConfig, name, ip string, readySince time.Time, open bool) (*corev1.Pod, *testServer) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: name, Labels: apiserver.SelectorLabels(cfg.Name)},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "kube-apiserver", Image: "k"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: apiserver.KonnectivityAgentsGate}},
		},
	}
	server := &testServer{}
	testKonnectivity.Store(ip, server)
	t.Cleanup(func() { testKonnectivity.Delete(ip) })
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	since := metav1.NewTime(readySince)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, Conditions: []corev1.PodCondition{
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: since},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: since},
	}}
	if open {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: apiserver.KonnectivityAgentsGate, Status: corev1.ConditionTrue, Reason: "AgentConnected", LastTransitionTime: since})
		pod.Status.Conditions[1].Status = corev1.ConditionTrue
	}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return pod, server
}

// gateOf is the reason of pod's open gate, "" while it is closed.
func gateOf(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	got := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Status.Conditions {
		if c.Type == apiserver.KonnectivityAgentsGate && c.Status == corev1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
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

	_, old := gatedPod(t, cfg, "gated-old", "10.1.0.1", time.Now(), true)
	old.connected.Store(true)
	fresh, server := gatedPod(t, cfg, "gated-new", "10.1.0.2", time.Now(), false)
	waitLooks(t, server, 3)
	if got := gateOf(t, fresh); got != "" {
		t.Fatalf("the new apiserver's gate opened (%s) while no agent held a tunnel to its server and one held a tunnel to the old one", got)
	}
	server.connected.Store(true)
	waitGate(t, fresh, "AgentConnected")
}

// TestApiServerConfigReconciler_ApiserversOfATenantWithoutAgentsServe: a
// tenant without nodes has no agent; its apiservers do not wait for one.
func TestApiServerConfigReconciler_ApiserversOfATenantWithoutAgentsServe(t *testing.T) {
	ns := namespace(t, nil)
	cfg := konnectivityTenant(ns, "nodeless")
	createReady(t, cfg)
	pod, _ := gatedPod(t, cfg, "nodeless-a", "10.1.1.1", time.Now(), false)
	waitGate(t, pod, "NoAgents")
}

// TestApiServerConfigReconciler_AnApiserverWaitsForAnAgentForALimitedTime:
// a server no agent reaches (or one that cannot be looked at) does not
// hold a rollout forever: after the wait, the pod serves and an event
// says why calls to nodes through it fail.
func TestApiServerConfigReconciler_AnApiserverWaitsForAnAgentForALimitedTime(t *testing.T) {
	ns := namespace(t, nil)
	cfg := konnectivityTenant(ns, "late")
	createReady(t, cfg)
	_, old := gatedPod(t, cfg, "late-old", "10.1.2.1", time.Now(), true)
	old.down.Store(true)
	pod, server := gatedPod(t, cfg, "late-new", "10.1.2.2", time.Now(), false)
	waitLooks(t, server, 3)
	if got := gateOf(t, pod); got != "" {
		t.Fatalf("the gate opened (%s) while the other server could not be looked at", got)
	}
	stale, _ := gatedPod(t, cfg, "late-stale", "10.1.2.3", time.Now().Add(-konnectivityGateTimeout-time.Minute), false)
	waitGate(t, stale, "NoAgentInTime")
	eventually(t, 20*time.Second, "a Warning event names the pod", func() error {
		events := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "KonnectivityAgentMissing" && strings.Contains(e.Note, "late-stale") {
				return nil
			}
		}
		return fmt.Errorf("%d events, none about late-stale", len(events.Items))
	})
	if got := gateOf(t, pod); got != "" {
		t.Errorf("the gate of the pod that waited less than %s opened (%s)", konnectivityGateTimeout, got)
	}
}
