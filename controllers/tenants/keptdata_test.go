package tenants

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// secondEtcd starts another etcd of bin/, for a tenant of its own (to
// move from, or to lose), stopped with the test.
func secondEtcd(t *testing.T) *envtest.Etcd {
	t.Helper()
	e := &envtest.Etcd{Path: env.ControlPlane.Etcd.Path}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop() })
	return e
}

// waitHeldRunning waits until cfg is Stalled with reason, its Deployment
// still naming the etcd servers it ran with.
func waitHeldRunning(t *testing.T, cfg *v1alpha1.ApiServerConfig, reason, says, servers string) {
	t.Helper()
	eventually(t, 20*time.Second, cfg.Name+" is held with "+reason, func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		c := conditionOf(got, v1alpha1.ConditionStalled)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason || c.ObservedGeneration != got.Generation || !strings.Contains(c.Message, says) {
			return fmt.Errorf("Stalled is %v", c)
		}
		return nil
	})
	d := get(t, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}})
	if got := argValues(d, "etcd-servers"); !slices.Equal(got, []string{servers}) {
		t.Fatalf("the held tenant's apiservers were moved to --etcd-servers=%v, want %s", got, servers)
	}
}

// A user of namespace b aims tenants at the data a tenant of namespace a
// kept (deletionPolicy Retain): a tenant of the same name on its keyspace,
// one with a planted Deployment (which would pass for proof that it ran),
// and a running tenant whose spec moves it onto those servers. None is
// admitted by the operator: each is held before its etcd user gets a
// right or its data is checked, none starts on the data, and deleting them
// deletes none of it.
func TestApiServerConfigReconciler_ATenantOfAnotherNamespaceNeverTakesKeptData(t *testing.T) {
	ctx := context.Background()
	nsA, nsB := namespace(t, nil), namespace(t, nil)
	kept := tenant(nsA, "kept", func(s *v1alpha1.ApiServerConfigSpec) { s.DeletionPolicy = v1alpha1.DeletionPolicyRetain })
	createReady(t, kept)
	prefix := kept.Spec.Etcd.Prefix
	putKeys(t, prefix+"/configmaps/default/cm-", 3)
	if err := env.Client.Delete(ctx, kept); err != nil {
		t.Fatal(err)
	}
	waitGone(t, kept)
	intact := func(when string) {
		t.Helper()
		if n := keysUnder(t, prefix+"/"); n != 3 {
			t.Fatalf("%s: %d of the 3 kept keys are left", when, n)
		}
	}
	intact("kept")

	// Admission knows the operator's mark in another namespace too.
	same := tenant(nsB, "kept", func(s *v1alpha1.ApiServerConfigSpec) { s.Etcd.Prefix = prefix })
	if err := env.Client.Create(ctx, same.DeepCopy()); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "another namespace") {
		t.Fatalf("creating a tenant of another namespace on the kept data: %v", err)
	}
	// Without admission the operator holds it, and each of the others.
	withoutAdmission(t, nsB)
	if err := env.Client.Create(ctx, same); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, same, v1alpha1.ReasonRetainedKeyspace, "a deleted ApiServerConfig in another namespace")
	if err := env.Client.Delete(ctx, same); err != nil {
		t.Fatal(err)
	}
	waitGone(t, same)
	intact("after the deletion of " + nsB + "/" + same.Name)

	planted := tenant(nsB, "planted", func(s *v1alpha1.ApiServerConfigSpec) { s.Etcd.Prefix = prefix })
	// With the operator's labels, so that its cache holds it.
	labels := apiserver.SelectorLabels(planted.Name)
	fake := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: apiserver.DeploymentName(planted.Name),
			Labels: map[string]string{apiserver.NameLabel: planted.Name, "app.kubernetes.io/managed-by": apiserver.FieldOwner}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-apiserver", Image: "example.com/x:1"}}},
			},
		},
	}
	if err := env.Client.Create(ctx, fake); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, planted); err != nil {
		t.Fatal(err)
	}
	waitForNameConflict(t, planted, "Deployment "+nsB+"/"+fake.Name)

	if err := env.Client.Delete(ctx, planted); err != nil {
		t.Fatal(err)
	}
	waitGone(t, planted)
	intact("after the deletion of " + nsB + "/" + planted.Name)

	// A tenant of b that runs on its own etcd, under the same prefix, then
	// moves to the kept data's server.
	elsewhere := secondEtcd(t).URL.String()
	mover := tenant(nsB, "mover", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Etcd.Servers = []string{elsewhere}
		s.Etcd.Prefix = prefix
	})
	createReady(t, mover)
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: mover.ObjectMeta})
	if got.Status.DataPrefix != prefix || len(got.Status.DataServers) != 1 || !strings.Contains(elsewhere, got.Status.DataServers[0]) {
		t.Fatalf("status records its data at %q on %v, want %s on %s", got.Status.DataPrefix, got.Status.DataServers, prefix, elsewhere)
	}
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.Etcd.Servers = []string{env.ControlPlane.Etcd.URL.String()}
	if err := env.Client.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	waitHeldRunning(t, mover, v1alpha1.ReasonRetainedKeyspace, "a deleted ApiServerConfig in another namespace", elsewhere)
	// Its deletion deletes neither the kept data nor, unreachable from the
	// spec, its own: it waits, saying where its data is.
	if err := env.Client.Delete(ctx, mover); err != nil {
		t.Fatal(err)
	}
	waitStalled(t, mover, v1alpha1.ReasonSharedKeyspace, "which spec.etcd names no more")
	intact("while the deletion of the tenant that moved waits")
	retainOnDeletion(t, mover)
	waitGone(t, mover)
	intact("after the deletion of the tenant that moved")
}

// A running tenant whose spec moves it to servers that hold keys it did
// not write under its prefix is held, as a new tenant on them would be:
// the same prefix on other servers is other data. Its apiservers keep
// running where they were; deleting it deletes only what it stored.
func TestApiServerConfigReconciler_AServerChangeIsAMoveOfTheData(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	elsewhere := secondEtcd(t).URL.String()
	cfg := tenant(ns, "moving", func(s *v1alpha1.ApiServerConfigSpec) { s.Etcd.Servers = []string{elsewhere} })
	prefix := cfg.Spec.Etcd.Prefix
	// Someone else's keys under the same prefix on the shared etcd.
	putKeys(t, prefix+"/configmaps/default/theirs-", 2)
	createReady(t, cfg)
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.Etcd.Servers = []string{env.ControlPlane.Etcd.URL.String()}
	if err := env.Client.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	waitHeldRunning(t, cfg, v1alpha1.ReasonForeignData, "holds 2 keys it did not write", elsewhere)
	// Back where its data is, it runs on; deleted, it deletes its own keys
	// there and nothing on the other server.
	got = get(t, got)
	patch = client.MergeFrom(got.DeepCopy())
	got.Spec.Etcd.Servers = []string{elsewhere}
	if err := env.Client.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	waitForPass(t, cfg)
	if err := env.Client.Delete(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitGone(t, cfg)
	if n := keysUnder(t, prefix+"/"); n != 2 {
		t.Fatalf("deleting the tenant deleted %d of the 2 keys it never stored", 2-n)
	}
}
