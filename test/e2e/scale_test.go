//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// Scenario 3: kubectl scale 1 -> 3 -> 1 while a client calls the tenant
// through its Service: no request fails; the disruption budget and the
// tenant's own endpoints follow.
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
	loop.finish(t, "client through the Service during scaling")
}
