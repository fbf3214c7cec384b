package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/test/envtest"
)

// Two operator instances, started with --watch-filter=shard-a and
// --watch-filter=shard-b, split a fleet by the tenants' label: each
// reconciles its own tenants only, under a lease of its own, and one
// whose instance is down waits for it while the other goes on; a tenant
// without the label belongs to neither. The webhook, served by one of
// them, judges every spec whatever its label.
func TestWatchFilter_TwoInstancesSplitTheFleet(t *testing.T) {
	s := &scope{TB: t}
	defer s.close()
	env, err := envtest.Start(envtest.WithWebhooks())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	instance := func(filter string, webhooks bool) *operator {
		args := []string{"--watch-filter=" + filter, "--leader-elect=true", "--leader-election-namespace=default"}
		if webhooks {
			args = append(args, webhookArgs(env)...)
		}
		return startOperator(s, env, args...)
	}
	a := instance("shard-a", true)
	b := instance("shard-b", false)

	tenant := func(name, shard string) *v1alpha1.ApiServerConfig {
		cfg := tenants(env, name, 1)[0]
		if shard != "" {
			cfg.Labels = map[string]string{apiserver.WatchFilterLabel: shard}
		}
		return cfg
	}
	var first []*v1alpha1.ApiServerConfig
	for i := range 3 {
		first = append(first, tenant(fmt.Sprintf("a%d", i), "shard-a"), tenant(fmt.Sprintf("b%d", i), "shard-b"))
	}
	nobody := tenant("unlabelled", "")
	all := append([]*v1alpha1.ApiServerConfig{nobody}, first...)
	createNamespaces(s, env.Client, all)
	w := watch(s, env, converged)
	// Through the webhook: it admits the specs of both shards.
	createAll(s, env.Client, all)
	w.waitAll(s, first, time.Minute, "the tenants of both shards converge")

	// Each instance holds a lease of its own.
	ctx := context.Background()
	for _, shard := range []string{"shard-a", "shard-b"} {
		lease := &coordinationv1.Lease{}
		name := "apiserver-operator.controlplane.apiserver-operator.dev-" + shard
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, lease); err != nil {
			t.Fatalf("the lease of %s: %v", shard, err)
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			t.Fatalf("nobody holds the lease of %s", shard)
		}
	}

	// With shard-b's instance down, its new tenant waits while shard-a's
	// instance converges a tenant created after it: shard-a's instance
	// does not see it at all.
	b.stop(t)
	waitingB, laterA := tenant("b-waiting", "shard-b"), tenant("a-later", "shard-a")
	createNamespaces(s, env.Client, []*v1alpha1.ApiServerConfig{waitingB, laterA})
	createAll(s, env.Client, []*v1alpha1.ApiServerConfig{waitingB})
	createAll(s, env.Client, []*v1alpha1.ApiServerConfig{laterA})
	w.waitAll(s, []*v1alpha1.ApiServerConfig{laterA}, time.Minute, "shard-a's instance converges its new tenant")
	for _, cfg := range []*v1alpha1.ApiServerConfig{waitingB, nobody} {
		got := &v1alpha1.ApiServerConfig{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cfg), got); err != nil {
			t.Fatal(err)
		}
		if len(got.Finalizers) > 0 || len(got.Status.Conditions) > 0 {
			t.Fatalf("%s was reconciled by an instance it does not belong to: finalizers %v, conditions %v", cfg.Namespace, got.Finalizers, got.Status.Conditions)
		}
	}
	if a.logContains(`"namespace":"b-waiting`) {
		t.Fatal("shard-a's instance logged about shard-b's tenant")
	}

	// Back up, shard-b's instance takes its tenant.
	instance("shard-b", false)
	w.waitAll(s, []*v1alpha1.ApiServerConfig{waitingB}, time.Minute, "shard-b's instance, back, converges its waiting tenant")

	// The webhook judges a spec of shard-b as any other: a wrong one is
	// refused.
	bad := tenant("b-bad", "shard-b")
	bad.Namespace = waitingB.Namespace
	bad.Spec.ExtraArgs = []v1alpha1.ExtraArg{{Name: "max-requests-inflight", Value: "-1"}}
	if err := env.Client.Create(ctx, bad, client.DryRunAll); err == nil {
		t.Fatal("the webhook admitted a spec of shard-b that kube-apiserver refuses")
	}
}
