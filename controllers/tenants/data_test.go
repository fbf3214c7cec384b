package tenants

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// putEncrypted stores plain under key as cfg's apiservers would: with the
// current key of its encryption Secret, through upstream's transformer.
func putEncrypted(t *testing.T, cfg *v1alpha1.ApiServerConfig, key, plain string) {
	t.Helper()
	s := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: apiserver.EncryptionSecretName(cfg.Name)}})
	keys, err := apiserver.ParseEncryptionKeys(s.Data[apiserver.EncryptionKeysKey], apiserver.EncryptionLayout{})
	if err != nil {
		t.Fatal(err)
	}
	putEncryptedWith(t, keys.Current.Key, key, plain)
}

func TestApiServerConfigReconciler_ATenantOnKeysItDidNotWriteNeverStarts(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "late", nil)
	// What a deleted tenant left (its data kept, its keys not), or what
	// something wrote there directly.
	putKeys(t, cfg.Spec.Etcd.Prefix+"/configmaps/default/left-", 3)
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, cfg, v1alpha1.ReasonForeignData, "prefix "+cfg.Spec.Etcd.Prefix+" holds 3 keys it did not write", "etcdctl del --prefix "+cfg.Spec.Etcd.Prefix+"/")
	if got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}); got.Status.DataPrefix != "" {
		t.Fatalf("status.dataPrefix is %q before the tenant started", got.Status.DataPrefix)
	}
	// Once they are gone, it starts (within its 30 s re-check), and its
	// prefix is its own from then on.
	deleteKeys(t, cfg.Spec.Etcd.Prefix+"/")
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.DeploymentName(cfg.Name)}}
	eventually(t, 45*time.Second, "the Deployment appears", func() error {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)
	})
	actAsDeploymentController(t, d)
	eventually(t, 20*time.Second, "the tenant is Ready on its prefix", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if c := conditionOf(got, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready is %v", c)
		}
		if got.Status.DataPrefix != cfg.Spec.Etcd.Prefix {
			return fmt.Errorf("status.dataPrefix is %q", got.Status.DataPrefix)
		}
		return nil
	})
	// What it then stores is its own: no later pass holds it.
	putKeys(t, cfg.Spec.Etcd.Prefix+"/configmaps/default/own-", 3)
	retainOnDeletion(t, cfg)
	eventually(t, 20*time.Second, "the edited tenant is Ready", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if c := conditionOf(got, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != got.Generation {
			return fmt.Errorf("Ready is %v at generation %d", c, got.Generation)
		}
		return nil
	})
}

func TestApiServerConfigReconciler_RetainKeepsTheDataForTheTenantOfItsNameAlone(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	spec := func(s *v1alpha1.ApiServerConfigSpec) {
		s.DeletionPolicy = v1alpha1.DeletionPolicyRetain
		s.Encryption = &v1alpha1.EncryptionSpec{Provider: v1alpha1.EncryptionSecretbox}
	}
	cfg := tenant(ns, "kept", spec)
	createReady(t, cfg)
	prefix := cfg.Spec.Etcd.Prefix
	putEncrypted(t, cfg, prefix+"/secrets/default/s1", "a secret")
	putKeys(t, prefix+"/events/default/e-", 4)
	ca := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.CASecretName(cfg.Name)}})
	if err := env.Client.Delete(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitGone(t, cfg)
	if n := keysUnder(t, prefix+"/"); n != 5 {
		t.Fatalf("%d of the 5 keys are left", n)
	}

	// Another tenant may not store there: admission says whose it is...
	other := tenant(ns, "other", func(s *v1alpha1.ApiServerConfigSpec) { s.Etcd.Prefix = prefix })
	err := env.Client.Create(ctx, other.DeepCopy())
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "data that the deleted ApiServerConfig kept (prefix "+prefix+") kept (deletionPolicy Retain)") {
		t.Fatalf("creating another tenant on the retained prefix: %v", err)
	}
	// ... and, without admission, the operator never starts it; its
	// deletion then leaves the retained data alone.
	withoutAdmission(t, ns)
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, other, v1alpha1.ReasonRetainedKeyspace, "the deleted ApiServerConfig kept", "choose another spec.etcd.prefix")
	if err := env.Client.Delete(ctx, other); err != nil {
		t.Fatal(err)
	}
	waitGone(t, other)
	if n := keysUnder(t, prefix+"/"); n != 5 {
		t.Fatalf("%d of the 5 keys are left after the other tenant's deletion", n)
	}

	// The tenant created again takes it back, with the keys that read it.
	again := tenant(ns, "kept", spec)
	createReady(t, again)
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: again.ObjectMeta})
	if got.Status.DataPrefix != prefix {
		t.Fatalf("status.dataPrefix is %q", got.Status.DataPrefix)
	}
	if now := get(t, &corev1.Secret{ObjectMeta: ca.ObjectMeta}); !bytes.Equal(now.Data[corev1.TLSCertKey], ca.Data[corev1.TLSCertKey]) {
		t.Fatal("the tenant created again has another CA")
	}
	events := &corev1.EventList{}
	if err := env.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	took := false
	for _, e := range events.Items {
		took = took || (e.Reason == v1alpha1.ReasonDataTakenBack && e.InvolvedObject.UID == got.UID && strings.Contains(e.Message, "(5 keys)"))
	}
	if !took {
		t.Fatal("no DataTakenBack event for the 5 keys")
	}
}

func TestApiServerConfigReconciler_ATenantNeverStartsOnDataItsKeysDoNotRead(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	spec := func(s *v1alpha1.ApiServerConfigSpec) {
		s.DeletionPolicy = v1alpha1.DeletionPolicyRetain
		s.Encryption = &v1alpha1.EncryptionSpec{Provider: v1alpha1.EncryptionSecretbox}
	}
	cfg := tenant(ns, "lost", spec)
	createReady(t, cfg)
	prefix := cfg.Spec.Etcd.Prefix
	putEncrypted(t, cfg, prefix+"/secrets/default/s1", "a secret")
	putEncrypted(t, cfg, prefix+"/secrets/default/s2", "another")
	putKeys(t, prefix+"/events/default/e-", 2)
	if err := env.Client.Delete(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitGone(t, cfg)
	// The key that read the data is lost: the tenant created again gets
	// a new key of the same name (key-1), which reads none of it.
	enc := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.EncryptionSecretName(cfg.Name)}}
	if err := env.Client.Delete(ctx, enc); err != nil {
		t.Fatal(err)
	}
	again := tenant(ns, "lost", spec)
	if err := env.Client.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, again, v1alpha1.ReasonForeignData, "holds 4 values, 2 of which are encrypted with keys the tenant does not hold", "Secret "+enc.Name)
	if n := keysUnder(t, prefix+"/"); n != 4 {
		t.Fatalf("%d of the 4 keys are left", n)
	}
	// Its deletion (it never started) keeps the data.
	if err := env.Client.Delete(ctx, again); err != nil {
		t.Fatal(err)
	}
	waitGone(t, again)
	if n := keysUnder(t, prefix+"/"); n != 4 {
		t.Fatalf("%d of the 4 keys are left after its deletion", n)
	}
}

func TestApiServerConfigReconciler_ValuesNoKeyReadsMakeTheTenantNotReady(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "unread", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Encryption = &v1alpha1.EncryptionSpec{Provider: v1alpha1.EncryptionSecretbox}
	})
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)
	// While its first key is proven, a value appears that no key of the
	// tenant reads: another cluster's key-1 wrote it.
	foreign, err := apiserver.NewEncryptionKey(v1alpha1.EncryptionSecretbox, "key-1")
	if err != nil {
		t.Fatal(err)
	}
	putEncryptedWith(t, foreign, cfg.Spec.Etcd.Prefix+"/secrets/default/theirs", "not ours")
	actAsDeploymentController(t, d)
	eventually(t, 20*time.Second, "the tenant says it cannot read a value", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		const says = "1 stored values are encrypted with keys the tenant does not hold (first: "
		for _, c := range []struct {
			kind   string
			status metav1.ConditionStatus
		}{{v1alpha1.ConditionReady, metav1.ConditionFalse}, {v1alpha1.ConditionStalled, metav1.ConditionTrue}, {v1alpha1.ConditionEncrypted, metav1.ConditionFalse}} {
			got := conditionOf(got, c.kind)
			if got == nil || got.Status != c.status || !strings.Contains(got.Message, says+cfg.Spec.Etcd.Prefix+"/secrets/default/theirs") {
				return fmt.Errorf("%s is %v", c.kind, got)
			}
		}
		return nil
	})
	// Once the value is gone, the proof completes and the tenant is Ready.
	deleteKeys(t, cfg.Spec.Etcd.Prefix+"/secrets/default/theirs")
	touch(t, cfg)
	eventually(t, 20*time.Second, "the tenant is Ready and Encrypted", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		for _, kind := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionEncrypted} {
			if c := conditionOf(got, kind); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("%s is %v", kind, c)
			}
		}
		return nil
	})
}

// A tenant that ran before the operator recorded status.dataPrefix (an
// operator upgrade) keeps running on its data: the first pass records the
// prefix it runs on, holding nothing, and its Deployment does not roll.
func TestApiServerConfigReconciler_ATenantThatRanBeforeTheDataCheckKeepsItsData(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "older", nil)
	createReady(t, cfg)
	putKeys(t, cfg.Spec.Etcd.Prefix+"/configmaps/default/cm-", 5)
	d := get(t, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.DeploymentName(cfg.Name)}})

	// As an older operator left it: no dataPrefix.
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	patch := client.MergeFrom(got.DeepCopy())
	got.Status.DataPrefix = ""
	if err := env.Client.Status().Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	touch(t, cfg)
	eventually(t, 20*time.Second, "the pass records the prefix it runs on", func() error {
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if got.Status.DataPrefix != cfg.Spec.Etcd.Prefix {
			return fmt.Errorf("status.dataPrefix is %q", got.Status.DataPrefix)
		}
		if c := conditionOf(got, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready is %v", c)
		}
		return nil
	})
	now := get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta})
	if now.Generation != d.Generation || !apiequality.Semantic.DeepEqual(now.Spec.Template, d.Spec.Template) {
		t.Fatalf("the Deployment changed (generation %d → %d)", d.Generation, now.Generation)
	}
	if n := keysUnder(t, cfg.Spec.Etcd.Prefix+"/configmaps/"); n != 5 {
		t.Fatalf("%d of the tenant's 5 keys are left", n)
	}
}
