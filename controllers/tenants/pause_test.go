package tenants

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
)

// waitForPaused waits until status says the tenant is paused and that
// every one of waiting waits (a pass over the pause completed).
func waitForPaused(t *testing.T, cfg *v1alpha1.ApiServerConfig, waiting ...string) *v1alpha1.ApiServerConfig {
	t.Helper()
	var current *v1alpha1.ApiServerConfig
	eventually(t, 20*time.Second, fmt.Sprintf("status says the tenant is paused, waiting for %q", waiting), func() error {
		current = get(t, &v1alpha1.ApiServerConfig{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name}})
		c := conditionOf(current, v1alpha1.ConditionPaused)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonPaused {
			return fmt.Errorf("Paused is %v", c)
		}
		for _, w := range waiting {
			if !strings.Contains(c.Message, w) {
				return fmt.Errorf("Paused says %q", c.Message)
			}
		}
		return nil
	})
	return current
}

// printed is the row `kubectl get asc` prints for cfg.
func printed(t *testing.T, cfg *v1alpha1.ApiServerConfig) map[string]string {
	t.Helper()
	return printedRow(t, "apiserverconfigs", cfg)
}

func printedRow(t *testing.T, resource string, obj client.Object) map[string]string {
	t.Helper()
	return env.PrintedRow(t, resource, obj)
}

func resume(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
	t.Helper()
	current := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name}})
	patch := client.MergeFrom(current.DeepCopy())
	delete(current.Annotations, v1alpha1.PausedAnnotation)
	if err := env.Client.Patch(context.Background(), current, patch); err != nil {
		t.Fatal(err)
	}
}

// TestApiServerConfigReconciler_APausedTenantGetsNoWriteAndCatchesUpWhenResumed:
// while the paused annotation is set, a change of the spec, a requested CA
// rotation and the deletion all wait, and status says so; once it is
// removed, each is done.
func TestApiServerConfigReconciler_APausedTenantGetsNoWriteAndCatchesUpWhenResumed(t *testing.T) {
	ns := namespace(t, nil)
	cfg := tenant(ns, "paused", nil)
	createReady(t, cfg)
	d := waitForDeployment(t, cfg)
	waitForPhase(t, cfg, d, rotation.CA.Name, "Stable")
	waitForPhase(t, cfg, d, rotation.EncryptionKey.Name, "Stable")
	caSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.CASecretName(cfg.Name)}}
	ca := get(t, caSecret).DeepCopy()
	before := get(t, d).DeepCopy()

	annotate(t, cfg, v1alpha1.PausedAnnotation, "true")
	waitForPaused(t, cfg, "nothing waits")
	if row := printed(t, cfg); row["Paused"] != "True" || row["Ready"] != "True" {
		t.Errorf("kubectl get prints %v: want Paused True, and Ready as it was", row)
	}
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) { s.MasterCount = ptr.To[int32](2) })
	annotate(t, cfg, v1alpha1.RotateCAAnnotation, "during-the-pause")
	current := waitForPaused(t, cfg, "generation", "the ca rotation requested by "+v1alpha1.RotateCAAnnotation+"=during-the-pause")
	if current.Status.ObservedGeneration == current.Generation {
		t.Errorf("status.observedGeneration is %d, the generation not applied: kstatus would call the paused change current", current.Status.ObservedGeneration)
	}
	if after := get(t, d); *after.Spec.Replicas != *before.Spec.Replicas || after.Generation != before.Generation {
		t.Errorf("the paused tenant's Deployment changed: %d replicas (generation %d), had %d (generation %d)", *after.Spec.Replicas, after.Generation, *before.Spec.Replicas, before.Generation)
	}
	if after := get(t, caSecret); after.ResourceVersion != ca.ResourceVersion || !bytes.Equal(after.Data[corev1.TLSCertKey], ca.Data[corev1.TLSCertKey]) {
		t.Error("the paused tenant's CA Secret was written")
	}

	resume(t, cfg)
	eventually(t, 20*time.Second, "the change made during the pause is applied", func() error {
		if r := *get(t, d).Spec.Replicas; r != 2 {
			return fmt.Errorf("%d replicas", r)
		}
		current := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if c := conditionOf(current, v1alpha1.ConditionPaused); c != nil {
			return fmt.Errorf("Paused is still %s: %s", c.Status, c.Message)
		}
		if current.Status.ObservedGeneration != current.Generation {
			return fmt.Errorf("status describes generation %d of %d", current.Status.ObservedGeneration, current.Generation)
		}
		return nil
	})
	waitForPhase(t, cfg, d, rotation.CA.Name, "TrustNew")
	if row := printed(t, cfg); row["Paused"] != "" {
		t.Errorf("kubectl get prints Paused %q once resumed, want nothing", row["Paused"])
	}

	// The deletion waits too, with the finalizer and the objects.
	annotate(t, cfg, v1alpha1.PausedAnnotation, "true")
	waitForPaused(t, cfg, "the ca rotation, held in phase TrustNew")
	if err := env.Client.Delete(context.Background(), get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})); err != nil {
		t.Fatal(err)
	}
	waitForPaused(t, cfg, "the deletion of the tenant")
	get(t, d)
	get(t, caSecret)
	resume(t, cfg)
	waitGone(t, cfg)
}
