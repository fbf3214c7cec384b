package webhooks

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// stored says in status that cfg stored data under its prefix, as the
// operator does before its first apiserver starts.
func stored(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
	t.Helper()
	patch := client.MergeFrom(cfg.DeepCopy())
	cfg.Status.DataPrefix = "/tenants/" + cfg.Namespace + "/" + cfg.Name
	if err := env.Client.Status().Patch(context.Background(), cfg, patch); err != nil {
		t.Fatal(err)
	}
}

func annotate(t *testing.T, cfg *v1alpha1.ApiServerConfig, key, value string) {
	t.Helper()
	patch := client.MergeFrom(cfg.DeepCopy())
	if cfg.Annotations == nil {
		cfg.Annotations = map[string]string{}
	}
	cfg.Annotations[key] = value
	if err := env.Client.Patch(context.Background(), cfg, patch); err != nil {
		t.Fatal(err)
	}
}

func TestApiServerConfigValidator_AProtectedTenantWithDataIsDeletedOnlyOnceConfirmed(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t, "protected-")
	protect := func(cfg *v1alpha1.ApiServerConfig) *v1alpha1.ApiServerConfig {
		cfg.Annotations = map[string]string{v1alpha1.DeletionProtectionAnnotation: "true"}
		return cfg
	}

	cfg := protect(newConfig(ns, "guarded", func(*v1alpha1.ApiServerConfigSpec) {}))
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// A tenant that never stored data has none to lose.
	fresh := protect(newConfig(ns, "fresh", func(*v1alpha1.ApiServerConfigSpec) {}))
	if err := env.Client.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, fresh); err != nil {
		t.Fatalf("deleting a protected tenant that stored nothing: %v", err)
	}

	stored(t, cfg)
	err := env.Client.Delete(ctx, cfg)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "holds data (etcd prefix /tenants/"+ns+"/guarded)") ||
		!strings.Contains(err.Error(), v1alpha1.ConfirmDeletionAnnotation+"=true") {
		t.Fatalf("want the deletion refused, naming the prefix and the confirmation, got %v", err)
	}
	// Only "true" confirms, and a value that only looks like a yes is
	// refused when it is written, not read as a no at the deletion.
	patch := client.MergeFrom(cfg.DeepCopy())
	cfg.Annotations[v1alpha1.ConfirmDeletionAnnotation] = "yes"
	if err := env.Client.Patch(ctx, cfg, patch); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `supported values: "true", "false"`) {
		t.Fatalf("want confirm-deletion=yes refused, got %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cfg), cfg); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, cfg); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant went without a confirmation: %v", err)
	}
	annotate(t, cfg, v1alpha1.ConfirmDeletionAnnotation, "true")
	if err := env.Client.Delete(ctx, cfg); err != nil {
		t.Fatalf("deleting a confirmed tenant: %v", err)
	}

	// Retain loses nothing: no confirmation needed.
	kept := protect(newConfig(ns, "kept", func(s *v1alpha1.ApiServerConfigSpec) { s.DeletionPolicy = v1alpha1.DeletionPolicyRetain }))
	if err := env.Client.Create(ctx, kept); err != nil {
		t.Fatal(err)
	}
	stored(t, kept)
	if err := env.Client.Delete(ctx, kept); err != nil {
		t.Fatalf("deleting a protected tenant with Retain: %v", err)
	}
}
