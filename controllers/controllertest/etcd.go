package controllertest

import (
	"context"
	"crypto/aes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage/value"
	aestransformer "k8s.io/apiserver/pkg/storage/value/encrypt/aes"
	"k8s.io/apiserver/pkg/storage/value/encrypt/secretbox"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// etcd is a client of the environment's etcd; the test closes it.
func (e *Env) etcd(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := tenantio.EtcdV3{}.Client([]string{e.ControlPlane.Etcd.URL.String()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// PutKeys writes n keys under prefix into the environment's etcd, as a
// tenant's apiserver would have stored objects.
func (e *Env) PutKeys(t *testing.T, prefix string, n int) {
	t.Helper()
	cli := e.etcd(t)
	defer func() { _ = cli.Close() }()
	for i := range n {
		if _, err := cli.Put(context.Background(), fmt.Sprintf("%s%d", prefix, i), "stored"); err != nil {
			t.Fatal(err)
		}
	}
}

// KeysUnder counts the keys under prefix in the environment's etcd.
func (e *Env) KeysUnder(t *testing.T, prefix string) int64 {
	t.Helper()
	counts, err := tenantio.EtcdV3{}.Count(context.Background(), []string{e.ControlPlane.Etcd.URL.String()}, nil, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return counts[0]
}

// DeleteKeys deletes the keys under prefix in the environment's etcd.
func (e *Env) DeleteKeys(t *testing.T, prefix string) {
	t.Helper()
	if _, err := (tenantio.EtcdV3{}).Delete(context.Background(), []string{e.ControlPlane.Etcd.URL.String()}, nil, prefix); err != nil {
		t.Fatal(err)
	}
}

// StoredUnder is every key and value under prefix in the environment's
// etcd, keyed relative to it.
func (e *Env) StoredUnder(t *testing.T, prefix string) map[string][]byte {
	t.Helper()
	cli := e.etcd(t)
	defer func() { _ = cli.Close() }()
	resp, err := cli.Get(context.Background(), prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), prefix)] = kv.Value
	}
	return out
}

// PutEncryptedWith stores plain under key, encrypted with k, as a tenant's
// apiserver would.
func (e *Env) PutEncryptedWith(t *testing.T, k apiserver.EncryptionKey, key, plain string) {
	t.Helper()
	sealed, err := Seal(k, key, plain)
	if err != nil {
		t.Fatal(err)
	}
	cli := e.etcd(t)
	defer func() { _ = cli.Close() }()
	if _, err := cli.Put(context.Background(), key, sealed); err != nil {
		t.Fatal(err)
	}
}

// Seal is plain as kube-apiserver stores it under key with the secretbox
// or aesgcm key k: the same upstream transformers, behind the key's
// prefix.
func Seal(k apiserver.EncryptionKey, key, plain string) (string, error) {
	var tr value.Transformer
	switch k.Provider {
	case v1alpha1.EncryptionSecretbox:
		tr = secretbox.NewSecretboxTransformer([32]byte(k.Secret))
	case v1alpha1.EncryptionAESGCM:
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return "", err
		}
		if tr, err = aestransformer.NewGCMTransformer(block); err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("the tests seal with secretbox or aesgcm, not %s", k.Provider)
	}
	box, err := tr.TransformToStorage(context.Background(), []byte(plain), value.DefaultContext(key))
	if err != nil {
		return "", err
	}
	return k.StoredPrefix() + string(box), nil
}

// WaitGone waits until cfg is deleted.
func (e *Env) WaitGone(t *testing.T, cfg *v1alpha1.ApiServerConfig) {
	t.Helper()
	Eventually(t, 20*time.Second, cfg.Name+" is gone", func() error {
		err := e.Client.Get(context.Background(), client.ObjectKeyFromObject(cfg), &v1alpha1.ApiServerConfig{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return errors.New("still there")
	})
}

// WaitHeld waits until cfg, not being deleted, is Stalled with reason and
// a message that says each of says, Ready False, and has no Deployment.
func (e *Env) WaitHeld(t *testing.T, cfg *v1alpha1.ApiServerConfig, reason string, says ...string) {
	t.Helper()
	Eventually(t, 20*time.Second, cfg.Name+" is held with "+reason, func() error {
		got := Get(t, e.Client, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		c := ConditionOf(got, v1alpha1.ConditionStalled)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason || c.ObservedGeneration != got.Generation {
			return fmt.Errorf("condition Stalled is %v", c)
		}
		for _, s := range says {
			if !strings.Contains(c.Message, s) {
				return fmt.Errorf("condition Stalled says %q, not %q", c.Message, s)
			}
		}
		if r := ConditionOf(got, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse {
			return fmt.Errorf("condition Ready is %v", r)
		}
		return nil
	})
	err := e.Client.Get(context.Background(), client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}, &appsv1.Deployment{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("%s got a Deployment (%v)", cfg.Name, err)
	}
}
