package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// agentsOf is status.konnectivity.servers as "pod=agents" (agents "?"
// when unset), with "(not ready)" after a pod that is not, and the
// condition's status and reason.
func agentsOf(t *testing.T, cfg *v1alpha1.ApiServerConfig) (servers, condition string) {
	t.Helper()
	got := &v1alpha1.ApiServerConfig{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(cfg), got); err != nil {
		t.Fatal(err)
	}
	if k := got.Status.Konnectivity; k != nil {
		var parts []string
		for _, s := range k.Servers {
			n := "?"
			if s.Agents != nil {
				n = fmt.Sprint(*s.Agents)
			}
			if !s.Ready {
				n += " (not ready)"
			}
			parts = append(parts, s.Pod+"="+n)
		}
		servers = strings.Join(parts, " ")
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionKonnectivityAgentsConnected); c != nil {
		condition = string(c.Status) + " " + c.Reason
	}
	return servers, condition
}

func waitAgents(t *testing.T, cfg *v1alpha1.ApiServerConfig, servers, condition string) {
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("status says %q and %q", servers, condition), func() error {
		if s, c := agentsOf(t, cfg); s != servers || c != condition {
			return fmt.Errorf("status says %q and %q", s, c)
		}
		return nil
	})
}

// TestApiServerConfigReconciler_ReportsTheKonnectivityAgentsOfEachApiserver:
// status and the metric count the agents of each apiserver's konnectivity
// server as they come and go on the tenant's side (which brings no event:
// the agent watch finds it), and the condition says when the tenant has
// nodes that a ready apiserver cannot reach.
func TestApiServerConfigReconciler_ReportsTheKonnectivityAgentsOfEachApiserver(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := konnectivityTenant(ns, "agents")
	createReady(t, cfg)
	_, a := gatedPod(t, cfg, "agents-a", "10.1.3.1", corev1.ConditionTrue, time.Now())
	_, b := gatedPod(t, cfg, "agents-b", "10.1.3.2", corev1.ConditionTrue, time.Now())
	a.agents.Store(2)
	b.agents.Store(3)
	waitAgents(t, cfg, "agents-a=2 agents-b=3", "True "+v1alpha1.ReasonAgentsConnected)
	var m dto.Metric
	if err := konnectivityAgents.WithLabelValues(ns, "agents", "agents-b").Write(&m); err != nil || m.GetGauge().GetValue() != 3 {
		t.Errorf("apiserver_operator_konnectivity_agents of agents-b is %v (%v), want 3", m.GetGauge().GetValue(), err)
	}

	// A server whose agents left, in a tenant without nodes: nothing to
	// reach.
	b.agents.Store(0)
	waitAgents(t, cfg, "agents-a=2 agents-b=0", "True "+v1alpha1.ReasonNoNodes)

	// The tenant's nodes register: agents-b cannot reach them.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{env.ControlPlane.Etcd.URL.String()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	for i := range 3 {
		if _, err := cli.Put(ctx, fmt.Sprintf("%s/minions/node-%d", cfg.Spec.Etcd.Prefix, i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	waitAgents(t, cfg, "agents-a=2 agents-b=0", "False "+v1alpha1.ReasonNoAgentConnected)
	got := &v1alpha1.ApiServerConfig{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cfg), got); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionKonnectivityAgentsConnected)
	if !strings.Contains(c.Message, "has nodes") || !strings.Contains(c.Message, "agents-b") || strings.Contains(c.Message, "agents-a") {
		t.Errorf("the condition's message does not say that the tenant has nodes agents-b alone cannot reach: %q", c.Message)
	}
	if r := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue {
		t.Errorf("Ready is %+v: the apiservers serve, the agents are the tenant's", r)
	}
	noAgentEvents := func() (int, error) {
		events := &eventsv1.EventList{}
		if err := env.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			return 0, err
		}
		n := 0
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == v1alpha1.ReasonNoAgentConnected && strings.Contains(e.Note, "agents-b") {
				n++
				if e.Series != nil {
					n = n - 1 + int(e.Series.Count)
				}
			}
		}
		return n, nil
	}
	eventually(t, 20*time.Second, "a Warning event says which apiserver reaches no node", func() error {
		if n, err := noAgentEvents(); err != nil || n == 0 {
			return fmt.Errorf("%d events about agents-b (%w)", n, err)
		}
		return nil
	})

	// A server that cannot be looked at has no count and no series.
	b.down.Store(true)
	waitAgents(t, cfg, "agents-a=2 agents-b=?", "Unknown "+v1alpha1.ReasonAgentsNotCounted)
	if konnectivityAgents.DeleteLabelValues(ns, "agents", "agents-b") {
		t.Error("apiserver_operator_konnectivity_agents has a series for agents-b, whose server could not be looked at")
	}
	b.down.Store(false)
	b.agents.Store(1)
	waitAgents(t, cfg, "agents-a=2 agents-b=1", "True "+v1alpha1.ReasonAgentsConnected)
	if n, err := noAgentEvents(); err != nil || n != 1 {
		t.Errorf("%d Warning events %s about agents-b (%v), want 1: one for its fall from True", n, v1alpha1.ReasonNoAgentConnected, err)
	}

	// Without spec.konnectivity, status, condition and series go.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cfg), got); err != nil {
		t.Fatal(err)
	}
	got.Spec.Konnectivity = nil
	if err := env.Client.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	waitAgents(t, cfg, "", "")
	if konnectivityAgents.DeleteLabelValues(ns, "agents", "agents-a") {
		t.Error("apiserver_operator_konnectivity_agents keeps a series of a tenant without spec.konnectivity")
	}
}

// TestDecideAgents: only ready servers count, and a server without an
// agent matters only in a tenant with nodes.
func TestDecideAgents(t *testing.T) {
	ready := []agentServer{{pod: "a", ready: true}, {pod: "b", ready: true}, {pod: "new"}}
	look := func(nodes *int64, agents ...*int32) agentLook {
		l := agentLook{agents: map[string]*int32{"new": ptr.To[int32](0)}, nodes: nodes}
		for i, n := range agents {
			l.agents[ready[i].pod] = n
		}
		return l
	}
	for _, tc := range []struct {
		name    string
		servers []agentServer
		look    agentLook
		status  metav1.ConditionStatus
		reason  string
	}{
		{"every ready server holds agents, the new one waits", ready, look(nil, ptr.To[int32](1), ptr.To[int32](4)), metav1.ConditionTrue, v1alpha1.ReasonAgentsConnected},
		{"none anywhere, no node", ready, look(ptr.To[int64](0), ptr.To[int32](0), ptr.To[int32](0)), metav1.ConditionTrue, v1alpha1.ReasonNoNodes},
		{"one without, nodes", ready, look(ptr.To[int64](2), ptr.To[int32](3), ptr.To[int32](0)), metav1.ConditionFalse, v1alpha1.ReasonNoAgentConnected},
		{"one without, one unknown, nodes", ready, look(ptr.To[int64](2), nil, ptr.To[int32](0)), metav1.ConditionFalse, v1alpha1.ReasonNoAgentConnected},
		{"one without, nodes not counted", ready, look(nil, ptr.To[int32](3), ptr.To[int32](0)), metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted},
		{"one not looked at", ready, look(nil, ptr.To[int32](3), nil), metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted},
		{"no ready server", []agentServer{{pod: "new"}}, look(ptr.To[int64](5)), metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideAgents(tc.servers, tc.look)
			if d.status != tc.status || d.reason != tc.reason {
				t.Errorf("decided %s %s (%s), want %s %s", d.status, d.reason, d.message, tc.status, tc.reason)
			}
		})
	}
	if needsNodes(ready, look(nil, ptr.To[int32](1), ptr.To[int32](1)).agents) {
		t.Error("nodes are counted while every ready server holds an agent (the new one, not ready, holds none)")
	}
}

// TestAgentWatch_BringsBackATenantWhoseAgentsChanged: the watch brings a
// tenant back when its condition would change (a server that lost its
// agents on two looks running, not one), or when the counts status shows
// changed and are older than agentCountsRefresh; it counts the tenant's
// nodes only when a ready server holds no agent.
func TestAgentWatch_BringsBackATenantWhoseAgentsChanged(t *testing.T) {
	agents := map[string]int32{"10.2.0.1": 2, "10.2.0.2": 1}
	down := map[string]bool{}
	probe := func(_ context.Context, ip string) (int32, error) {
		if down[ip] {
			return 0, fmt.Errorf("%s does not answer", ip)
		}
		return agents[ip], nil
	}
	w := newAgentWatch(probe, time.Hour)
	counts := 0
	countNodes := func(context.Context) (int64, error) { counts++; return 4, nil }
	key := client.ObjectKey{Namespace: "ns", Name: "t"}
	servers := []agentServer{{pod: "t-a", ip: "10.2.0.1", ready: true}, {pod: "t-b", ip: "10.2.0.2", ready: true}}
	w.record(key, servers, countNodes, agentLook{agents: map[string]*int32{"t-a": ptr.To[int32](2), "t-b": ptr.To[int32](1)}, at: time.Now()})
	defer w.forget(key)
	round := func() bool {
		t.Helper()
		w.Round(context.Background())
		select {
		case e := <-w.Events():
			if got := client.ObjectKeyFromObject(e.Object); got != key {
				t.Fatalf("the watch brought back %v, want %v", got, key)
			}
			return true
		default:
			return false
		}
	}

	if round() || counts != 0 {
		t.Fatalf("a look that found what the pass wrote brought the tenant back (or counted its nodes %d times)", counts)
	}
	if w.CompletedRounds() != 1 {
		t.Fatalf("%d rounds completed, want 1", w.CompletedRounds())
	}
	// One look without agents (a server that restarted) or one that
	// fails changes nothing.
	agents["10.2.0.2"] = 0
	if round() || counts != 0 {
		t.Fatalf("one look that found no agent at t-b brought the tenant back (nodes counted %d times)", counts)
	}
	agents["10.2.0.2"] = 1
	down["10.2.0.1"] = true
	if round() {
		t.Fatal("one look at t-a that failed brought the tenant back")
	}
	down["10.2.0.1"] = false
	// Two looks running without agents: the tenant comes back.
	agents["10.2.0.2"] = 0
	round()
	if !round() || counts != 1 {
		t.Fatalf("a server without agents on two looks did not bring the tenant back with its nodes counted (%d counts)", counts)
	}
	l, _, ok := w.recent(key, servers, time.Now())
	if !ok || *l.agents["t-b"] != 0 || l.nodes == nil || *l.nodes != 4 {
		t.Fatalf("the pass it brings does not find the look as recent: %+v %v", l, ok)
	}
	if d := decideAgents(servers, l); d.reason != v1alpha1.ReasonNoAgentConnected {
		t.Fatalf("the look decides %s, want %s", d.reason, v1alpha1.ReasonNoAgentConnected)
	}
	w.record(key, servers, countNodes, l) // the pass writes it
	if round() {
		t.Fatal("the same look brought the tenant back again")
	}
	// A count that moves, the condition not: only once status's counts
	// are old.
	agents["10.2.0.1"] = 5
	if round() {
		t.Fatal("a count that moved brought the tenant back while status's counts are fresh")
	}
	l.at = time.Now().Add(-agentCountsRefresh - time.Minute)
	w.record(key, servers, countNodes, l)
	if !round() {
		t.Fatalf("a count that moved did not bring the tenant back once status's counts were %s old", agentCountsRefresh)
	}
	if _, _, ok := w.recent(key, servers[:1], time.Now()); ok {
		t.Fatal("a look at other pods is taken as recent")
	}
	if gone := w.forget(key); len(gone) != 2 {
		t.Fatalf("forgetting the tenant returned pods %v, want both", gone)
	}
}
