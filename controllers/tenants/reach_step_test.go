package tenants

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio/tenantiofake"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantwatch"
)

// reachPass is a pass over a tenant whose events are stored apart, as the
// steps that reach it see it, without a cluster.
func reachPass(t *testing.T) *pass {
	t.Helper()
	cfg := &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "t", UID: "uid"},
		Spec: v1alpha1.ApiServerConfigSpec{Etcd: v1alpha1.EtcdSpec{Servers: []string{"https://etcd-main:2379"}, Prefix: "/tenants/t",
			Overrides: []v1alpha1.EtcdOverride{{Resource: schema.GroupResource{Resource: "events"}.String(), Servers: []string{"https://etcd-events:2379"}}}}},
	}
	c, err := apiserver.Complete(cfg, apiserver.Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	return &pass{cfg: cfg, before: cfg.DeepCopy(), now: time.Now(), c: c, refs: &referenced{}, marked: true}
}

// The etcd step, through the fake: every server answers, or the one that
// does not is named in a failure that comes back within the retry
// interval, whichever of the tenant's etcds it is.
func TestReconcileEtcd_NamesTheServerThatDoesNotAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		down string
	}{
		{"every server answers", ""},
		{"the main etcd is down", "https://etcd-main:2379"},
		{"the events etcd is down", "https://etcd-events:2379"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reach := &tenantiofake.Reach{Down: map[string]bool{tc.down: tc.down != ""}}
			r := &Reconciler{Reach: reach}
			p := reachPass(t)
			if err := r.reconcileEtcd(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			if !p.obs.etcdChecked || reach.Calls("Check") != 1 {
				t.Fatalf("checked %v, %d calls to Check", p.obs.etcdChecked, reach.Calls("Check"))
			}
			if !r.memory.etcdClientTLS.Holds(client.ObjectKeyFromObject(p.cfg)) {
				t.Error("the TLS the pass reached etcd with is not kept for the deletion")
			}
			switch f := p.obs.failure; {
			case tc.down == "" && f != nil:
				t.Fatalf("a failure with every server up: %+v", f)
			case tc.down == "":
			case f == nil || f.reason != v1alpha1.ReasonEtcdUnreachable || !strings.Contains(f.message, tc.down):
				t.Fatalf("failure %+v, want %s naming %s", f, v1alpha1.ReasonEtcdUnreachable, tc.down)
			case p.requeue != etcdRetryInterval:
				t.Fatalf("looked at again after %s, want %s", p.requeue, etcdRetryInterval)
			}
		})
	}
}

// The agents step's look, through the fake: each ready server's agents are
// counted, a server that does not answer is unknown, and the tenant's nodes
// are counted in its etcd only when a ready server holds no agent; the
// condition follows.
func TestLookAtAgents_CountsNodesOnlyWhenAServerHoldsNoAgent(t *testing.T) {
	servers := []tenantwatch.Server{{Pod: "t-a", IP: "10.0.0.1", Ready: true}, {Pod: "t-b", IP: "10.0.0.2", Ready: true}}
	for _, tc := range []struct {
		name       string
		agents     map[string]int32
		nodes      int
		wantCounts bool
		want       metav1.ConditionStatus
		reason     string
	}{
		{"agents everywhere", map[string]int32{"10.0.0.1": 2, "10.0.0.2": 1}, 3, false, metav1.ConditionTrue, v1alpha1.ReasonAgentsConnected},
		{"a server without agents, no node", map[string]int32{"10.0.0.1": 2, "10.0.0.2": 0}, 0, true, metav1.ConditionTrue, v1alpha1.ReasonNoNodes},
		{"a server without agents, nodes", map[string]int32{"10.0.0.1": 2, "10.0.0.2": 0}, 3, true, metav1.ConditionFalse, v1alpha1.ReasonNoAgentConnected},
		{"a server that does not answer", map[string]int32{"10.0.0.1": 2}, 3, false, metav1.ConditionUnknown, v1alpha1.ReasonAgentsNotCounted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reach := &tenantiofake.Reach{Agents: tc.agents, Keys: map[string][]byte{}}
			for i := range tc.nodes {
				reach.Keys["/tenants/t/minions/node-"+string(rune('a'+i))] = []byte("node")
			}
			r := &Reconciler{Reach: reach}
			p := reachPass(t)
			look := r.lookAtAgents(context.Background(), servers, r.nodeCounter(p), p.now, tenantwatch.AgentLook{}, nil)
			if counted := reach.Calls("Count") > 0; counted != tc.wantCounts {
				t.Fatalf("nodes counted: %v, want %v", counted, tc.wantCounts)
			}
			if tc.wantCounts && (look.Nodes == nil || *look.Nodes != int64(tc.nodes)) {
				t.Fatalf("nodes %v, want %d", look.Nodes, tc.nodes)
			}
			if d := tenantwatch.DecideAgents(servers, look); d.Status != tc.want || d.Reason != tc.reason {
				t.Fatalf("decided %s %s (%s), want %s %s", d.Status, d.Reason, d.Message, tc.want, tc.reason)
			}
		})
	}
}
