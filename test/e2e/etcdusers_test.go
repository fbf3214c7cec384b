//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/controllers/datastores"
)

// The platform declares the local cluster's tenant etcds a datastore (they
// run with authentication): each tenant on them gets an etcd user limited
// to its prefix, and its apiservers present that user's certificate. A
// tenant's certificate, taken from its Secret (or its pod), reads and
// writes its own keys and nothing of another tenant's; the deleted
// tenant's user is gone.
func TestOperator_TenantsOnADatastoreCannotReadEachOthersKeys(t *testing.T) {
	installOperator(t)
	ctx := context.Background()
	te := cluster.TenantEtcd()
	read := func(path string) []byte {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cs := clientset(t)
	ds := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apiserver-operator-system", Name: "e2e-tenant-etcd", Labels: map[string]string{datastores.Label: "true"}},
		Data: map[string][]byte{
			"endpoints": []byte(te.MainURL + "\n" + te.EventsURL), "ca.crt": read(te.CAFile),
			"client-ca.crt": read(te.CAFile), "client-ca.key": read(te.CAKeyFile),
		},
	}
	if _, err := cs.CoreV1().Secrets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Secrets(ds.Namespace).Delete(context.Background(), ds.Name, metav1.DeleteOptions{})
		// The next test's tenants are created once the operator knows the
		// datastore is gone (it reads its datastores again after 1 s).
		time.Sleep(2 * time.Second)
	})
	// The e2e operator reads its datastores again after 1 s.
	time.Sleep(2 * time.Second)

	c, cfgs, tenants := startTenants(t, tenantSpec{"etcd-user-a", nil}, tenantSpec{"etcd-user-b", nil})
	a, aTenant, b := cfgs[0], tenants[0], cfgs[1]
	if _, err := aTenant.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a-only"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("tenant a writing: %v", err)
	}

	// Each tenant's apiservers present a certificate of its own user, and
	// leave compaction to the platform.
	certOf := func(cfg *v1alpha1.ApiServerConfig) (*pki.KeyPair, []byte) {
		t.Helper()
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.EtcdUserSecretName(cfg.Name)}, s); err != nil {
			t.Fatalf("the tenant's etcd client Secret: %v", err)
		}
		kp, err := pki.ParseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
		if err != nil {
			t.Fatal(err)
		}
		if want := apiserver.EtcdUserName(cfg.Namespace, cfg.Name); kp.Cert().Subject.CommonName != want {
			t.Errorf("%s's etcd certificate is for %q, want its user %q", cfg.Name, kp.Cert().Subject.CommonName, want)
		}
		return kp, s.Data[apiserver.CABundleKey]
	}
	for _, cfg := range []*v1alpha1.ApiServerConfig{a, b} {
		certOf(cfg)
		got := &v1alpha1.ApiServerConfig{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cfg), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.EtcdDatastore != ds.Name {
			t.Errorf("%s's status.etcdDatastore is %q, want %s", cfg.Name, got.Status.EtcdDatastore, ds.Name)
		}
		d := &appsv1.Deployment{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}, d); err != nil {
			t.Fatal(err)
		}
		if args := d.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--etcd-compaction-interval=0s") {
			t.Errorf("%s's apiservers compact: %v", cfg.Name, args)
		}
		mounted := false
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Projected != nil {
				for _, src := range v.Projected.Sources {
					mounted = mounted || (src.Secret != nil && src.Secret.Name == apiserver.EtcdUserSecretName(cfg.Name))
				}
			}
			mounted = mounted || (v.Secret != nil && v.Secret.SecretName == apiserver.EtcdUserSecretName(cfg.Name))
		}
		if !mounted {
			t.Errorf("%s's pods do not mount %s", cfg.Name, apiserver.EtcdUserSecretName(cfg.Name))
		}
	}

	// b's certificate against both etcds: its own keys, nothing of a's.
	bCert, bCA := certOf(b)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bCA)
	asB := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{{Certificate: [][]byte{bCert.Cert().Raw}, PrivateKey: bCert.Key()}}}
	for _, url := range []string{te.MainURL, te.EventsURL} {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: asB, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		own, err := cli.Get(ctx, apiserver.KeysUnder(b.Spec.Etcd.Prefix), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Errorf("b reading its own keys on %s: %v", url, err)
		} else if url == te.MainURL && own.Count == 0 {
			t.Errorf("b reads none of its own keys on %s", url)
		}
		for what, op := range map[string]func() error{
			"list a's keys": func() error {
				_, err := cli.Get(ctx, apiserver.KeysUnder(a.Spec.Etcd.Prefix), clientv3.WithPrefix())
				return err
			},
			"overwrite a's key": func() error {
				_, err := cli.Put(ctx, apiserver.KeysUnder(a.Spec.Etcd.Prefix)+"configmaps/default/a-only", "b's")
				return err
			},
			"list every key": func() error { _, err := cli.Get(ctx, "/", clientv3.WithPrefix()); return err },
			"delete a's keys": func() error {
				_, err := cli.Delete(ctx, apiserver.KeysUnder(a.Spec.Etcd.Prefix), clientv3.WithPrefix())
				return err
			},
			"watch a's keys": func() error {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				for resp := range cli.Watch(wctx, apiserver.KeysUnder(a.Spec.Etcd.Prefix), clientv3.WithPrefix()) {
					if err := resp.Err(); err != nil {
						return err
					}
				}
				return errors.New("the watch ended without a refusal")
			},
		} {
			if err := op(); !errors.Is(err, rpctypes.ErrPermissionDenied) && (err == nil || !strings.Contains(err.Error(), "permission denied")) {
				t.Errorf("b could %s on %s: %v, want permission denied", what, url, err)
			}
		}
	}
	if got, err := aTenant.CoreV1().ConfigMaps("default").Get(ctx, "a-only", metav1.GetOptions{}); err != nil || got.Data["k"] != "v" {
		t.Errorf("a's ConfigMap after b's attempts: %v, %v", got, err)
	}

	// A tenant whose prefix is outside its namespace's gets no user on the
	// datastore and never starts: its status says why.
	outside := localTenant(t, tenantNamespace(t), "etcd-user-c")
	outside.Spec.Etcd.Prefix = "/shared/etcd-user-c"
	if err := c.Create(ctx, outside); err != nil {
		t.Fatal(err)
	}
	wantWhy := "where a tenant's prefix must be under its namespace's, " + apiserver.NewTenantEtcdPrefix(outside.Namespace, "")
	for i := 0; ; i++ {
		got := &v1alpha1.ApiServerConfig{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(outside), got); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(got.Status.Conditions, func(cond metav1.Condition) bool {
			return cond.Reason == v1alpha1.ReasonEtcdDatastore && strings.Contains(cond.Message, wantWhy)
		}) {
			break
		}
		if i == 120 {
			t.Fatalf("a tenant with prefix %s on the datastore: conditions %+v, want reason %s saying %q", outside.Spec.Etcd.Prefix, got.Status.Conditions, v1alpha1.ReasonEtcdDatastore, wantWhy)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, url := range []string{te.MainURL, te.EventsURL} {
		if _, err := tenantEtcd(t, url).UserGet(ctx, apiserver.EtcdUserName(outside.Namespace, outside.Name)); !errors.Is(err, rpctypes.ErrUserNotFound) {
			t.Errorf("the outside tenant's etcd user on %s: %v, want none", url, err)
		}
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: outside.Namespace, Name: apiserver.DeploymentName(outside.Name)}, &appsv1.Deployment{}); err == nil {
		t.Error("the tenant outside its namespace's prefix has a Deployment")
	}

	// Deleting b removes its user from both etcds.
	if err := c.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, c, b, 2*time.Minute)
	for _, url := range []string{te.MainURL, te.EventsURL} {
		if _, err := tenantEtcd(t, url).UserGet(ctx, apiserver.EtcdUserName(b.Namespace, b.Name)); !errors.Is(err, rpctypes.ErrUserNotFound) {
			t.Errorf("b's etcd user on %s after its deletion: %v, want not found", url, err)
		}
	}
}
