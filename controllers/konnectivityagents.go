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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
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
	// nodes is the tenant's node count, counted only when a ready server
	// holds no agent (needsNodes); nil when not counted.
	nodes *int64
	at    time.Time
}

// same reports whether l says what before says of servers: the same
// agents per server and the same condition.
func (l agentLook) same(servers []agentServer, before agentLook) bool {
	eq := func(a, b *int32) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	return maps.EqualFunc(l.agents, before.agents, eq) && decideAgents(servers, l) == decideAgents(servers, before)
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

// agentsDecision is the KonnectivityAgentsConnected condition.
type agentsDecision struct {
	status          metav1.ConditionStatus
	reason, message string
}

// decideAgents says whether the tenant's nodes can be reached through the
// agents, from what l found of servers: only ready servers count (a new
// pod waits for an agent behind its readiness gate).
func decideAgents(servers []agentServer, l agentLook) agentsDecision {
	var without, unknown, with []string
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
			with = append(with, fmt.Sprintf("%s %d", s.pod, *n))
		}
	}
	switch {
	case len(without) > 0 && l.nodes != nil && *l.nodes > 0:
		return agentsDecision{metav1.ConditionFalse, v1alpha1.ReasonNoAgentConnected, fmt.Sprintf(
			"the tenant has %d node(s) but no konnectivity agent holds a tunnel to the konnectivity server of apiserver pod(s) %s: logs, exec, port-forward and webhooks served on nodes fail through them; check that the agents run on the nodes, reach the agents' Service and trust its certificate",
			*l.nodes, strings.Join(without, ", "))}
	case len(without) > 0 && l.nodes != nil:
		return agentsDecision{metav1.ConditionTrue, v1alpha1.ReasonNoNodes, "the tenant has no node, so no konnectivity agent is expected"}
	case len(without) > 0:
		return agentsDecision{metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted, fmt.Sprintf(
			"the konnectivity server of apiserver pod(s) %s holds no agent's tunnel, and the tenant's nodes could not be counted in etcd", strings.Join(without, ", "))}
	case len(unknown) > 0:
		return agentsDecision{metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted, fmt.Sprintf(
			"the konnectivity server of apiserver pod(s) %s could not be looked at", strings.Join(unknown, ", "))}
	case len(with) == 0:
		return agentsDecision{metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted, "no apiserver pod is ready"}
	}
	return agentsDecision{metav1.ConditionTrue, v1alpha1.ReasonAgentsConnected, "agents hold tunnels to the konnectivity server of every ready apiserver pod: " + strings.Join(with, ", ")}
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
// when it looked at the servers the pass finds, or a look of the pass's
// own (new pods, a pod that turned ready), which the watch then compares
// its looks with. The tenant's nodes are counted in etcd only when a
// ready server holds no agent.
func (r *ApiServerConfigReconciler) reconcileAgents(ctx context.Context, p *pass) error {
	key := client.ObjectKeyFromObject(p.cfg)
	if p.cfg.Spec.Konnectivity == nil {
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
	look, ok := agentLook{}, false
	if r.agentWatch != nil {
		look, ok = r.agentWatch.recent(key, servers, p.now)
	}
	if !ok {
		look = r.lookAtAgents(ctx, servers, countNodes, p.now)
	}
	if r.agentWatch != nil {
		for _, pod := range r.agentWatch.record(key, servers, countNodes, look) {
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
		if before := meta.FindStatusCondition(p.before.Status.Conditions, v1alpha1.ConditionKonnectivityAgentsConnected); before == nil || before.Status != metav1.ConditionFalse {
			r.event(p.cfg, corev1.EventTypeWarning, d.reason, "Agents", "%s", d.message)
		}
	}
	p.obs.agents = &d
	return nil
}

// lookAtAgents looks at servers (side by side, as the readiness gate
// does) and counts the tenant's nodes when needsNodes says so.
func (r *ApiServerConfigReconciler) lookAtAgents(ctx context.Context, servers []agentServer, countNodes func(context.Context) (int64, error), now time.Time) agentLook {
	looks := r.lookAtKonnectivityServers(ctx, servers)
	l := agentLook{agents: make(map[string]*int32, len(servers)), at: now}
	for _, s := range servers {
		l.agents[s.pod] = nil
		if found := looks[s.pod]; found.err == nil {
			l.agents[s.pod] = &found.agents
		}
	}
	if countNodes != nil && needsNodes(servers, l.agents) {
		if n, err := countNodes(ctx); err == nil {
			l.nodes = &n
		}
	}
	return l
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
	if r.agentWatch == nil {
		return
	}
	for _, pod := range r.agentWatch.forget(key) {
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
