//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// tenantEtcd is a client of one of the local cluster's tenant etcds.
func tenantEtcd(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	etcd := cluster.TenantEtcd()
	tlsConfig, err := transport.TLSConfigFor(&transport.Config{TLS: transport.TLSConfig{CAFile: etcd.CAFile, CertFile: etcd.CertFile, KeyFile: etcd.KeyFile}})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsConfig, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// keysOn counts the keys under prefix on each tenant etcd, main and events.
func keysOn(t testing.TB, prefix string) map[string]int64 {
	t.Helper()
	etcd := cluster.TenantEtcd()
	out := map[string]int64{}
	for _, endpoint := range []string{etcd.MainURL, etcd.EventsURL} {
		resp, err := tenantEtcd(t, endpoint).Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("counting the keys under %s on %s: %v", prefix, endpoint, err)
		}
		out[endpoint] = resp.Count
	}
	return out
}

// waitDeleted waits until cfg is gone.
func waitDeleted(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, timeout time.Duration) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(time.Second) {
		got := &v1alpha1.ApiServerConfig{}
		err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), got)
		if apierrors.IsNotFound(err) {
			return
		}
		if s := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); s != nil {
			last = s.Reason + ": " + s.Message
		}
	}
	t.Fatalf("%s/%s is not gone within %s (last: %s)", cfg.Namespace, cfg.Name, timeout, last)
}

// storeObjects creates n ConfigMaps and m Secrets in default, each with
// its own content, 16 at a time, and returns the content by name.
func storeObjects(t testing.TB, tenant *kubernetes.Clientset, n, m int) (configMaps map[string]string, secrets map[string][]byte) {
	t.Helper()
	configMaps, secrets = map[string]string{}, map[string][]byte{}
	for i := range n {
		configMaps[fmt.Sprintf("cm-%04d", i)] = fmt.Sprintf("configuration %d of the tenant, kept through its deletion: %s", i, strings.Repeat("c", i%97))
	}
	for i := range m {
		secrets[fmt.Sprintf("s-%03d", i)] = []byte(fmt.Sprintf("secret %d \x00\xff%s", i, strings.Repeat("s", i%31)))
	}
	createSecrets(t, tenant, m, func(i int) (string, []byte) { name := fmt.Sprintf("s-%03d", i); return name, secrets[name] })
	names := make(chan string, n)
	for name := range configMaps {
		names <- name
	}
	close(names)
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			for name := range names {
				_, err := tenant.CoreV1().ConfigMaps("default").Create(context.Background(),
					&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"value": configMaps[name]}}, metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- fmt.Errorf("creating ConfigMap %s: %w", name, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return configMaps, secrets
}

// Scenario (data lifecycle): a tenant with deletionPolicy Retain stores
// 1 000 ConfigMaps, 100 Secrets and events (on the override etcd); deleted,
// its data stays on both etcds and no other tenant may take its prefix;
// created again under its name, it reads back every object byte for byte,
// encrypted (Encrypted=True). Deleted with Delete, no key is left under
// its prefix on either etcd. A tenant created on a prefix that holds keys
// it did not write is never Ready and names the prefix.
func TestOperator_TenantDataFollowsItsDeletionPolicy(t *testing.T) {
	ctx := context.Background()
	c, cfg, tenant := startTenant(t, "lifecycle", func(cfg *v1alpha1.ApiServerConfig) {
		cfg.Spec.DeletionPolicy = v1alpha1.DeletionPolicyRetain
	})
	prefix := cfg.Spec.Etcd.Prefix
	configMaps, secrets := storeObjects(t, tenant, 1000, 100)
	if _, err := tenant.CoreV1().Events("default").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "kept"},
		InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "default", Name: "cm-0000", APIVersion: "v1"},
		Reason:         "Kept", Message: "stored on the events etcd", Type: corev1.EventTypeNormal,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEncrypted(t, c, cfg, 3*time.Minute)

	// Retain: the data stays on both etcds.
	if err := c.Delete(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, c, cfg, 2*time.Minute)
	etcd := cluster.TenantEtcd()
	kept := keysOn(t, prefix+"/")
	if kept[etcd.MainURL] < 1100 || kept[etcd.EventsURL] < 1 {
		t.Fatalf("after a deletion with Retain, the etcds hold %v keys under %s/", kept, prefix)
	}
	// No other tenant may store there meanwhile. The webhook's
	// ServiceAccount reads no Secret, so the controllers hold it: it never
	// starts, and its deletion leaves the data alone.
	other := localTenant(t, cfg.Namespace, "other")
	other.Spec.Etcd.Prefix = prefix
	if err := c.Create(ctx, other); err != nil {
		t.Fatalf("creating another tenant on the retained prefix: %v", err)
	}
	waitConditions(t, c, other, map[string]string{
		v1alpha1.ConditionStalled: "True|the deleted ApiServerConfig lifecycle kept (deletionPolicy Retain)",
	}, time.Minute)
	if pods := apiserverPods(t, c, other); len(pods) > 0 {
		t.Fatalf("the tenant on the retained prefix has %d apiserver pods", len(pods))
	}
	if err := c.Delete(ctx, other); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, c, other, time.Minute)
	if after := keysOn(t, prefix+"/"); after[etcd.MainURL] != kept[etcd.MainURL] || after[etcd.EventsURL] != kept[etcd.EventsURL] {
		t.Fatalf("the other tenant's life changed the retained keys: %v, were %v", after, kept)
	}

	// Created again under its name, it takes everything back.
	again := localTenant(t, cfg.Namespace, cfg.Name)
	again.Spec.DeletionPolicy = v1alpha1.DeletionPolicyRetain
	if err := c.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, again, 3*time.Minute)
	tenant, _ = tenantClient(t, c, again)
	waitReachable(t, tenant)
	cms, err := tenant.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing the ConfigMaps the tenant kept: %v", err)
	}
	got := 0
	for _, cm := range cms.Items {
		if want, ok := configMaps[cm.Name]; ok {
			if cm.Data["value"] != want {
				t.Errorf("ConfigMap %s reads back as %q, want %q", cm.Name, cm.Data["value"], want)
			}
			got++
		}
	}
	ss, err := tenant.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing the Secrets the tenant kept: %v", err)
	}
	gotSecrets := 0
	for _, s := range ss.Items {
		if want, ok := secrets[s.Name]; ok {
			if !bytes.Equal(s.Data["value"], want) {
				t.Errorf("Secret %s reads back as %q, want %q", s.Name, s.Data["value"], want)
			}
			gotSecrets++
		}
	}
	if got != len(configMaps) || gotSecrets != len(secrets) {
		t.Fatalf("the tenant created again reads %d of %d ConfigMaps and %d of %d Secrets", got, len(configMaps), gotSecrets, len(secrets))
	}
	if _, err := tenant.CoreV1().Events("default").Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Fatalf("reading the event kept on the events etcd: %v", err)
	}
	if e := waitEncrypted(t, c, again, 3*time.Minute); e.Status != metav1.ConditionTrue {
		t.Fatalf("Encrypted is %v", e)
	}
	assertEncryptedWith(t, again, "key-1", []byte("configuration 1 of the tenant"))
	t.Logf("taken back: %d ConfigMaps and %d Secrets, byte for byte", got, gotSecrets)

	// Delete: nothing is left under the prefix, on either etcd.
	patchSpec(t, c, again, `{"spec":{"deletionPolicy":"Delete"}}`)
	if err := c.Delete(ctx, again); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, c, again, 3*time.Minute)
	if left := keysOn(t, prefix+"/"); left[etcd.MainURL] != 0 || left[etcd.EventsURL] != 0 {
		t.Fatalf("after a deletion with Delete, the etcds hold %v keys under %s/", left, prefix)
	}

	// A tenant on keys it did not write never starts.
	foreign := localTenant(t, cfg.Namespace, "foreign")
	main := tenantEtcd(t, etcd.MainURL)
	if _, err := main.Put(ctx, foreign.Spec.Etcd.Prefix+"/configmaps/default/planted", "k8s\x00not this tenant's"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = main.Delete(context.Background(), foreign.Spec.Etcd.Prefix+"/", clientv3.WithPrefix()) })
	if err := c.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	says := "prefix " + foreign.Spec.Etcd.Prefix + " holds 1 keys it did not write"
	waitConditions(t, c, foreign, map[string]string{v1alpha1.ConditionStalled: "True|" + says, v1alpha1.ConditionReady: "False|" + says}, time.Minute)
	if err := c.Get(ctx, client.ObjectKey{Namespace: foreign.Namespace, Name: apiserver.DeploymentName(foreign.Name)}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("the tenant on foreign keys has a Deployment (%v)", err)
	}
}
