package webhooks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// dryRunGuard is config/webhook/dryrun_guard.yaml as config/default names
// it (namePrefix apiserver-operator-).
func dryRunGuard(t *testing.T) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "webhook", "dryrun_guard.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("config/webhook/dryrun_guard.yaml has %d documents, want the policy and its binding", len(docs))
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := yaml.UnmarshalStrict([]byte(docs[0]), policy); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), binding); err != nil {
		t.Fatal(err)
	}
	const prefix = "apiserver-operator-"
	policy.Name = prefix + policy.Name
	binding.Name = prefix + binding.Name
	binding.Spec.PolicyName = prefix + binding.Spec.PolicyName
	return policy, binding
}

// The webhook is not ready until the dry-run guard is installed, and says
// what is missing and where to find how to install it; it reads the guard
// with its own ServiceAccount's rights (config/rbac/webhook).
func TestDryRunGuardCheck_NotReadyWithoutThePolicyAndItsBinding(t *testing.T) {
	ctx := context.Background()
	reader, err := client.New(webhookRights(t), client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// Recheck 0: the guard is read at every check.
	check := &DryRunGuardCheck{Reader: reader, Name: DryRunGuard, Log: logr.Discard()}
	probe := func() error { return check.Check(httptest.NewRequest(http.MethodGet, "/readyz", http.NoBody)) }
	policy, binding := dryRunGuard(t)
	if policy.Name != DryRunGuard || binding.Name != DryRunGuard {
		t.Fatalf("config/default names the guard %s and %s; the webhook reads %s", policy.Name, binding.Name, DryRunGuard)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), binding)
		_ = env.Client.Delete(context.Background(), policy)
	})

	// The webhook's role binding reaches the authorizer within moments.
	err = probe()
	for deadline := time.Now().Add(10 * time.Second); err != nil && strings.Contains(err.Error(), "forbidden") && time.Now().Before(deadline); err = probe() {
		time.Sleep(50 * time.Millisecond)
	}
	if err == nil || !strings.Contains(err.Error(), "the ValidatingAdmissionPolicy "+DryRunGuard+" and the ValidatingAdmissionPolicyBinding "+DryRunGuard+" are missing") ||
		!strings.Contains(err.Error(), "docs/security.md") || !strings.Contains(err.Error(), "--require-dry-run-guard=false") {
		t.Fatalf("without the guard the check gave %v; want it to name both objects missing and say how to install them", err)
	}
	t.Logf("Not ready as expected: %v", err)

	if err := env.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	if err := probe(); err == nil || !strings.Contains(err.Error(), "the ValidatingAdmissionPolicyBinding "+DryRunGuard+" is missing") || strings.Contains(err.Error(), "the ValidatingAdmissionPolicy "+DryRunGuard) {
		t.Fatalf("with the policy alone the check gave %v; want the binding named missing", err)
	}

	// A binding that only warns keeps no write a dry run.
	warn := binding.DeepCopy()
	warn.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}
	if err := env.Client.Create(ctx, warn); err != nil {
		t.Fatal(err)
	}
	if err := probe(); err == nil || !strings.Contains(err.Error(), "does not deny") {
		t.Fatalf("with a binding that only warns the check gave %v; want it refused", err)
	}
	warn.Spec.ValidationActions = binding.Spec.ValidationActions
	if err := env.Client.Update(ctx, warn); err != nil {
		t.Fatal(err)
	}
	if err := probe(); err != nil {
		t.Fatalf("with the guard installed the webhook is not ready: %v", err)
	}

	// Deleted, the guard is missed at the next read.
	if err := env.Client.Delete(ctx, warn); err != nil {
		t.Fatal(err)
	}
	if err := probe(); err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicyBinding "+DryRunGuard+" is missing") {
		t.Fatalf("after the binding's deletion the check gave %v; want the binding named missing", err)
	}
}
