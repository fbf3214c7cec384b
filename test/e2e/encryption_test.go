//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// tenantEtcdValues reads every key and value under prefix in the local
// cluster's main tenant etcd, as the operator's proof does.
func tenantEtcdValues(t testing.TB, prefix string) map[string][]byte {
	t.Helper()
	etcd := cluster.TenantEtcd()
	tlsConfig, err := transport.TLSConfigFor(&transport.Config{TLS: transport.TLSConfig{CAFile: etcd.CAFile, CertFile: etcd.CertFile, KeyFile: etcd.KeyFile}})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.MainURL}, TLS: tlsConfig, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("reading etcd %s: %v", etcd.MainURL, err)
	}
	out := map[string][]byte{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.Value
	}
	return out
}

// assertEncryptedWith checks every stored Secret and ConfigMap of cfg in
// etcd: behind the prefix of key (key-N, the operator adds a random
// suffix), and none holding a known plain value.
func assertEncryptedWith(t testing.TB, cfg *v1alpha1.ApiServerConfig, key string, plain []byte) {
	t.Helper()
	for _, resource := range []string{"secrets", "configmaps"} {
		values := tenantEtcdValues(t, cfg.Spec.Etcd.Prefix+"/"+resource+"/")
		if len(values) == 0 {
			t.Errorf("etcd holds no %s of the tenant", resource)
		}
		wrong := 0
		for k, v := range values {
			if !bytes.HasPrefix(v, []byte("k8s:enc:secretbox:v1:"+key+"-")) || bytes.Contains(v, plain) {
				wrong++
				if wrong <= 3 {
					t.Errorf("%s is stored as %.40q, want it encrypted with %s", k, v, key)
				}
			}
		}
		t.Logf("%d %s in etcd, %d not encrypted with %s", len(values), resource, wrong, key)
	}
}

func waitEncrypted(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, timeout time.Duration) *metav1.Condition {
	t.Helper()
	var last *metav1.Condition
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(time.Second) {
		got := &v1alpha1.ApiServerConfig{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), got); err != nil {
			t.Fatal(err)
		}
		for i, cond := range got.Status.Conditions {
			if cond.Type == v1alpha1.ConditionEncrypted {
				last = &got.Status.Conditions[i]
			}
		}
		if last != nil && last.Status == metav1.ConditionTrue && last.Reason == v1alpha1.ReasonEncryptionProven {
			return last
		}
	}
	t.Fatalf("Encrypted is not True/Proven within %s: %v", timeout, last)
	return nil
}

// createSecrets creates n Secrets in default, 16 at a time, named and
// filled by secret(i); existing ones are kept.
func createSecrets(t testing.TB, tenant *kubernetes.Clientset, n int, secret func(i int) (string, []byte)) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				name, value := secret(i)
				_, err := tenant.CoreV1().Secrets("default").Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
					Data: map[string][]byte{"value": value}}, metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating %d Secrets: %v", n, err)
	}
}

// Scenario: a default tenant stores its Secrets and ConfigMaps encrypted;
// a rotation of the key under a client loop that reads and writes fails no
// request, rewrites every stored value with the new key (proven in etcd)
// before the old key leaves the configuration, and survives a SIGKILL of
// the operator in one of its phases.
func TestOperator_EncryptionKeyRotationFailsNoRequestAndIsProvenInEtcd(t *testing.T) {
	c, cfg, tenant := startTenant(t, "encrypted", func(cfg *v1alpha1.ApiServerConfig) { cfg.Spec.MasterCount = ptrTo[int32](2) })
	ctx := context.Background()
	waitEncrypted(t, c, cfg, 2*time.Minute)

	// A few hundred Secrets, with content to find again.
	const n = 300
	plain := []byte("plain-text-that-must-not-reach-etcd")
	content := func(i int) []byte { return append(append([]byte{}, plain...), fmt.Sprint(i)...) }
	createSecrets(t, tenant, n, func(i int) (string, []byte) { return fmt.Sprintf("s-%d", i), content(i) })
	assertEncryptedWith(t, cfg, "key-1", plain)

	// Clients read the Secrets and write ConfigMaps and Secrets all along.
	reads := startClientLoop(func(ctx context.Context) error {
		i := rand.IntN(n)
		s, err := tenant.CoreV1().Secrets("default").Get(ctx, fmt.Sprintf("s-%d", i), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !bytes.Equal(s.Data["value"], content(i)) {
			return fmt.Errorf("Secret s-%d reads %q", i, s.Data["value"])
		}
		return nil
	}, 20*time.Millisecond)
	var written sync.Map
	writes := startClientLoop(func(ctx context.Context) error {
		name := fmt.Sprintf("w-%d", rand.IntN(50))
		value := fmt.Sprintf("%s-%d", plain, time.Now().UnixNano())
		if _, err := tenant.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": value}}, metav1.CreateOptions{}); err != nil {
			if !apierrors.IsAlreadyExists(err) {
				return err
			}
			cm, err := tenant.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cm.Data = map[string]string{"v": value}
			if _, err := tenant.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
				return err
			}
		}
		written.Store(name, true)
		return nil
	}, 50*time.Millisecond)

	// The rotation, with the operator SIGKILLed in one of its phases.
	start := time.Now()
	killAt := []string{"TrustNew", "SignWithNew", "PruneOld"}[rand.IntN(3)]
	managementKubectl(t, "-n", cfg.Namespace, "annotate", "asc/"+cfg.Name, v1alpha1.RotateEncryptionKeyAnnotation+"=e2e")
	waitPhase(t, c, cfg, "encryption-key", killAt, 5*time.Minute)
	if killed := killOperator(t); killed == 0 {
		t.Fatalf("no operator process to kill in phase %s", killAt)
	}
	t.Logf("operator SIGKILLed in phase %s, %s into the rotation", killAt, time.Since(start).Round(time.Second))
	if killAt != "PruneOld" {
		waitPhase(t, c, cfg, "encryption-key", "PruneOld", 8*time.Minute)
	}
	waitPhase(t, c, cfg, "encryption-key", "Stable", 5*time.Minute)
	t.Logf("rotation of the encryption key over %d Secrets: %s", n, time.Since(start).Round(time.Second))
	waitReady(t, c, cfg, 3*time.Minute)
	time.Sleep(2 * time.Second)
	reads.finish(t, "Secret reads during the rotation")
	writes.finish(t, "ConfigMap writes during the rotation")

	// Every Secret reads as written; etcd holds nothing under the old key
	// or in plain text; the old key is gone from the configuration.
	for i := range n {
		s, err := tenant.CoreV1().Secrets("default").Get(ctx, fmt.Sprintf("s-%d", i), metav1.GetOptions{})
		if err != nil || !bytes.Equal(s.Data["value"], content(i)) {
			t.Fatalf("Secret s-%d after the rotation: %v, %q", i, err, s.Data["value"])
		}
	}
	assertEncryptedWith(t, cfg, "key-2", plain)
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.EncryptionSecretName(cfg.Name)}, secret); err != nil {
		t.Fatal(err)
	}
	config := string(secret.Data[apiserver.EncryptionConfigKey])
	if strings.Contains(config, "name: key-1") || !strings.Contains(config, "name: key-2") || strings.Contains(string(secret.Data[apiserver.EncryptionKeysKey]), `"key-1-`) {
		t.Errorf("after the rotation the configuration is\n%s", config)
	}
	written.Range(func(name, _ any) bool {
		if _, err := tenant.CoreV1().ConfigMaps("default").Get(ctx, name.(string), metav1.GetOptions{}); err != nil {
			t.Errorf("ConfigMap %s written during the rotation: %v", name, err)
		}
		return true
	})
	cond := waitEncrypted(t, c, cfg, time.Minute)
	if !strings.Contains(cond.Message, "key-2") {
		t.Errorf("Encrypted says %q", cond.Message)
	}
}
