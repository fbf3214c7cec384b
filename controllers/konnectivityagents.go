package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// agentServer is the konnectivity server of one apiserver pod.
type agentServer struct {
	pod, ip string
	// ready: the pod takes requests, so calls to nodes go through its
	// server.
	ready bool
}

// agentLook is what a look at a tenant's servers found.
type agentLook struct {
	// agents by pod; nil for a server that could not be looked at.
	agents map[string]*int32
	// graced are the pods whose count is the look's before, kept for one
	// look that failed, or found no agent where the one before found some
	// (a server that restarted, an agent that redials): so that one GET
	// does not flip the condition, nor send an event, and back.
	graced map[string]bool
	// nodes is the tenant's node count, counted only when a ready server
	// holds no agent (needsNodes); nil when not counted. nodesGraced: the
	// look before's, kept for one count that failed.
	nodes       *int64
	nodesGraced bool
	at          time.Time
}

// withGrace keeps, for one look, what before found of a server this look
// could not count, or found without an agent where before found some.
func (l agentLook) withGrace(before agentLook) agentLook {
	l.graced = map[string]bool{}
	for pod, n := range l.agents {
		prev := before.agents[pod]
		if prev == nil || before.graced[pod] {
			continue
		}
		if n == nil || (*n == 0 && *prev > 0) {
			l.agents[pod], l.graced[pod] = prev, true
		}
	}
	return l
}

// sameCounts reports whether a and b count the same agents at each server.
func sameCounts(a, b map[string]*int32) bool {
	return maps.EqualFunc(a, b, func(x, y *int32) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) })
}

// needsNodes: a ready server holds no agent, so whether the tenant has
// nodes decides the condition.
func needsNodes(servers []agentServer, agents map[string]*int32) bool {
	for _, s := range servers {
		if n := agents[s.pod]; s.ready && n != nil && *n == 0 {
			return true
		}
	}
	return false
}

// samePods: a and b are the same pods at the same addresses (whether
// they are ready may differ).
func samePods(a, b []agentServer) bool {
	return slices.EqualFunc(a, b, func(x, y agentServer) bool { return x.pod == y.pod && x.ip == y.ip })
}

// agentsDecision is the KonnectivityAgentsConnected condition.
type agentsDecision struct {
	status          metav1.ConditionStatus
	reason, message string
}

// decideAgents says whether the tenant's nodes can be reached through the
// agents, from what l found of servers: only ready servers count (a new
// pod waits for an agent behind its readiness gate).
func decideAgents(servers []agentServer, l agentLook) agentsDecision {
	var without, unknown []string
	with := 0
	for _, s := range servers {
		if !s.ready {
			continue
		}
		switch n := l.agents[s.pod]; {
		case n == nil:
			unknown = append(unknown, s.pod)
		case *n == 0:
			without = append(without, s.pod)
		default:
			with++
		}
	}
	switch {
	case len(without) > 0 && l.nodes != nil && *l.nodes > 0:
		return agentsDecision{metav1.ConditionFalse, v1alpha1.ReasonNoAgentConnected, fmt.Sprintf(
			"the tenant has nodes but no konnectivity agent holds a tunnel to the konnectivity server of apiserver pod(s) %s: logs, exec, port-forward and webhooks served on nodes fail through them; check that the agents run on the nodes, reach the agents' Service and trust its certificate",
			strings.Join(without, ", "))}
	case len(without) > 0 && l.nodes != nil:
		return agentsDecision{metav1.ConditionTrue, v1alpha1.ReasonNoNodes, "the tenant has no node, so no konnectivity agent is expected"}
	case len(without) > 0:
		return agentsDecision{metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted, fmt.Sprintf(
			"the konnectivity server of apiserver pod(s) %s holds no agent's tunnel, and the tenant's nodes could not be counted in etcd", strings.Join(without, ", "))}
	case len(unknown) > 0:
		return agentsDecision{metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted, fmt.Sprintf(
			"the konnectivity server of apiserver pod(s) %s could not be looked at", strings.Join(unknown, ", "))}
	case with == 0:
		return agentsDecision{metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted, "no apiserver pod is ready"}
	}
	// No counts here: they move with every node, and status.konnectivity
	// and the gauge carry them.
	return agentsDecision{metav1.ConditionTrue, v1alpha1.ReasonAgentsConnected, "agents hold tunnels to the konnectivity server of every ready apiserver pod"}
}

// konnectivityServers are the konnectivity servers of pods that run one
// and can be reached, by pod name.
func konnectivityServers(pods []corev1.Pod) []agentServer {
	var out []agentServer
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || podEnded(pod) || pod.Status.PodIP == "" || !runsKonnectivityServer(pod) {
			continue
		}
		out = append(out, agentServer{pod: pod.Name, ip: pod.Status.PodIP, ready: podReady(pod)})
	}
	slices.SortFunc(out, func(a, b agentServer) int { return strings.Compare(a.pod, b.pod) })
	return out
}

func runsKonnectivityServer(pod *corev1.Pod) bool {
	has := func(c corev1.Container) bool { return c.Name == apiserver.KonnectivityServerContainer }
	return slices.ContainsFunc(pod.Spec.InitContainers, has) || slices.ContainsFunc(pod.Spec.Containers, has)
}

// reconcileAgents is the pass's step for status.konnectivity and the
// KonnectivityAgentsConnected condition: what the agent watch last found,
// when it looked at the pods the pass finds, or else a look of the pass's
// own (new pods), taken from the readiness gate's when it looked at them
// all, which the watch then compares its looks with. The tenant's nodes
// are counted in etcd only when a ready server holds no agent.
func (r *ApiServerConfigReconciler) reconcileAgents(ctx context.Context, p *pass) error {
	key := client.ObjectKeyFromObject(p.cfg)
	if p.cfg.Spec.Konnectivity == nil || ptr.Deref(p.cfg.Spec.MasterCount, 1) == 0 {
		// Without the proxy, or hibernated: nothing to count.
		p.cfg.Status.Konnectivity = nil
		p.obs.agents = &agentsDecision{}
		r.forgetAgents(key)
		return nil
	}
	servers := konnectivityServers(p.pods)
	var countNodes func(context.Context) (int64, error)
	if r.Etcd != nil && p.obs.etcdChecked && p.obs.etcdErr == nil {
		countNodes = r.nodeCounter(p)
	}
	var look, before agentLook
	ok := false
	if r.memory.agentWatch != nil {
		look, before, ok = r.memory.agentWatch.recent(key, servers, p.now)
	}
	if !ok {
		look = r.lookAtAgents(ctx, servers, countNodes, p.now, before, p.gateLooks)
	}
	if r.memory.agentWatch != nil {
		for _, pod := range r.memory.agentWatch.record(key, servers, countNodes, look) {
			konnectivityAgents.DeleteLabelValues(key.Namespace, key.Name, pod)
		}
	}
	recordAgentMetrics(key, servers, look)

	st := &v1alpha1.KonnectivityStatus{}
	for _, s := range servers {
		st.Servers = append(st.Servers, v1alpha1.KonnectivityServerStatus{Pod: s.pod, Agents: look.agents[s.pod], Ready: s.ready})
	}
	p.cfg.Status.Konnectivity = st
	d := decideAgents(servers, look)
	if d.status == metav1.ConditionFalse {
		// Once per fall from True (or a first look), not on each return
		// from Unknown.
		if prev := meta.FindStatusCondition(p.before.Status.Conditions, v1alpha1.ConditionKonnectivityAgentsConnected); prev == nil || prev.Status == metav1.ConditionTrue {
			r.event(p.cfg, corev1.EventTypeWarning, d.reason, "Agents", "%s", d.message)
		}
	}
	p.obs.agents = &d
	return nil
}

// lookAtAgents looks at servers (those the readiness gate looked at in
// this pass are taken from looks), all within one probe timeout, and
// counts the tenant's nodes when needsNodes says so; before gives a
// server or a count that fails once its grace (agentLook.withGrace).
func (r *ApiServerConfigReconciler) lookAtAgents(ctx context.Context, servers []agentServer, countNodes func(context.Context) (int64, error), now time.Time, before agentLook, looks map[string]serverLook) agentLook {
	var missing []agentServer
	for _, s := range servers {
		if _, ok := looks[s.pod]; !ok {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		lookCtx, cancel := context.WithTimeout(ctx, tenantio.KonnectivityProbeTimeout)
		more := r.lookAtKonnectivityServers(lookCtx, missing)
		cancel()
		looks = maps.Clone(looks)
		if looks == nil {
			looks = map[string]serverLook{}
		}
		maps.Copy(looks, more)
	}
	l := agentLook{agents: make(map[string]*int32, len(servers)), at: now}
	for _, s := range servers {
		l.agents[s.pod] = nil
		if found := looks[s.pod]; found.err == nil {
			l.agents[s.pod] = &found.agents
		}
	}
	l = l.withGrace(before)
	if countNodes != nil && needsNodes(servers, l.agents) {
		l.nodes, l.nodesGraced = countWithGrace(ctx, countNodes, before)
	}
	return l
}

// countWithGrace counts the tenant's nodes; a count that fails is before's
// for once (graced).
func countWithGrace(ctx context.Context, countNodes func(context.Context) (int64, error), before agentLook) (nodes *int64, graced bool) {
	if n, err := countNodes(ctx); err == nil {
		return &n, false
	}
	if before.nodes != nil && !before.nodesGraced {
		return before.nodes, true
	}
	return nil, false
}

// nodeCounter counts the tenant's nodes in its etcd, as Auto sizing does.
func (r *ApiServerConfigReconciler) nodeCounter(p *pass) func(context.Context) (int64, error) {
	servers, key, err := countKey(p.c, "nodes")
	tlsConfig := p.etcdTLS
	return func(ctx context.Context) (int64, error) {
		if err != nil {
			return 0, err
		}
		counted, err := r.Etcd.Count(ctx, servers, tlsConfig, key)
		if err != nil {
			return 0, err
		}
		return counted[0], nil
	}
}

func (r *ApiServerConfigReconciler) forgetAgents(key types.NamespacedName) {
	if r.memory.agentWatch == nil {
		return
	}
	for _, pod := range r.memory.agentWatch.forget(key) {
		konnectivityAgents.DeleteLabelValues(key.Namespace, key.Name, pod)
	}
}

// recordAgentMetrics sets the agents gauge of each server looked at; a
// server that could not be looked at has no series.
func recordAgentMetrics(key types.NamespacedName, servers []agentServer, l agentLook) {
	for _, s := range servers {
		if n := l.agents[s.pod]; n != nil {
			konnectivityAgents.WithLabelValues(key.Namespace, key.Name, s.pod).Set(float64(*n))
		} else {
			konnectivityAgents.DeleteLabelValues(key.Namespace, key.Name, s.pod)
		}
	}
}

// agentsCondition is KonnectivityAgentsConnected as d decided it.
func agentsCondition(d agentsDecision, generation int64) metav1.Condition {
	return metav1.Condition{Type: v1alpha1.ConditionKonnectivityAgentsConnected, Status: d.status, Reason: d.reason, Message: d.message, ObservedGeneration: generation}
}
