package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// BenchmarkReferenceCache measures what the users' Secrets cost the
// operator's memory: the operator watches every Secret and ConfigMap of
// the namespaces it serves, so that creating one a spec names brings that
// spec back at once. BENCH_REFCACHE_SECRETS Secrets (default 100 000, in
// 100 namespaces, each with the labels, annotations and data of a Helm
// release's) are created while the operator runs; then a Secret a tenant
// names is created last, and once the tenant's status has seen it (so the
// operator's cache holds every Secret before it), the operator's RSS is
// compared with its RSS before.
func BenchmarkReferenceCache(b *testing.B) {
	n := intFromEnv(b, "BENCH_REFCACHE_SECRETS", 100000)
	for range b.N {
		s := &scope{TB: b}
		env := startEnv(s)
		const namespaces = 100
		cfg := rest.CopyConfig(env.Config)
		cfg.QPS, cfg.Burst = -1, 0
		c, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		for i := range namespaces {
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("users-%03d", i)}}); err != nil {
				b.Fatal(err)
			}
		}
		tenant := &v1alpha1.ApiServerConfig{
			ObjectMeta: metav1.ObjectMeta{Namespace: "users-000", Name: "tenant"},
			Spec: v1alpha1.ApiServerConfigSpec{Etcd: v1alpha1.EtcdSpec{
				Servers: []string{env.ControlPlane.Etcd.URL.String()}, TLS: &v1alpha1.EtcdTLS{SecretName: "marker"},
			}},
		}
		sawMarker := func(cfg *v1alpha1.ApiServerConfig) bool {
			for _, cond := range cfg.Status.Conditions {
				if strings.Contains(cond.Message, "users-000/marker named by spec.etcd.tls.secretName has no key") {
					return true
				}
			}
			return false
		}
		w := watch(s, env, sawMarker)
		op := startOperator(s, env)
		if err := c.Create(ctx, tenant); err != nil {
			b.Fatal(err)
		}
		op.waitIdle(s, time.Minute)
		before := op.usage(s)

		b.StartTimer()
		work := make(chan int)
		var wg sync.WaitGroup
		var once sync.Once
		var first error
		for range 16 {
			wg.Go(func() {
				for i := range work {
					secret := &corev1.Secret{
						ObjectMeta: metav1.ObjectMeta{
							Namespace: fmt.Sprintf("users-%03d", i%namespaces), Name: fmt.Sprintf("sh.helm.release.v1.app-%d.v1", i),
							Labels: map[string]string{"owner": "helm", "name": fmt.Sprintf("app-%d", i), "status": "deployed", "version": "1"},
							Annotations: map[string]string{"meta.helm.sh/release-name": fmt.Sprintf("app-%d", i),
								"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 300)},
						},
						Type: "helm.sh/release.v1",
						Data: map[string][]byte{"release": []byte(strings.Repeat("r", 1024))},
					}
					if err := c.Create(ctx, secret); err != nil {
						once.Do(func() { first = err })
					}
				}
			})
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
		if first != nil {
			b.Fatalf("creating the Secrets: %v", first)
		}
		if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "users-000", Name: "marker"}}); err != nil {
			b.Fatal(err)
		}
		w.waitFor(s, 5*time.Minute, "the tenant's status sees the Secret created last", func() (bool, string) {
			if _, ok := w.seen[key(tenant)]; ok {
				return true, ""
			}
			got := &v1alpha1.ApiServerConfig{}
			_ = c.Get(ctx, client.ObjectKeyFromObject(tenant), got)
			return false, fmt.Sprintf("its conditions: %v", got.Status.Conditions)
		})
		b.StopTimer()
		after := op.usage(s)
		grown := float64(after.peakRSS) - float64(before.peakRSS)
		b.ReportMetric(float64(after.peakRSS)/(1<<20), "peak-rss-MiB")
		b.ReportMetric(grown/float64(n), "rss-bytes/secret")
		s.close()
	}
}
