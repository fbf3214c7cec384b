package tenants

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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantwatch"
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
	if err := tenantwatch.KonnectivityAgents.WithLabelValues(ns, "agents", "agents-b").Write(&m); err != nil || m.GetGauge().GetValue() != 3 {
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
	if tenantwatch.KonnectivityAgents.DeleteLabelValues(ns, "agents", "agents-b") {
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
	if tenantwatch.KonnectivityAgents.DeleteLabelValues(ns, "agents", "agents-a") {
		t.Error("apiserver_operator_konnectivity_agents keeps a series of a tenant without spec.konnectivity")
	}
}
