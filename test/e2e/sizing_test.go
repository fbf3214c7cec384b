//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// replicaSets counts the ReplicaSets of cfg's Deployment: one per rollout.
func replicaSets(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) int {
	t.Helper()
	list := &appsv1.ReplicaSetList{}
	if err := c.List(context.Background(), list, client.InNamespace(cfg.Namespace), client.MatchingLabels(apiserver.SelectorLabels(cfg.Name))); err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

func deploymentArg(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, env string) string {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}, d); err != nil {
		t.Fatal(err)
	}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == env {
			return e.Value
		}
	}
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if len(a) > len(env)+3 && a[:len(env)+3] == "--"+env+"=" {
			return a[len(env)+3:]
		}
	}
	return ""
}

// expectSettled checks that the sizing settled after want rollouts. Ready
// for the current generation means the operator's last pass saw the rollout
// complete and changed nothing (a change would have made the rollout
// incomplete again). With Auto sizing it also waits for the operator to
// count the tenant's nodes again past the minimum interval between
// resizes, when another resize would have happened.
func expectSettled(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, want int) {
	t.Helper()
	waitReady(t, c, cfg, 3*time.Minute)
	got := &v1alpha1.ApiServerConfig{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), got); err != nil {
		t.Fatal(err)
	}
	if s := got.Status.CacheSizing; got.Spec.CacheSizing.Policy == v1alpha1.CacheSizingAuto && s != nil && s.LastResizeTime != nil {
		after := s.LastResizeTime.Add(got.Spec.CacheSizing.MinResizeInterval.Duration + got.Spec.CacheSizing.ObservationInterval.Duration)
		deadline := time.Now().Add(time.Minute)
		for {
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), got); err != nil {
				t.Fatal(err)
			}
			if o := got.Status.CacheSizing.ObservationTime; o != nil && o.After(after) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the operator did not count the tenant's nodes again after %s: %+v", after, got.Status.CacheSizing)
			}
			time.Sleep(time.Second)
		}
		waitReady(t, c, cfg, 3*time.Minute)
	}
	if n := replicaSets(t, c, cfg); n != want {
		t.Fatalf("%d rollouts where %d were expected: the sizing keeps moving", n, want)
	}
}

// Scenario 5: a higher memory limit gives exactly one rollout with the new
// sizing, then quiet; under Auto, the nodes of the tenant, counted in etcd,
// give one resize, then quiet while the operator keeps observing; with a
// maintenance window, the next resize waits for it, and is done when it
// opens.
func TestOperator_CacheSizingRollsOnceAndSettles(t *testing.T) {
	// Mostly waiting for rollouts, the operator's observations and the
	// maintenance window's minute, and it counts no failed request: it
	// runs beside the other such tests (kstatus_test.go, upgrade_test.go)
	// once the sequential ones, which count failed requests, are done.
	t.Parallel()
	installOperator(t)
	c := ctrlClient(t)
	ns := tenantNamespace(t)
	cfg := localTenant(t, ns, "sized")
	cfg.Spec.CacheSizing.ObservationInterval = &metav1.Duration{Duration: 5 * time.Second}
	cfg.Spec.CacheSizing.MinResizeInterval = &metav1.Duration{Duration: 5 * time.Second}
	if err := c.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, cfg, 3*time.Minute)
	rollouts := replicaSets(t, c, cfg)
	before := deploymentArg(t, c, cfg, "GOMEMLIMIT")

	// A higher memory limit: a new GOMEMLIMIT and capacity, one rollout.
	patch := `{"spec":{"resources":{"limits":{"memory":"64Gi"},"requests":{"memory":"256Mi"}}}}`
	managementKubectl(t, "-n", ns, "patch", "asc/sized", "--type=merge", "-p", patch)
	waitReady(t, c, cfg, 3*time.Minute)
	after := deploymentArg(t, c, cfg, "GOMEMLIMIT")
	limit := resource.MustParse("64Gi")
	want := fmt.Sprint(limit.Value() / 100 * apiserver.GoMemLimitPercent)
	if after != want || after == before {
		t.Fatalf("GOMEMLIMIT went from %s to %s, want %s", before, after, want)
	}
	rollouts++
	if got := replicaSets(t, c, cfg); got != rollouts {
		t.Fatalf("raising the memory limit made %d rollouts, want 1", got-rollouts+1)
	}
	expectSettled(t, c, cfg, rollouts)

	// 600 nodes join the tenant; switched to Auto, the operator counts them
	// in etcd and resizes once.
	tenant, _ := tenantClient(t, c, cfg)
	waitReachable(t, tenant)
	start := time.Now()
	for i := range 600 {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%03d", i)}}
		if _, err := tenant.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating node %d in the tenant: %v", i, err)
		}
	}
	t.Logf("600 Node objects created in the tenant in %s", time.Since(start).Round(100*time.Millisecond))
	managementKubectl(t, "-n", ns, "patch", "asc/sized", "--type=merge", "-p", `{"spec":{"cacheSizing":{"policy":"Auto"}}}`)
	deadline := time.Now().Add(2 * time.Minute)
	// 600 nodes: 400 + 2600 x 100/4500, rounded to tens.
	for deploymentArg(t, c, cfg, "max-requests-inflight") != "460" {
		if time.Now().After(deadline) {
			t.Fatalf("not resized for 600 nodes: --max-requests-inflight=%s", deploymentArg(t, c, cfg, "max-requests-inflight"))
		}
		time.Sleep(time.Second)
	}
	waitReady(t, c, cfg, 3*time.Minute)
	got := &v1alpha1.ApiServerConfig{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), got); err != nil {
		t.Fatal(err)
	}
	if s := got.Status.CacheSizing; s == nil || s.SizedForNodes == nil || *s.SizedForNodes != 600 || s.EstimatedClusterSize != 600 {
		t.Fatalf("status does not show the sizing for 600 nodes: %+v", got.Status.CacheSizing)
	}
	rollouts++
	if n := replicaSets(t, c, cfg); n != rollouts {
		t.Fatalf("600 new nodes made %d rollouts, want 1", n-rollouts+1)
	}
	expectSettled(t, c, cfg, rollouts)

	// With a maintenance window 12 hours away, 400 more nodes wait for it:
	// listed in status.maintenance, the pods untouched. Moved to the next
	// minute (on the real clock), the window opens and the resize is done
	// at once, in one rollout.
	later := time.Now().UTC().Add(12 * time.Hour).Truncate(time.Minute)
	setWindow := func(start time.Time) {
		window := fmt.Sprintf(`{"spec":{"maintenance":{"windows":[{"start":%q,"duration":"30m"}]}}}`, start.Format("15:04"))
		managementKubectl(t, "-n", ns, "patch", "asc/sized", "--type=merge", "-p", window)
	}
	setWindow(later)
	for i := 600; i < 1000; i++ {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%04d", i)}}
		if _, err := tenant.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating node %d in the tenant: %v", i, err)
		}
	}
	waitMaintenance(t, c, cfg, "lists the resize for 1000 nodes as pending", time.Now().Add(2*time.Minute), func(m *v1alpha1.MaintenanceStatus) bool {
		return !m.Open && m.NextWindow != nil && m.NextWindow.Equal(&metav1.Time{Time: later}) && len(m.Pending) == 1 &&
			strings.HasPrefix(m.Pending[0], "a cache resize for 1000 nodes")
	})
	if got := deploymentArg(t, c, cfg, "max-requests-inflight"); got != "460" || replicaSets(t, c, cfg) != rollouts {
		t.Fatalf("resized before the maintenance window: --max-requests-inflight=%s, %d rollouts", got, replicaSets(t, c, cfg))
	}
	opens := time.Now().UTC().Add(10 * time.Second).Truncate(time.Minute).Add(time.Minute)
	setWindow(opens)
	// 1000 nodes (within the 1 092 that 64Gi carry): 400 + 2600 x
	// 500/4500, rounded to tens.
	for deadline := opens.Add(time.Minute); deploymentArg(t, c, cfg, "max-requests-inflight") != "690"; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not resized within a minute of the window's opening at %s: --max-requests-inflight=%s", opens, deploymentArg(t, c, cfg, "max-requests-inflight"))
		}
	}
	resized := time.Now()
	if resized.Before(opens) {
		t.Fatalf("resized at %s, before the window opened at %s", resized, opens)
	}
	t.Logf("the resize that waited for the maintenance window was applied %s after it opened", resized.Sub(opens).Round(100*time.Millisecond))
	waitMaintenance(t, c, cfg, "says the window is open with nothing pending", time.Now().Add(3*time.Minute), func(m *v1alpha1.MaintenanceStatus) bool {
		return m.Open && len(m.Pending) == 0
	})
	rollouts++
	expectSettled(t, c, cfg, rollouts)
}

// waitMaintenance waits until status.maintenance satisfies done.
func waitMaintenance(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, what string, deadline time.Time, done func(*v1alpha1.MaintenanceStatus) bool) {
	t.Helper()
	got := &v1alpha1.ApiServerConfig{}
	for ; time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), got); err == nil && got.Status.Maintenance != nil && done(got.Status.Maintenance) {
			return
		}
	}
	t.Fatalf("status.maintenance never %s by %s: %+v", what, deadline.Format(time.RFC3339), got.Status.Maintenance)
}
