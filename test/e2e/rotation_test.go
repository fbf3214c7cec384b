//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// rotationPhase is the phase of a rotation in status.
func rotationPhase(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, name string) string {
	t.Helper()
	got := &v1alpha1.ApiServerConfig{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), got); err != nil {
		t.Fatal(err)
	}
	for _, r := range got.Status.Rotations {
		if r.Name == name {
			return r.Phase
		}
	}
	return ""
}

func waitPhase(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, name, phase string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if rotationPhase(t, c, cfg, name) == phase {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("the %s rotation did not reach %s within %s (at %s)", name, phase, timeout, rotationPhase(t, c, cfg, name))
}

// podUIDs are the apiserver pods of cfg, with their containers' restarts.
func podUIDs(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) map[string]int32 {
	t.Helper()
	pods := apiserverPods(t, c, cfg)
	out := map[string]int32{}
	for _, p := range pods {
		// Every container's restarts, the etcd dialer sidecar's too.
		out[string(p.UID)] = 0
		for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			out[string(p.UID)] += s.RestartCount
		}
	}
	return out
}

// refreshingClient rebuilds its client from the admin kubeconfig Secret
// every few seconds, as a platform that distributes kubeconfigs does: it
// follows the CA bundle the operator publishes.
type refreshingClient struct {
	c    client.Client
	cfg  *v1alpha1.ApiServerConfig
	mu   sync.Mutex
	cs   *kubernetes.Clientset
	rc   *rest.Config
	last time.Time
}

func (r *refreshingClient) get() (*kubernetes.Clientset, *rest.Config, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cs == nil || time.Since(r.last) > 3*time.Second {
		cs, rc, err := tenantClientE(r.c, r.cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("refreshing the admin kubeconfig: %w", err)
		}
		r.cs, r.rc, r.last = cs, rc, time.Now()
	}
	return r.cs, r.rc, nil
}

// refreshedAfter reports whether the client was rebuilt after at.
func (r *refreshingClient) refreshedAfter(at time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cs != nil && r.last.After(at)
}

// waitCallsAfterRefresh waits, bounded by timeout, until admin has read
// the admin kubeconfig again after since, then until each loop has made
// three more calls: at least two of them with what was read.
func waitCallsAfterRefresh(t testing.TB, admin *refreshingClient, since time.Time, timeout time.Duration, loops ...*clientLoop) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !admin.refreshedAfter(since) {
		if time.Now().After(deadline) {
			t.Fatalf("the clients did not read the admin kubeconfig again within %s", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := make([]int64, len(loops))
	for i, l := range loops {
		want[i] = l.calls() + 3
	}
	for i, l := range loops {
		for l.calls() < want[i] {
			if time.Now().After(deadline) {
				t.Fatalf("a client made %d of 3 calls after the admin kubeconfig was read again, within %s", 3-(want[i]-l.calls()), timeout)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// Scenario 4: serving certificate renewal, CA rotation and service-account
// key rotation while clients call the tenant and exec into a pod of a node
// behind NAT, through konnectivity: no request or exec fails, the serving
// renewal restarts nothing, the agent is never restarted, and a token
// issued before the service-account key rotation keeps working through the
// overlap. Without the proxy, logs, exec and port-forward fail, which
// proves that they took the tunnel.
func TestOperator_RotationsFailNoRequest(t *testing.T) {
	c, cfg, tenant := startTenant(t, "rotated", func(cfg *v1alpha1.ApiServerConfig) {
		cfg.Spec.MasterCount = ptrTo[int32](2)
		withKonnectivity(cfg)
	})
	ns := cfg.Namespace
	ctx := context.Background()

	// A node behind NAT, its agent and a workload: logs, exec and
	// port-forward through the tenant reach it.
	manifests := publishAgentPorts(t, c, cfg)
	// Status counts the agents: none, and no node to reach yet.
	waitConditions(t, c, cfg, map[string]string{v1alpha1.ConditionKonnectivityAgentsConnected: "True|no node"}, time.Minute)
	node := startNATNode(t, c, cfg, tenant)
	// A node no agent serves: the condition says so.
	waitConditions(t, c, cfg, map[string]string{v1alpha1.ConditionKonnectivityAgentsConnected: "False|has nodes but no konnectivity agent"}, time.Minute)
	agentStart := time.Now()
	agent := applyAgents(t, c, cfg, tenant, manifests)
	t.Logf("konnectivity agent on the NAT node Ready in %s", time.Since(agentStart).Round(100*time.Millisecond))
	runNodeApp(t, tenant)
	took := waitNodeCalls(t, c, cfg, 2*time.Minute)
	t.Logf("kubectl logs, exec and port-forward to a pod of the NAT node work through the tenant (after %s)", took.Round(100*time.Millisecond))
	waitConditions(t, c, cfg, map[string]string{v1alpha1.ConditionKonnectivityAgentsConnected: "True|agents hold tunnels"}, time.Minute)
	waitAgentCounts(t, c, cfg, 1, time.Minute)

	// A token issued before any rotation, and a client using it.
	if _, err := tenant.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "long-lived"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := tenant.CoreV1().ServiceAccounts("default").CreateToken(ctx, "long-lived",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo[int64](7200)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admin := &refreshingClient{c: c, cfg: cfg}
	adminLoop := startClientLoop(func(ctx context.Context) error {
		cs, _, err := admin.get()
		if err != nil {
			return err
		}
		_, err = cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		return err
	}, 200*time.Millisecond)
	tokenLoop := startClientLoop(func(ctx context.Context) error {
		_, current, err := admin.get()
		if err != nil {
			return err
		}
		tc := rest.AnonymousClientConfig(current)
		tc.BearerToken = tr.Status.Token
		cs, err := kubernetes.NewForConfig(tc)
		if err != nil {
			return err
		}
		r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if r.Status.UserInfo.Username != "system:serviceaccount:default:long-lived" {
			return fmt.Errorf("the token authenticates as %q", r.Status.UserInfo.Username)
		}
		return nil
	}, 500*time.Millisecond)
	execLoop := startClientLoop(func(ctx context.Context) error {
		_, current, err := admin.get()
		if err != nil {
			return err
		}
		out, err := execIn(ctx, current, "/nodeapp", "echo", "exec", "through", "the", "tunnel")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "exec through the tunnel" {
			return fmt.Errorf("exec answered %q", out)
		}
		return nil
	}, 500*time.Millisecond)
	// The platform gives the node the CA bundle the operator publishes,
	// as it gives it to clients: the node verifies the apiservers' kubelet
	// client certificate with it.
	var followErr atomic.Value
	stopFollowing := sync.OnceFunc(startPolling(2*time.Second, func(ctx context.Context) {
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.CASecretName(cfg.Name)}, s); err == nil {
			if err := node.SetClientCA(s.Data[apiserver.CABundleKey]); err != nil {
				followErr.Store(err.Error())
			}
		}
	}))
	// Before the node is stopped, whatever ends the test.
	t.Cleanup(stopFollowing)

	// Serving certificate: a new SAN renews it; kube-apiserver re-reads it,
	// and the konnectivity server's certificate does not name it. Ready for
	// the new generation means the pass that renewed it applied the
	// Deployment and saw it rolled out: no new template, no restart.
	pods := podUIDs(t, c, cfg)
	managementKubectl(t, "-n", ns, "patch", "asc/rotated", "--type=merge", "-p", `{"spec":{"serving":{"extraSANs":["rotated.example.com"]}}}`)
	waitReady(t, c, cfg, 3*time.Minute)
	if after := podUIDs(t, c, cfg); fmt.Sprint(after) != fmt.Sprint(pods) {
		t.Errorf("renewing the serving certificate restarted apiservers: %v -> %v", pods, after)
	}

	// The service-account key (overlap 24h by default: the old key stays
	// trusted past this test, as it should) and the CA (trusted beside the
	// old one, then signing; leaves reissued), asked for at once: each
	// moves by one phase per pass once what its last phase published rolled
	// out, so the key's rollouts run while the new CA waits to be trusted
	// everywhere (--ca-trust-propagation) before it signs.
	start := time.Now()
	managementKubectl(t, "-n", ns, "annotate", "asc/rotated", v1alpha1.RotateServiceAccountKeyAnnotation+"=e2e", v1alpha1.RotateCAAnnotation+"=e2e")
	waitPhase(t, c, cfg, "service-account-key", "SignWithNew", 5*time.Minute)
	t.Logf("service-account key rotation in SignWithNew after %s", time.Since(start).Round(time.Second))
	waitPhase(t, c, cfg, "ca", "SignWithNew", 6*time.Minute)
	t.Logf("CA rotation in SignWithNew after %s", time.Since(start).Round(time.Second))
	waitReady(t, c, cfg, 3*time.Minute)
	t.Logf("both rotations in SignWithNew and rolled out in %s", time.Since(start).Round(time.Second))
	// The clients go on past the rotations, with what they fetch after
	// them: the admin kubeconfig read again, then a few calls of each.
	waitCallsAfterRefresh(t, admin, time.Now(), time.Minute, adminLoop, tokenLoop, execLoop)

	adminLoop.finish(t, "admin client during the rotations")
	tokenLoop.finish(t, "client with a token issued before the rotations")
	execLoop.finish(t, "exec into the NAT node's pod through konnectivity during the rotations")
	stopFollowing()
	if err := followErr.Load(); err != nil {
		t.Errorf("giving the node the tenant's CA bundle: %v", err)
	}
	current, _, err := admin.get()
	if err != nil {
		t.Fatal(err)
	}
	if n := restartsOf(ctx, current, agent); n != 0 {
		t.Errorf("the konnectivity agent restarted during the rotations (restarts %d, -1: replaced)", n)
	}

	// Without the proxy, the apiservers have no way to the node.
	managementKubectl(t, "-n", ns, "patch", "asc/rotated", "--type=json", "-p", `[{"op":"remove","path":"/spec/konnectivity"}]`)
	waitReady(t, c, cfg, 3*time.Minute)
	waitNoKonnectivityServer(t, c, cfg, 3*time.Minute)
	if got := getTenant(t, c, cfg); got.Status.Konnectivity != nil || meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionKonnectivityAgentsConnected) != nil {
		t.Errorf("without spec.konnectivity, status still counts agents: %+v, %+v", got.Status.Konnectivity, meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionKonnectivityAgentsConnected))
	}
	failed := nodeCalls(t, c, cfg, 6*time.Second)
	for _, call := range []string{"logs", "exec", "port-forward"} {
		switch err := failed[call]; {
		case err == nil:
			t.Errorf("kubectl %s reached the NAT node's pod without konnectivity: the node is not behind NAT", call)
		case strings.Contains(err.Error(), "No agent available"):
			// The apiservers still sent it to a proxy: not the path
			// without one that this is to show.
			t.Errorf("without konnectivity, kubectl %s still went to a konnectivity server: %v", call, err)
		default:
			t.Logf("without konnectivity, kubectl %s fails: %v", call, err)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
