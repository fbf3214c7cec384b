package boot

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// etcdClientAs is a client of endpoint that authenticates as the common
// name of cert, a certificate of ca.
func etcdClientAs(t *testing.T, endpoint string, ca, cert *pki.KeyPair) *clientv3.Client {
	t.Helper()
	tlsConfig := &tls.Config{RootCAs: x509.NewCertPool(), Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Cert().Raw}, PrivateKey: cert.Key()}}}
	tlsConfig.RootCAs.AddCert(ca.Cert())
	cli := must(clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsConfig, DialTimeout: 10 * time.Second}))
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func userCert(t *testing.T, ca *pki.KeyPair, user string) *pki.KeyPair {
	t.Helper()
	return must(pki.NewSignedCert(ca, pki.CertConfig{CommonName: user, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ecdsa, time.Hour, time.Now()))
}

// On an etcd with authentication, each tenant's user may touch its own
// keys only: the bundled kube-apiserver serves with such a user (leaving
// compaction to the platform, which alone may compact), while a
// certificate of another tenant's user (taken from its pod, say) reads
// nothing of it, not even a neighbour whose prefix begins with the same
// characters.
func TestRenderedAPIServer_ServesWithAnEtcdUserLimitedToItsPrefix(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	etcdCA := must(pki.NewSelfSignedCA("etcd-ca", ecdsa, 24*time.Hour, time.Now()))
	endpoint, _, _ := etcdServer(t, dir, "shared", etcdCA)

	// The platform's side: a root user, authenticated by its certificate,
	// and authentication on.
	root := etcdClientAs(t, endpoint, etcdCA, userCert(t, etcdCA, "root"))
	if _, err := root.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		t.Fatal(err)
	}
	must(root.UserGrantRole(ctx, "root", "root"))
	must(root.AuthEnable(ctx))

	// The operator's side: a user per tenant. b's role held a permission
	// too wide, which goes; a second pass changes nothing.
	aUser, bUser := apiserver.EtcdUserName("tenants", "a"), apiserver.EtcdUserName("tenants", "ab")
	must(root.RoleAdd(ctx, bUser))
	must(root.RoleGrantPermission(ctx, bUser, "/", "0", clientv3.PermissionType(clientv3.PermReadWrite)))
	for range 2 {
		if err := tenantio.EnsureEtcdUser(ctx, root, aUser, apiserver.EtcdRolePermissions("/tenants/a")); err != nil {
			t.Fatal(err)
		}
		if err := tenantio.EnsureEtcdUser(ctx, root, bUser, apiserver.EtcdRolePermissions("/tenants/ab")); err != nil {
			t.Fatal(err)
		}
	}
	role := must(root.RoleGet(ctx, bUser))
	if len(role.Perm) != 1 || string(role.Perm[0].Key) != "/tenants/ab/" || string(role.Perm[0].RangeEnd) != "/tenants/ab0" {
		t.Errorf("b's role holds %v, want read and write on its prefix alone", role.Perm)
	}

	// Tenant a's kube-apiserver, with a certificate of its user, rendered as
	// the operator renders a tenant of a datastore (no compactor).
	aCert := userCert(t, etcdCA, aUser)
	cfg := &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "tenants"},
		Spec: v1alpha1.ApiServerConfigSpec{
			EndpointReconcilerType: v1alpha1.EndpointReconcilerNone,
			Etcd:                   v1alpha1.EtcdSpec{Servers: []string{endpoint}, Prefix: "/tenants/a", TLS: &v1alpha1.EtcdTLS{SecretName: "etcd-client"}},
			ServiceClusterIPRange:  []string{"10.121.0.0/16"},
			Serving:                v1alpha1.ServingSpec{SecurePort: int32(freePort(t))},
			ExtraArgs:              []v1alpha1.ExtraArg{{Name: "bind-address", Value: "127.0.0.1"}},
		},
	}
	a := boot(t, dir, cfg, etcdCA, aCert, aUser)
	if args := a.args; !slices.Contains(args, "--etcd-compaction-interval=0s") {
		t.Errorf("a tenant with an etcd user of its own compacts: %q", args)
	}
	ns := must(a.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}, metav1.CreateOptions{}))
	must(a.cs.CoreV1().ConfigMaps(ns.Name).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}))

	// A watch and a list, as its controllers and clients run them.
	w := must(a.cs.CoreV1().ConfigMaps(ns.Name).Watch(ctx, metav1.ListOptions{}))
	must(a.cs.CoreV1().ConfigMaps(ns.Name).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched"}}, metav1.CreateOptions{}))
	select {
	case <-w.ResultChan():
	case <-time.After(30 * time.Second):
		t.Fatal("a watch of the tenant's ConfigMaps saw nothing within 30 s")
	}
	w.Stop()
	if list := must(a.cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})); len(list.Items) < 2 {
		t.Errorf("the tenant lists %d ConfigMaps, want at least its two", len(list.Items))
	}

	// Nothing kube-apiserver did was refused: it needs no key outside its
	// prefix.
	if log := must(os.ReadFile(filepath.Join(dir, "kube-apiserver.log"))); strings.Contains(strings.ToLower(string(log)), "permission denied") {
		t.Errorf("etcd refused kube-apiserver something:\n%s", grepLines(string(log), "ermission denied", 5))
	}

	// Tenant b's user reads and writes its own keys, and nothing of a's.
	b := etcdClientAs(t, endpoint, etcdCA, userCert(t, etcdCA, bUser))
	if _, err := b.Put(ctx, "/tenants/ab/configmaps/x/y", "b's"); err != nil {
		t.Errorf("b writing under its own prefix: %v", err)
	}
	if _, err := b.Get(ctx, "/tenants/ab/", clientv3.WithPrefix()); err != nil {
		t.Errorf("b reading its own prefix: %v", err)
	}
	for what, op := range map[string]func() error{
		"list a's keys":      func() error { _, err := b.Get(ctx, "/tenants/a/", clientv3.WithPrefix()); return err },
		"read a's namespace": func() error { _, err := b.Get(ctx, "/tenants/a/namespaces/kept"); return err },
		"list every tenant":  func() error { _, err := b.Get(ctx, "/tenants/", clientv3.WithPrefix()); return err },
		"overwrite a's key":  func() error { _, err := b.Put(ctx, "/tenants/a/namespaces/kept", "b's"); return err },
		"delete a's keys":    func() error { _, err := b.Delete(ctx, "/tenants/a/", clientv3.WithPrefix()); return err },
		"read a's through a txn": func() error {
			_, err := b.Txn(ctx).Then(clientv3.OpGet("/tenants/a/namespaces/kept")).Commit()
			return err
		},
		"watch a's keys": func() error {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			for resp := range b.Watch(wctx, "/tenants/a/", clientv3.WithPrefix()) {
				if err := resp.Err(); err != nil {
					return err
				}
				if len(resp.Events) > 0 {
					return fmt.Errorf("b saw %d events of a's keys", len(resp.Events))
				}
			}
			return errors.New("the watch ended without a refusal")
		},
	} {
		if err := op(); !errors.Is(err, rpctypes.ErrPermissionDenied) && (err == nil || !strings.Contains(err.Error(), "permission denied")) {
			t.Errorf("b could %s: %v, want permission denied", what, err)
		}
	}
	// What a stored is intact, and still served by a.
	if got, err := a.cs.CoreV1().ConfigMaps(ns.Name).Get(ctx, "mine", metav1.GetOptions{}); err != nil || got.Data["k"] != "v" {
		t.Errorf("a's ConfigMap after b's attempts: %v, %v", got, err)
	}

	// Removing a user removes its role too, and its certificate opens
	// nothing any more.
	if err := tenantio.RemoveEtcdUser(ctx, root, bUser); err != nil {
		t.Fatal(err)
	}
	if err := tenantio.RemoveEtcdUser(ctx, root, bUser); err != nil {
		t.Errorf("removing a removed user: %v", err)
	}
	if _, err := root.RoleGet(ctx, bUser); !errors.Is(err, rpctypes.ErrRoleNotFound) {
		t.Errorf("b's role after its removal: %v", err)
	}
	if _, err := b.Get(ctx, "/tenants/ab/", clientv3.WithPrefix()); err == nil {
		t.Error("b's certificate still reads after its user was removed")
	}
}

// grepLines are the first n lines of log that contain s.
func grepLines(log, s string, n int) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) && len(out) < n {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
