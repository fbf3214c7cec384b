package tenants

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
)

// waitStalled waits for a deletion held with reason, whose message says
// what, and returns it.
func waitStalled(t *testing.T, cfg *v1alpha1.ApiServerConfig, reason, says string) {
	t.Helper()
	eventually(t, 20*time.Second, "the deletion is held with "+reason, func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if got.DeletionTimestamp.IsZero() {
			return errors.New("not being deleted")
		}
		c := conditionOf(got, v1alpha1.ConditionStalled)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason || !strings.Contains(c.Message, says) {
			return fmt.Errorf("Stalled is %v", c)
		}
		return nil
	})
}

// retainOnDeletion sets cfg's deletionPolicy to Retain.
func retainOnDeletion(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
	t.Helper()
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.DeletionPolicy = v1alpha1.DeletionPolicyRetain
	if err := env.Client.Patch(context.Background(), got, patch); err != nil {
		t.Fatalf("setting deletionPolicy Retain: %v", err)
	}
}

func TestApiServerConfigReconciler_DeleteRemovesTheTenantsDataAndNothingElse(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	deleted := tenant(ns, "gone", nil) // deletionPolicy unset, pkiRetention Delete: Delete
	kept := tenant(ns, "kept", func(s *v1alpha1.ApiServerConfigSpec) { s.DeletionPolicy = v1alpha1.DeletionPolicyRetain })
	for _, cfg := range []*v1alpha1.ApiServerConfig{deleted, kept} {
		createReady(t, cfg)
		putKeys(t, cfg.Spec.Etcd.Prefix+"/configmaps/default/cm-", 300)
	}
	// Keys beside the prefix, which only look alike, are not the tenant's.
	putKeys(t, deleted.Spec.Etcd.Prefix+"-beside/configmaps/default/cm-", 5)
	putKeys(t, deleted.Spec.Etcd.Prefix+"x/configmaps/default/cm-", 5)

	for _, cfg := range []*v1alpha1.ApiServerConfig{deleted, kept} {
		if err := env.Client.Delete(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		waitGone(t, cfg)
	}
	if n := keysUnder(t, deleted.Spec.Etcd.Prefix+"/"); n != 0 {
		t.Errorf("%d keys are left under the deleted tenant's prefix", n)
	}
	for prefix, want := range map[string]int64{
		kept.Spec.Etcd.Prefix + "/":           300,
		deleted.Spec.Etcd.Prefix + "-beside/": 5,
		deleted.Spec.Etcd.Prefix + "x/":       5,
	} {
		if n := keysUnder(t, prefix); n != want {
			t.Errorf("%d keys under %s, want %d", n, prefix, want)
		}
	}
}

func TestApiServerConfigReconciler_DeleteKeepsDataThatIsAlsoAnotherTenants(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	outer := tenant(ns, "above", func(s *v1alpha1.ApiServerConfigSpec) { s.Etcd.Prefix = "/tenants/" + ns })
	createReady(t, outer)
	putKeys(t, outer.Spec.Etcd.Prefix+"/configmaps/default/cm-", 10)
	// A tenant whose prefix is within the other's: admission refuses it,
	// and the operator never starts it (it is the younger; by name, the
	// later, when both were created in one second). Its keys stand
	// for those of a tenant that ran before admission checked prefixes.
	withoutAdmission(t, ns)
	inner := tenant(ns, "within", func(s *v1alpha1.ApiServerConfigSpec) { s.Etcd.Prefix = outer.Spec.Etcd.Prefix + "/inner" })
	if err := env.Client.Create(ctx, inner); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the inner tenant is held", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: inner.ObjectMeta})
		if c := conditionOf(got, v1alpha1.ConditionStalled); c == nil || c.Reason != v1alpha1.ReasonSharedKeyspace {
			return fmt.Errorf("Stalled is %v", c)
		}
		return nil
	})
	putKeys(t, inner.Spec.Etcd.Prefix+"/configmaps/default/cm-", 7)

	// The outer tenant's deletion must not take the inner's keys with it.
	if err := env.Client.Delete(ctx, outer); err != nil {
		t.Fatal(err)
	}
	waitStalled(t, outer, v1alpha1.ReasonSharedKeyspace, "are also the data of ApiServerConfig within, which deleting them would delete")
	if n := keysUnder(t, outer.Spec.Etcd.Prefix+"/"); n != 17 {
		t.Fatalf("%d of the 17 keys are left", n)
	}
	// Retain lets it go, and keeps the keys.
	retainOnDeletion(t, outer)
	waitGone(t, outer)
	// The inner tenant never started: it stored nothing, and its deletion
	// (Delete) removes none of the keys under its prefix, which are not
	// its own.
	if err := env.Client.Delete(ctx, inner); err != nil {
		t.Fatal(err)
	}
	waitGone(t, inner)
	if n := keysUnder(t, outer.Spec.Etcd.Prefix+"/"); n != 17 {
		t.Fatalf("%d of the 17 keys are left", n)
	}
}

func TestApiServerConfigReconciler_DeleteHoldsTheDataWhileEtcdDoesNotAnswer(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	// The tenant runs on an etcd of its own, which then stops.
	e := secondEtcd(t)
	cfg := tenant(ns, "unreachable", func(s *v1alpha1.ApiServerConfigSpec) { s.Etcd.Servers = []string{e.URL.String()} })
	createReady(t, cfg)
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitStalled(t, cfg, v1alpha1.ReasonEtcdUnreachable, "kept until its etcd "+e.URL.String()+" answers")
	retainOnDeletion(t, cfg)
	waitGone(t, cfg)
}

func TestApiServerConfigReconciler_ANewTenantOnAnotherTenantsKeysNeverStarts(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	first := tenant(ns, "first", nil)
	createReady(t, first)
	// Admission refuses the second; created without it, the operator
	// refuses to start it.
	withoutAdmission(t, ns)
	second := tenant(ns, "second", func(s *v1alpha1.ApiServerConfigSpec) { s.Etcd.Prefix = first.Spec.Etcd.Prefix })
	if err := env.Client.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	stalled := func() {
		t.Helper()
		eventually(t, 20*time.Second, "the second tenant is Stalled", func() error {
			got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: second.ObjectMeta})
			c := conditionOf(got, v1alpha1.ConditionStalled)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonSharedKeyspace || c.ObservedGeneration != got.Generation ||
				!strings.Contains(c.Message, "also the data of ApiServerConfig first") {
				return fmt.Errorf("Stalled is %v at generation %d", c, got.Generation)
			}
			return nil
		})
	}
	stalled()
	// A later pass, over an edited spec, still holds it.
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: second.ObjectMeta})
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.MasterCount = ptr.To[int32](2)
	if err := env.Client.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	stalled()
	d := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.DeploymentName(second.Name)}, d); err == nil {
		t.Fatal("the second tenant got a Deployment")
	}
	// The first runs on, Ready.
	if c := conditionOf(get(t, &v1alpha1.ApiServerConfig{ObjectMeta: first.ObjectMeta}), v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("the first tenant's Ready is %v", c)
	}
}

// A namespace's deletion removes the etcd client Secret too, possibly
// before the operator deletes the tenant's data: the deletion goes on with
// the certificate the tenant's passes reached etcd with. (The test's etcd
// speaks no TLS, so the deletion then holds as unreachable, not for a
// missing Secret: which reason it gives shows which certificate it used.)
func TestApiServerConfigReconciler_DeleteUsesTheCertificateItRememberedWhenTheSecretIsGone(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	now := time.Now()
	ca, err := pki.NewSelfSignedCA("etcd-ca", "", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := pki.NewSignedCert(ca, pki.CertConfig{CommonName: "tenant", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, "", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	key, err := clientCert.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "etcd-client"},
		Data: map[string][]byte{"ca.crt": ca.CertPEM(), "tls.crt": clientCert.CertPEM(), "tls.key": key}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	cfg := tenant(ns, "tls", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Etcd.Servers = []string{"https://" + env.ControlPlane.Etcd.URL.Host}
		s.Etcd.TLS = &v1alpha1.EtcdTLS{SecretName: secret.Name}
	})
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a pass looked at its etcd", func() error {
		if c := conditionOf(get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}), v1alpha1.ConditionEtcdAvailable); c == nil || c.Reason != v1alpha1.ReasonEtcdUnreachable {
			return fmt.Errorf("EtcdAvailable is %v", c)
		}
		return nil
	})
	// It stored data on that prefix, as a tenant that ran would have (the
	// test's etcd speaks no TLS: this one never could).
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	patch := client.MergeFrom(got.DeepCopy())
	got.Status.DataPrefix = cfg.Spec.Etcd.Prefix
	if err := env.Client.Status().Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitStalled(t, cfg, v1alpha1.ReasonEtcdUnreachable, "kept until its etcd")
	retainOnDeletion(t, cfg)
	waitGone(t, cfg)
}
