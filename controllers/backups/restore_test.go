package backups_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/controllers/backups"
	"github.com/apiserver-operator/apiserver-operator/controllers/controllertest"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenants"
)

// stallingProxy forwards TCP connections to target until stall() is
// called; from then on it accepts connections and never answers (an S3
// endpoint that hangs).
type stallingProxy struct {
	lis     net.Listener
	stalled atomic.Bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

func newStallingProxy(t *testing.T, target string) *stallingProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallingProxy{lis: lis, stop: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer func() { _ = c.Close() }()
				if p.stalled.Load() {
					<-p.stop
					return
				}
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer func() { _ = up.Close() }()
				go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	t.Cleanup(func() { close(p.stop); _ = lis.Close(); p.wg.Wait() })
	return p
}

// A restore whose archive store stops answering holds no reconcile
// worker: more tenants restoring from a stalled S3 endpoint than the
// operator has workers, and another tenant still converges at once. The
// restoring tenants say that they restore.
func TestApiServerConfigReconciler_AStalledS3EndpointDelaysNoOtherTenant(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	target, _ := s3Server(t, "tenant-backups")
	proxy := newStallingProxy(t, target)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-credentials"},
		Data: map[string][]byte{backups.S3AccessKeyIDKey: []byte("test-access"), backups.S3SecretAccessKeyKey: []byte("test-secret-key")}}
	if err := env.Client.Create(ctx, creds); err != nil {
		t.Fatal(err)
	}
	src := env.Tenant(ns, "source", nil)
	env.CreateReady(t, src)
	env.PutKeys(t, src.Spec.Etcd.Prefix+"/configmaps/default/cm-", 50)
	b := &v1alpha1.ApiServerBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "through-proxy"},
		Spec: v1alpha1.ApiServerBackupSpec{ApiServerConfigName: src.Name, Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{
			Endpoint: proxy.lis.Addr().String(), Bucket: "tenant-backups", CredentialsSecretName: creds.Name, Insecure: true}}}}
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, b)

	// The endpoint hangs; more tenants restore from it than there are
	// reconcile workers.
	proxy.stalled.Store(true)
	workers := tenants.DefaultMaxConcurrentReconciles
	var restoring []*v1alpha1.ApiServerConfig
	for i := range workers + 1 {
		r := env.Tenant(ns, fmt.Sprintf("restoring-%d", i), func(s *v1alpha1.ApiServerConfigSpec) { s.Restore = &v1alpha1.RestoreSpec{BackupName: b.Name} })
		if err := env.Client.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		restoring = append(restoring, r)
	}
	for _, r := range restoring {
		controllertest.Eventually(t, 20*time.Second, r.Name+" says it restores", func() error {
			got := controllertest.Get(t, env.Client, &v1alpha1.ApiServerConfig{ObjectMeta: r.ObjectMeta})
			if c := controllertest.ConditionOf(got, v1alpha1.ConditionReady); c == nil || c.Reason != v1alpha1.ReasonRestoring {
				return fmt.Errorf("Ready is %v", c)
			}
			return nil
		})
	}
	// Another tenant converges as it would alone (createReady's bounds:
	// its Deployment within 30 s, Ready 20 s later), while every restore
	// waits on the endpoint for longer than that.
	other := env.Tenant(ns, "unrelated", nil)
	env.CreateReady(t, other)
	for _, r := range restoring {
		if c := controllertest.ConditionOf(controllertest.Get(t, env.Client, &v1alpha1.ApiServerConfig{ObjectMeta: r.ObjectMeta}), v1alpha1.ConditionReady); c == nil || c.Reason != v1alpha1.ReasonRestoring {
			t.Fatalf("%s: Ready is %v while its store hangs", r.Name, c)
		}
	}
	for _, r := range restoring {
		if err := env.Client.Delete(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range restoring {
		env.WaitGone(t, r)
	}
}
