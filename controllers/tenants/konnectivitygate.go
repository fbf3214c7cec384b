package tenants

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantwatch"
)

// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch

const (
	// konnectivityGateTimeout is how long a new apiserver waits for an
	// agent's tunnel before it serves without one (with a Warning event):
	// agents that cannot reach new servers hold no rollout forever.
	konnectivityGateTimeout = 2 * time.Minute
	// A pod that waits is looked at again every second for
	// konnectivityGateFastFor (agents dial about once a second), then
	// every konnectivityGateSlowRequeue: agents that do not come soon
	// cost the operator a pass every few seconds, not every second.
	konnectivityGateFastRequeue = time.Second
	konnectivityGateSlowRequeue = 5 * time.Second
	konnectivityGateFastFor     = 15 * time.Second
	// konnectivityGateProbes is how many servers of a tenant are looked
	// at side by side.
	konnectivityGateProbes = 4
)

// gateKonnectivity is the pass's step for the konnectivity readiness gate
// (see gateKonnectivityPods). It never fails the pass: the rest of the
// tenant (certificates, the Deployment) must not wait on a pod's gate; a
// failed write of a condition is logged and looked at again soon.
func (r *Reconciler) gateKonnectivity(ctx context.Context, p *pass) error {
	d, looks := r.gateKonnectivityPods(ctx, p.cfg, p.pods, p.now)
	if d > 0 {
		p.requeueWithin(d)
	}
	p.gateLooks = looks
	return nil
}

// gateKonnectivityPaused is the gate of a paused tenant's pods, listed
// from the cache; a failed list is looked at again soon.
func (r *Reconciler) gateKonnectivityPaused(ctx context.Context, cfg *v1alpha1.ApiServerConfig) time.Duration {
	if cfg.Spec.Konnectivity == nil {
		return 0
	}
	deployment := &appsv1.Deployment{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}, deployment); {
	case apierrors.IsNotFound(err) || (err == nil && r.claim(cfg, deployment) != nil):
		return 0 // no pod of the tenant's to gate
	case err != nil:
		ctrl.LoggerFrom(ctx).Info("Reading the Deployment of a paused tenant for its konnectivity gate failed", "error", err.Error())
		return konnectivityGateSlowRequeue
	}
	pods, err := r.tenantPods(ctx, cfg, deployment)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Listing the apiserver pods of a paused tenant for their konnectivity gate failed", "error", err.Error())
		return konnectivityGateSlowRequeue
	}
	d, _ := r.gateKonnectivityPods(ctx, cfg, pods, r.Clock.Now())
	return d
}

// gateKonnectivityPods opens the readiness gate of the apiserver pods of a
// tenant with spec.konnectivity (apiserver.KonnectivityAgentsGate) once
// they can carry the tenant's traffic to its nodes, and returns how soon
// to look again (0: nothing waits), and what it found of the servers it
// looked at (the Agents step takes them). Without the gate a new apiserver would
// turn Ready, and take requests, a second or two before any agent holds a
// tunnel to its konnectivity server, and fail each logs, exec,
// port-forward or webhook call to a node with "No agent available"
// meanwhile: every rollout would fail calls. The agents reach a pod whose
// gate is closed through the agents' Service, which publishes pods that
// are not ready. decideKonnectivityGate says when the gate opens.
//
// Only the servers of pods that carry the gate are looked at (a pod from
// before spec.konnectivity has none), and only while one of them waits:
// a tenant costs nothing here between rollouts.
func (r *Reconciler) gateKonnectivityPods(ctx context.Context, cfg *v1alpha1.ApiServerConfig, pods []corev1.Pod, now time.Time) (time.Duration, map[string]serverLook) {
	if cfg.Spec.Konnectivity == nil {
		return 0, nil
	}
	var gated, waiting []*corev1.Pod
	for i := range pods {
		pod := &pods[i]
		if !hasKonnectivityGate(pod) || pod.DeletionTimestamp != nil || podEnded(pod) || pod.Status.PodIP == "" {
			continue
		}
		gated = append(gated, pod)
		if gateWaits(pod) {
			waiting = append(waiting, pod)
		}
	}
	if len(waiting) == 0 {
		return 0, nil
	}
	servers := make([]tenantwatch.Server, len(gated))
	for i, pod := range gated {
		servers[i] = tenantwatch.Server{Pod: pod.Name, IP: pod.Status.PodIP}
	}
	looks := r.lookAtKonnectivityServers(ctx, servers)
	anyAgent, unknown := false, 0
	for _, l := range looks {
		anyAgent = anyAgent || l.connected
		if l.err != nil {
			unknown++
		}
	}
	requeue := time.Duration(0)
	log := ctrl.LoggerFrom(ctx)
	for _, pod := range waiting {
		since, seen := gateWaitingSince(pod)
		if !seen {
			since = now
		}
		l := looks[pod.Name]
		d := decideKonnectivityGate(l.connected, anyAgent, unknown, now.Sub(since))
		if d.open && d.reason == v1alpha1.ReasonNoAgentInTime {
			r.event(cfg, corev1.EventTypeWarning, v1alpha1.ReasonNoAgentInTime, "Gate",
				"Apiserver pod %s serves without a konnectivity agent: %s (check that the agents reach the agents' Service %s and trust its certificate)",
				pod.Name, d.message, apiserver.KonnectivityServiceName(cfg.Name))
		}
		if !d.open {
			requeue = sooner(requeue, d.requeue)
			if seen {
				continue
			}
		}
		if err := r.setKonnectivityGate(ctx, pod, d, now); err != nil {
			if !apierrors.IsNotFound(err) {
				log.Info("Writing the konnectivity readiness gate failed; looking again soon", "pod", klog.KObj(pod), "error", err.Error())
				requeue = sooner(requeue, konnectivityGateFastRequeue)
			}
			continue
		}
		if d.open {
			log.Info("Opened the konnectivity readiness gate", "pod", klog.KObj(pod), "reason", d.reason)
		}
	}
	return requeue, looks
}

// gateDecision is what the gate of a pod that waits does now.
type gateDecision struct {
	open            bool
	reason, message string
	// requeue is how soon to look again when it stays closed.
	requeue time.Duration
}

// decideKonnectivityGate decides the gate of a pod that waits: open when
// an agent holds a tunnel to its server (connected), when no server of
// the tenant holds one and every one was looked at (a tenant without
// nodes), or when it waited konnectivityGateTimeout; closed otherwise.
func decideKonnectivityGate(connected, anyAgent bool, unknown int, waited time.Duration) gateDecision {
	switch {
	case connected:
		return gateDecision{open: true, reason: v1alpha1.ReasonAgentConnected, message: "an agent holds a tunnel to the pod's konnectivity server"}
	case !anyAgent && unknown == 0:
		return gateDecision{open: true, reason: v1alpha1.ReasonNoAgents, message: "no konnectivity server of the tenant holds a tunnel from an agent"}
	case waited >= konnectivityGateTimeout:
		return gateDecision{open: true, reason: v1alpha1.ReasonNoAgentInTime, message: fmt.Sprintf(
			"no agent opened a tunnel to the pod's konnectivity server within %s; it serves without one: calls to the tenant's nodes through it fail until an agent connects", konnectivityGateTimeout)}
	}
	why := "agents hold tunnels to other servers of the tenant"
	if !anyAgent {
		why = fmt.Sprintf("%d server(s) of the tenant could not be looked at", unknown)
	}
	requeue := konnectivityGateSlowRequeue
	if waited < konnectivityGateFastFor {
		requeue = konnectivityGateFastRequeue
	}
	return gateDecision{reason: v1alpha1.ReasonWaitingForAgent, requeue: requeue, message: fmt.Sprintf(
		"waiting for an agent's tunnel to the pod's konnectivity server (%s); the pod serves without one after %s", why, konnectivityGateTimeout)}
}

// serverLook is what a look at a pod's konnectivity server found.
type serverLook struct {
	connected bool
	agents    int32
	err       error
}

// lookAtKonnectivityServers looks at servers, a few side by side, by pod
// name; a server that cannot be looked at has an error.
func (r *Reconciler) lookAtKonnectivityServers(ctx context.Context, servers []tenantwatch.Server) map[string]serverLook {
	probe := r.konnectivityProber()
	out := make(map[string]serverLook, len(servers))
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, konnectivityGateProbes)
	for _, s := range servers {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			n, err := probe(ctx, s.IP)
			if err != nil {
				ctrl.LoggerFrom(ctx).V(4).Info("Looking at a konnectivity server failed", "pod", s.Pod, "error", err.Error())
				n = 0
			}
			mu.Lock()
			out[s.Pod] = serverLook{connected: n > 0, agents: n, err: err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func hasKonnectivityGate(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == apiserver.KonnectivityAgentsGate {
			return true
		}
	}
	return false
}

// gateWaits: pod's containers are ready and its gate is not open.
func gateWaits(pod *corev1.Pod) bool {
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

// gateWaitingSince is when the operator first found pod waiting (its
// gate's condition False), if it did: the wait is timed from there, not
// from a readiness that may flap.
func gateWaitingSince(pod *corev1.Pod) (time.Time, bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == apiserver.KonnectivityAgentsGate && c.Status == corev1.ConditionFalse {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

// setKonnectivityGate writes the gate's condition on pod as d says,
// beside kubelet's own conditions (a strategic merge by type): True when
// it opens, False (why it waits) when it starts waiting.
func (r *Reconciler) setKonnectivityGate(ctx context.Context, pod *corev1.Pod, d gateDecision, now time.Time) error {
	status := corev1.ConditionFalse
	if d.open {
		status = corev1.ConditionTrue
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: apiserver.KonnectivityAgentsGate, Status: status, Reason: d.reason, Message: d.message, LastTransitionTime: metav1.NewTime(now),
	}}}})
	if err != nil {
		return fmt.Errorf("encoding the konnectivity readiness gate of apiserver pod %s: %w", pod.Name, err)
	}
	if err := r.Client.Status().Patch(ctx, pod, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		return fmt.Errorf("writing the konnectivity readiness gate of apiserver pod %s: %w", pod.Name, err)
	}
	return nil
}

// konnectivityProber counts the agents of the server of the pod at podIP
// through r.Reach.
func (r *Reconciler) konnectivityProber() tenantwatch.KonnectivityProber {
	return func(ctx context.Context, podIP string) (int32, error) {
		if r.Reach == nil {
			return 0, fmt.Errorf("the reconciler reaches no konnectivity server")
		}
		return r.Reach.KonnectivityAgents(ctx, podIP)
	}
}
