//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// Scenario 3: kubectl scale 1 -> 3 -> 1 while a client calls the tenant
// through its Service: no request fails; the disruption budget and the
// tenant's own endpoints follow. Then a scale to 2 waits while the tenant
// is paused, and is done once it is resumed.
func TestOperator_KubectlScaleFailsNoRequest(t *testing.T) {
	c, cfg, tenant := startTenant(t, "scaled", nil)
	ns := cfg.Namespace

	loop := startClientLoop(func(ctx context.Context) error {
		_, err := tenant.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		return err
	}, 100*time.Millisecond)
	for _, replicas := range []int{3, 1} {
		start := time.Now()
		managementKubectl(t, "-n", ns, "scale", "asc/scaled", fmt.Sprintf("--replicas=%d", replicas))
		waitReady(t, c, cfg, 3*time.Minute)
		t.Logf("kubectl scale --replicas=%d -> Ready in %s", replicas, time.Since(start).Round(100*time.Millisecond))

		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName("scaled")}, &policyv1.PodDisruptionBudget{})
		if replicas > 1 && err != nil {
			t.Errorf("no disruption budget with %d apiservers: %v", replicas, err)
		}
		if replicas == 1 && !apierrors.IsNotFound(err) {
			t.Errorf("a disruption budget remains with one apiserver: %v", err)
		}
		// The lease reconciler publishes every live apiserver in the
		// tenant's kubernetes endpoints.
		var addresses int
		for range 120 {
			eps, err := tenant.CoreV1().Endpoints("default").Get(context.Background(), "kubernetes", metav1.GetOptions{})
			addresses = 0
			if err == nil {
				for _, s := range eps.Subsets {
					addresses += len(s.Addresses)
				}
			}
			if addresses == replicas {
				break
			}
			time.Sleep(time.Second)
		}
		if addresses != replicas {
			t.Errorf("the tenant's kubernetes endpoints list %d apiservers, want %d", addresses, replicas)
		}
	}

	// Paused, the tenant takes no change: a scale waits, kubectl get says
	// so, and the tenant serves on; resumed, the scale is done.
	managementKubectl(t, "-n", ns, "annotate", "asc/scaled", v1alpha1.PausedAnnotation+"=true")
	waitConditions(t, c, cfg, map[string]string{v1alpha1.ConditionPaused: "True|nothing waits"}, 30*time.Second)
	managementKubectl(t, "-n", ns, "scale", "asc/scaled", "--replicas=2")
	waitConditions(t, c, cfg, map[string]string{v1alpha1.ConditionPaused: "True|generation"}, 30*time.Second)
	lines := strings.Split(strings.TrimSpace(managementKubectl(t, "-n", ns, "get", "asc/scaled")), "\n")
	if header, row := strings.Fields(lines[0]), strings.Fields(lines[len(lines)-1]); len(header) != len(row) || !slices.Contains(header, "PAUSED") || row[slices.Index(header, "PAUSED")] != "True" {
		t.Errorf("kubectl get asc does not print PAUSED True:\n%s", strings.Join(lines, "\n"))
	}
	d := &appsv1.Deployment{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName("scaled")}, d); err != nil || *d.Spec.Replicas != 1 {
		t.Errorf("the paused tenant was scaled: %v replicas (%v)", d.Spec.Replicas, err)
	}
	managementKubectl(t, "-n", ns, "annotate", "asc/scaled", v1alpha1.PausedAnnotation+"-")
	start := time.Now()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName("scaled")}, d); err == nil && *d.Spec.Replicas == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the scale asked for during the pause was not done within 3 minutes of the resume")
		}
	}
	waitReady(t, c, cfg, 3*time.Minute)
	t.Logf("resumed: the scale asked for during the pause done, Ready in %s", time.Since(start).Round(100*time.Millisecond))
	loop.finish(t, "client through the Service during scaling and a pause")
}
