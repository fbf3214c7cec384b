package tenantwatch

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// KonnectivityProber counts the agents that hold a tunnel to the
// konnectivity server of the apiserver pod at podIP.
type KonnectivityProber func(ctx context.Context, podIP string) (int32, error)

// Server is the konnectivity server of one apiserver pod.
type Server struct {
	Pod, IP string
	// Ready: the pod takes requests, so calls to nodes go through its
	// server.
	Ready bool
}

// AgentLook is what a look at a tenant's servers found.
type AgentLook struct {
	// Agents by pod; nil for a server that could not be looked at.
	Agents map[string]*int32
	// Graced are the pods whose count is the look's before, kept for one
	// look that failed, or found no agent where the one before found some
	// (a server that restarted, an agent that redials): so that one GET
	// does not flip the condition, nor send an event, and back.
	Graced map[string]bool
	// Nodes is the tenant's node count, counted only when a ready server
	// holds no agent (needsNodes); nil when not counted. nodesGraced: the
	// look before's, kept for one count that failed.
	Nodes       *int64
	NodesGraced bool
	At          time.Time
}

// WithGrace keeps, for one look, what before found of a server this look
// could not count, or found without an agent where before found some.
func (l AgentLook) WithGrace(before AgentLook) AgentLook {
	l.Graced = map[string]bool{}
	for pod, n := range l.Agents {
		prev := before.Agents[pod]
		if prev == nil || before.Graced[pod] {
			continue
		}
		if n == nil || (*n == 0 && *prev > 0) {
			l.Agents[pod], l.Graced[pod] = prev, true
		}
	}
	return l
}

// SameCounts reports whether a and b count the same agents at each server.
func SameCounts(a, b map[string]*int32) bool {
	return maps.EqualFunc(a, b, func(x, y *int32) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) })
}

// NeedsNodes: a ready server holds no agent, so whether the tenant has
// nodes decides the condition.
func NeedsNodes(servers []Server, agents map[string]*int32) bool {
	for _, s := range servers {
		if n := agents[s.Pod]; s.Ready && n != nil && *n == 0 {
			return true
		}
	}
	return false
}

// SamePods: a and b are the same pods at the same addresses (whether
// they are ready may differ).
func SamePods(a, b []Server) bool {
	return slices.EqualFunc(a, b, func(x, y Server) bool { return x.Pod == y.Pod && x.IP == y.IP })
}

// AgentsDecision is the KonnectivityAgentsConnected condition.
type AgentsDecision struct {
	Status          metav1.ConditionStatus
	Reason, Message string
}

// DecideAgents says whether the tenant's nodes can be reached through the
// agents, from what l found of servers: only ready servers count (a new
// pod waits for an agent behind its readiness gate).
func DecideAgents(servers []Server, l AgentLook) AgentsDecision {
	var without, unknown []string
	with := 0
	for _, s := range servers {
		if !s.Ready {
			continue
		}
		switch n := l.Agents[s.Pod]; {
		case n == nil:
			unknown = append(unknown, s.Pod)
		case *n == 0:
			without = append(without, s.Pod)
		default:
			with++
		}
	}
	switch {
	case len(without) > 0 && l.Nodes != nil && *l.Nodes > 0:
		return AgentsDecision{metav1.ConditionFalse, v1alpha1.ReasonNoAgentConnected, fmt.Sprintf(
			"the tenant has nodes but no konnectivity agent holds a tunnel to the konnectivity server of apiserver pod(s) %s: logs, exec, port-forward and webhooks served on nodes fail through them; check that the agents run on the nodes, reach the agents' Service and trust its certificate",
			strings.Join(without, ", "))}
	case len(without) > 0 && l.Nodes != nil:
		return AgentsDecision{metav1.ConditionTrue, v1alpha1.ReasonNoNodes, "the tenant has no node, so no konnectivity agent is expected"}
	case len(without) > 0:
		return AgentsDecision{metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted, fmt.Sprintf(
			"the konnectivity server of apiserver pod(s) %s holds no agent's tunnel, and the tenant's nodes could not be counted in etcd", strings.Join(without, ", "))}
	case len(unknown) > 0:
		return AgentsDecision{metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted, fmt.Sprintf(
			"the konnectivity server of apiserver pod(s) %s could not be looked at", strings.Join(unknown, ", "))}
	case with == 0:
		return AgentsDecision{metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted, "no apiserver pod is ready"}
	}
	// No counts here: they move with every node, and status.konnectivity
	// and the gauge carry them.
	return AgentsDecision{metav1.ConditionTrue, v1alpha1.ReasonAgentsConnected, "agents hold tunnels to the konnectivity server of every ready apiserver pod"}
}

// CountWithGrace counts the tenant's nodes; a count that fails is before's
// for once (graced).
func CountWithGrace(ctx context.Context, countNodes func(context.Context) (int64, error), before AgentLook) (nodes *int64, graced bool) {
	if n, err := countNodes(ctx); err == nil {
		return &n, false
	}
	if before.Nodes != nil && !before.NodesGraced {
		return before.Nodes, true
	}
	return nil, false
}

// RecordAgents sets the agents gauge of each server looked at; a
// server that could not be looked at has no series.
func RecordAgents(key types.NamespacedName, servers []Server, l AgentLook) {
	for _, s := range servers {
		if n := l.Agents[s.Pod]; n != nil {
			KonnectivityAgents.WithLabelValues(key.Namespace, key.Name, s.Pod).Set(float64(*n))
		} else {
			KonnectivityAgents.DeleteLabelValues(key.Namespace, key.Name, s.Pod)
		}
	}
}
