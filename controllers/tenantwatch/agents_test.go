package tenantwatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// TestDecideAgents: only ready servers count, and a server without an
// agent matters only in a tenant with nodes.
func TestDecideAgents(t *testing.T) {
	ready := []Server{{Pod: "a", Ready: true}, {Pod: "b", Ready: true}, {Pod: "new"}}
	look := func(nodes *int64, agents ...*int32) AgentLook {
		l := AgentLook{Agents: map[string]*int32{"new": ptr.To[int32](0)}, Nodes: nodes}
		for i, n := range agents {
			l.Agents[ready[i].Pod] = n
		}
		return l
	}
	for _, tc := range []struct {
		name    string
		servers []Server
		look    AgentLook
		status  metav1.ConditionStatus
		reason  string
	}{
		{"every ready server holds agents, the new one waits", ready, look(nil, ptr.To[int32](1), ptr.To[int32](4)), metav1.ConditionTrue, v1alpha1.ReasonAgentsConnected},
		{"none anywhere, no node", ready, look(ptr.To[int64](0), ptr.To[int32](0), ptr.To[int32](0)), metav1.ConditionTrue, v1alpha1.ReasonNoNodes},
		{"one without, nodes", ready, look(ptr.To[int64](2), ptr.To[int32](3), ptr.To[int32](0)), metav1.ConditionFalse, v1alpha1.ReasonNoAgentConnected},
		{"one without, one unknown, nodes", ready, look(ptr.To[int64](2), nil, ptr.To[int32](0)), metav1.ConditionFalse, v1alpha1.ReasonNoAgentConnected},
		{"one without, nodes not counted", ready, look(nil, ptr.To[int32](3), ptr.To[int32](0)), metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted},
		{"one not looked at", ready, look(nil, ptr.To[int32](3), nil), metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted},
		{"no ready server", []Server{{Pod: "new"}}, look(ptr.To[int64](5)), metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideAgents(tc.servers, tc.look)
			if d.Status != tc.status || d.Reason != tc.reason {
				t.Errorf("decided %s %s (%s), want %s %s", d.Status, d.Reason, d.Message, tc.status, tc.reason)
			}
		})
	}
	if NeedsNodes(ready, look(nil, ptr.To[int32](1), ptr.To[int32](1)).Agents) {
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
	w := NewAgents(probe, time.Hour)
	counts := 0
	countNodes := func(context.Context) (int64, error) { counts++; return 4, nil }
	key := client.ObjectKey{Namespace: "ns", Name: "t"}
	servers := []Server{{Pod: "t-a", IP: "10.2.0.1", Ready: true}, {Pod: "t-b", IP: "10.2.0.2", Ready: true}}
	w.Record(key, servers, countNodes, AgentLook{Agents: map[string]*int32{"t-a": ptr.To[int32](2), "t-b": ptr.To[int32](1)}, At: time.Now()})
	defer w.ForgetPods(key)
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
	l, _, ok := w.Recent(key, servers, time.Now())
	if !ok || *l.Agents["t-b"] != 0 || l.Nodes == nil || *l.Nodes != 4 {
		t.Fatalf("the pass it brings does not find the look as recent: %+v %v", l, ok)
	}
	if d := DecideAgents(servers, l); d.Reason != v1alpha1.ReasonNoAgentConnected {
		t.Fatalf("the look decides %s, want %s", d.Reason, v1alpha1.ReasonNoAgentConnected)
	}
	w.Record(key, servers, countNodes, l) // the pass writes it
	if round() {
		t.Fatal("the same look brought the tenant back again")
	}
	// A count that moves, the condition not: only once status's counts
	// are old.
	agents["10.2.0.1"] = 5
	if round() {
		t.Fatal("a count that moved brought the tenant back while status's counts are fresh")
	}
	l.At = time.Now().Add(-agentCountsRefresh - time.Minute)
	w.Record(key, servers, countNodes, l)
	if !round() {
		t.Fatalf("a count that moved did not bring the tenant back once status's counts were %s old", agentCountsRefresh)
	}
	if _, _, ok := w.Recent(key, servers[:1], time.Now()); ok {
		t.Fatal("a look at other pods is taken as recent")
	}
	if gone := w.ForgetPods(key); len(gone) != 2 {
		t.Fatalf("forgetting the tenant returned pods %v, want both", gone)
	}
}
