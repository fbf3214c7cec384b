package tenants

import (
	"context"
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
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantwatch"
)

// konnectivityServers are the konnectivity servers of pods that run one
// and can be reached, by pod name.
func konnectivityServers(pods []corev1.Pod) []tenantwatch.Server {
	var out []tenantwatch.Server
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || podEnded(pod) || pod.Status.PodIP == "" || !runsKonnectivityServer(pod) {
			continue
		}
		out = append(out, tenantwatch.Server{Pod: pod.Name, IP: pod.Status.PodIP, Ready: podReady(pod)})
	}
	slices.SortFunc(out, func(a, b tenantwatch.Server) int { return strings.Compare(a.Pod, b.Pod) })
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
func (r *Reconciler) reconcileAgents(ctx context.Context, p *pass) error {
	key := client.ObjectKeyFromObject(p.cfg)
	if p.cfg.Spec.Konnectivity == nil || ptr.Deref(p.cfg.Spec.MasterCount, 1) == 0 {
		// Without the proxy, or hibernated: nothing to count.
		p.cfg.Status.Konnectivity = nil
		p.obs.agents = &tenantwatch.AgentsDecision{}
		r.forgetAgents(key)
		return nil
	}
	servers := konnectivityServers(p.pods)
	var countNodes func(context.Context) (int64, error)
	if r.Reach != nil && p.obs.etcdChecked && p.obs.etcdErr == nil {
		countNodes = r.nodeCounter(p)
	}
	var look, before tenantwatch.AgentLook
	ok := false
	if r.memory.agentWatch != nil {
		look, before, ok = r.memory.agentWatch.Recent(key, servers, p.now)
	}
	if !ok {
		look = r.lookAtAgents(ctx, servers, countNodes, p.now, before, p.gateLooks)
	}
	if r.memory.agentWatch != nil {
		for _, pod := range r.memory.agentWatch.Record(key, servers, countNodes, look) {
			tenantwatch.KonnectivityAgents.DeleteLabelValues(key.Namespace, key.Name, pod)
		}
	}
	tenantwatch.RecordAgents(key, servers, look)

	st := &v1alpha1.KonnectivityStatus{}
	for _, s := range servers {
		st.Servers = append(st.Servers, v1alpha1.KonnectivityServerStatus{Pod: s.Pod, Agents: look.Agents[s.Pod], Ready: s.Ready})
	}
	p.cfg.Status.Konnectivity = st
	d := tenantwatch.DecideAgents(servers, look)
	if d.Status == metav1.ConditionFalse {
		// Once per fall from True (or a first look), not on each return
		// from Unknown.
		if prev := meta.FindStatusCondition(p.before.Status.Conditions, v1alpha1.ConditionKonnectivityAgentsConnected); prev == nil || prev.Status == metav1.ConditionTrue {
			r.event(p.cfg, corev1.EventTypeWarning, d.Reason, "Agents", "%s", d.Message)
		}
	}
	p.obs.agents = &d
	return nil
}

// lookAtAgents looks at servers (those the readiness gate looked at in
// this pass are taken from looks), all within one probe timeout, and
// counts the tenant's nodes when needsNodes says so; before gives a
// server or a count that fails once its grace (agentLook.withGrace).
func (r *Reconciler) lookAtAgents(ctx context.Context, servers []tenantwatch.Server, countNodes func(context.Context) (int64, error), now time.Time, before tenantwatch.AgentLook, looks map[string]serverLook) tenantwatch.AgentLook {
	var missing []tenantwatch.Server
	for _, s := range servers {
		if _, ok := looks[s.Pod]; !ok {
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
	l := tenantwatch.AgentLook{Agents: make(map[string]*int32, len(servers)), At: now}
	for _, s := range servers {
		l.Agents[s.Pod] = nil
		if found := looks[s.Pod]; found.err == nil {
			l.Agents[s.Pod] = &found.agents
		}
	}
	l = l.WithGrace(before)
	if countNodes != nil && tenantwatch.NeedsNodes(servers, l.Agents) {
		l.Nodes, l.NodesGraced = tenantwatch.CountWithGrace(ctx, countNodes, before)
	}
	return l
}

// nodeCounter counts the tenant's nodes in its etcd, as Auto sizing does.
func (r *Reconciler) nodeCounter(p *pass) func(context.Context) (int64, error) {
	servers, key, err := countKey(p.c, "nodes")
	tlsConfig := p.etcdTLS
	return func(ctx context.Context) (int64, error) {
		if err != nil {
			return 0, err
		}
		counted, err := r.Reach.Count(ctx, servers, tlsConfig, key)
		if err != nil {
			return 0, err
		}
		return counted[0], nil
	}
}

func (r *Reconciler) forgetAgents(key types.NamespacedName) {
	if r.memory.agentWatch == nil {
		return
	}
	for _, pod := range r.memory.agentWatch.ForgetPods(key) {
		tenantwatch.KonnectivityAgents.DeleteLabelValues(key.Namespace, key.Name, pod)
	}
}

// agentsCondition is KonnectivityAgentsConnected as d decided it.
func agentsCondition(d tenantwatch.AgentsDecision, generation int64) metav1.Condition {
	return metav1.Condition{Type: v1alpha1.ConditionKonnectivityAgentsConnected, Status: d.Status, Reason: d.Reason, Message: d.Message, ObservedGeneration: generation}
}
