package tenants

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio/tenantiofake"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantmemory"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantwatch"
)

// TestMemory_OneOwnerOfWhatIsKeptPerTenant: the reconciler keeps nothing
// per tenant outside its memory (a new unexported field is a decision to
// make here), and every field of the memory is a store that forget and
// holds cover.
func TestMemory_OneOwnerOfWhatIsKeptPerTenant(t *testing.T) {
	// The reconciler's unexported fields: its memory, and the restores
	// (a store of backups.Restorer, made on first use).
	allowed := []string{"memory", "restores", "restoresOnce"}
	rt := reflect.TypeFor[Reconciler]()
	for i := range rt.NumField() {
		if f := rt.Field(i); !f.IsExported() && !slices.Contains(allowed, f.Name) {
			t.Errorf("tenants.Reconciler.%s is kept outside its memory: make it a store of memory, listed in stores()", f.Name)
		}
	}
	r := &Reconciler{}
	r.memory.etcdWatch, r.memory.agentWatch, r.memory.auditWatch = tenantwatch.NewEtcd(&tenantiofake.Reach{}, time.Second), tenantwatch.NewAgents(nil, time.Second), tenantwatch.NewAudit(time.Second)
	var names []string
	for _, s := range r.stores() {
		names = append(names, s.name)
	}
	mt := reflect.TypeFor[memory]()
	store := reflect.TypeFor[tenantmemory.Store]()
	for i := range mt.NumField() {
		f := mt.Field(i)
		if !f.Type.Implements(store) && !reflect.PointerTo(f.Type).Implements(store) {
			t.Errorf("memory.%s is no tenantmemory.Store: nothing forgets it", f.Name)
		}
		if !slices.Contains(names, f.Name) {
			t.Errorf("memory.%s is not among the stores forget covers (%v)", f.Name, names)
		}
	}
}

// TestApiServerConfigReconciler_ADeletedTenantLeavesNothingInMemory: a
// tenant with every between-pass watch (etcd, konnectivity agents, audit)
// is remembered in each of them while it runs, and once it is deleted no
// store of the reconciler holds anything of it.
func TestApiServerConfigReconciler_ADeletedTenantLeavesNothingInMemory(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "audit-webhook"},
		Data: map[string][]byte{"kubeconfig": webhookKubeconfig("https://audit.example.com", "{token: t}")}}); err != nil {
		t.Fatal(err)
	}
	cfg := konnectivityTenant(ns, "remembered")
	cfg.Spec.Audit.Webhook = &v1alpha1.AuditWebhookSpec{KubeconfigSecretName: "audit-webhook"}
	key := client.ObjectKeyFromObject(cfg)
	testTenants.Store(key, &auditingTenant{})
	t.Cleanup(func() { testTenants.Delete(key) })
	createReady(t, cfg)
	pod, server := gatedPod(t, cfg, "remembered-a", "10.1.9.1", corev1.ConditionTrue, time.Now())
	server.agents.Store(1)
	want := []string{"generationSeen", "etcdClientTLS", "applied", "metrics", "etcdWatch", "agentWatch", "auditWatch"}
	eventually(t, 20*time.Second, "the running tenant is remembered by every watch", func() error {
		held := reconciler.holds(key)
		for _, w := range want {
			if !slices.Contains(held, w) {
				return fmt.Errorf("remembered in %v, not in %s", held, w)
			}
		}
		return nil
	})
	// Its data goes once its apiservers are gone (envtest collects no
	// garbage: the test deletes the pod).
	for _, o := range []client.Object{cfg, pod} {
		if err := env.Client.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, cfg)
	eventually(t, 10*time.Second, "nothing of the deleted tenant is kept", func() error {
		if held := reconciler.holds(key); len(held) > 0 {
			return fmt.Errorf("still kept in %v", held)
		}
		return nil
	})
}
