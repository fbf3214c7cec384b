package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch

// KonnectivityProber says whether the konnectivity server of the apiserver
// pod at podIP holds a tunnel from at least one agent.
type KonnectivityProber func(ctx context.Context, podIP string) (bool, error)

const (
	// konnectivityGateTimeout is how long a new apiserver waits for an
	// agent's tunnel before it serves without one (with a Warning event):
	// agents that cannot reach new servers hold no rollout forever.
	konnectivityGateTimeout = 2 * time.Minute
	// konnectivityGateRequeue is how soon a pass looks again at a pod
	// that waits for an agent: agents dial about once a second.
	konnectivityGateRequeue = time.Second
)

// gateKonnectivity opens the readiness gate of the apiserver pods of a
// tenant with spec.konnectivity (apiserver.KonnectivityAgentsGate) once
// they can carry the tenant's traffic to its nodes. Without it a new
// apiserver would turn Ready, and take requests, a second or two before
// any agent holds a tunnel to its konnectivity server, and fail each
// logs, exec, port-forward or webhook call to a node with "No agent
// available" meanwhile: every rollout would fail calls. A pod's gate
// opens when its server holds a tunnel, when no server of the tenant holds
// one (a tenant without nodes), or after konnectivityGateTimeout. The
// agents reach a pod whose gate is closed through the agents' Service,
// which publishes pods that are not ready.
//
// Only pods that wait are looked at, with every running server of the
// tenant: a tenant costs nothing here between rollouts.
func (r *ApiServerConfigReconciler) gateKonnectivity(ctx context.Context, p *pass) error {
	if p.c == nil || p.c.Spec.Konnectivity == nil {
		return nil
	}
	var waiting []*corev1.Pod
	for i := range p.pods {
		if gateWaits(&p.pods[i]) {
			waiting = append(waiting, &p.pods[i])
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	probe := r.konnectivityProber()
	connected := map[types.UID]bool{}
	anyAgent, unknown := false, 0
	for i := range p.pods {
		pod := &p.pods[i]
		if pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
			continue
		}
		ok, err := probe(ctx, pod.Status.PodIP)
		if err != nil {
			ctrl.LoggerFrom(ctx).V(1).Info("Looking at a konnectivity server failed", "pod", klog.KObj(pod), "error", err.Error())
			unknown++
			continue
		}
		connected[pod.UID] = ok
		anyAgent = anyAgent || ok
	}
	for _, pod := range waiting {
		var reason, message string
		waited := p.now.Sub(containersReadySince(pod))
		switch {
		case connected[pod.UID]:
			reason, message = "AgentConnected", "an agent holds a tunnel to the pod's konnectivity server"
		case !anyAgent && unknown == 0:
			reason, message = "NoAgents", "no konnectivity server of the tenant holds a tunnel from an agent"
		case waited >= konnectivityGateTimeout:
			reason = "NoAgentInTime"
			message = fmt.Sprintf("no agent opened a tunnel to the pod's konnectivity server within %s; it serves without one: calls to the tenant's nodes through it fail until an agent connects", konnectivityGateTimeout)
			r.event(p.cfg, corev1.EventTypeWarning, "KonnectivityAgentMissing", "Gate",
				"Apiserver pod %s serves without a konnectivity agent: %s (check that the agents reach the agents' Service %s and trust its certificate)",
				pod.Name, message, apiserver.KonnectivityServiceName(p.cfg.Name))
		default:
			p.requeueWithin(konnectivityGateRequeue)
			continue
		}
		if err := r.openKonnectivityGate(ctx, pod, reason, message, p.now); err != nil {
			return err
		}
	}
	return nil
}

// gateWaits: pod has the konnectivity readiness gate, its containers are
// ready, and the gate is not open.
func gateWaits(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
		return false
	}
	gated := false
	for _, g := range pod.Spec.ReadinessGates {
		gated = gated || g.ConditionType == apiserver.KonnectivityAgentsGate
	}
	if !gated {
		return false
	}
	containersReady := false
	for _, c := range pod.Status.Conditions {
		switch c.Type {
		case apiserver.KonnectivityAgentsGate:
			if c.Status == corev1.ConditionTrue {
				return false
			}
		case corev1.ContainersReady:
			containersReady = c.Status == corev1.ConditionTrue
		}
	}
	return containersReady
}

// containersReadySince is when pod's containers turned ready.
func containersReadySince(pod *corev1.Pod) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.ContainersReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// openKonnectivityGate sets the gate's condition on pod, beside kubelet's
// own conditions (a strategic merge by type).
func (r *ApiServerConfigReconciler) openKonnectivityGate(ctx context.Context, pod *corev1.Pod, reason, message string, now time.Time) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: apiserver.KonnectivityAgentsGate, Status: corev1.ConditionTrue,
		Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(now),
	}}}})
	if err != nil {
		return err
	}
	if err := r.Client.Status().Patch(ctx, pod, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		return fmt.Errorf("opening the konnectivity readiness gate of apiserver pod %s: %w", pod.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Opened the konnectivity readiness gate", "pod", klog.KObj(pod), "reason", reason)
	return nil
}

func (r *ApiServerConfigReconciler) konnectivityProber() KonnectivityProber {
	if r.KonnectivityProbe != nil {
		return r.KonnectivityProbe
	}
	return probeKonnectivityServer
}

// probeKonnectivityServer looks at the server of the pod at podIP on its
// health port.
func probeKonnectivityServer(ctx context.Context, podIP string) (bool, error) {
	return tenantio.KonnectivityReady(ctx, podIP, apiserver.KonnectivityHealthPort)
}
