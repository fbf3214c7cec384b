package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/test/envtest"
)

func init() {
	// The benchmark's own informers have nothing to say.
	log.SetLogger(zap.New(zap.WriteTo(io.Discard)))
}

// startEnv starts the bundled kube-apiserver and etcd, with a Service range
// wide enough for a thousand tenants (envtest's default has 254 addresses).
func startEnv(b testing.TB) *envtest.Environment {
	b.Helper()
	env, err := envtest.Start(envtest.WithAPIServerFlag("service-cluster-ip-range", "10.0.0.0/16"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	return env
}

// intFromEnv reads a positive integer setting, such as the number of
// objects, so that CI can run the benchmarks small.
func intFromEnv(b testing.TB, key string, def int) int {
	b.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", key, v)
	}
	return n
}

func durationFromEnv(b testing.TB, key string, def time.Duration) time.Duration {
	b.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a positive duration such as 5m", key, v)
	}
	return d
}

// tenants are n ApiServerConfigs, one namespace each as platforms lay them
// out, all on the test etcd (reachable, so that the etcd check passes).
func tenants(env *envtest.Environment, prefix string, n int) []*v1alpha1.ApiServerConfig {
	out := make([]*v1alpha1.ApiServerConfig, n)
	for i := range out {
		ns := fmt.Sprintf("%s-%04d", prefix, i)
		out[i] = &v1alpha1.ApiServerConfig{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"},
			Spec: v1alpha1.ApiServerConfigSpec{
				Etcd: v1alpha1.EtcdSpec{Servers: []string{env.ControlPlane.Etcd.URL.String()}, Prefix: "/tenants/" + ns},
			},
		}
	}
	return out
}

// parallel runs fn for each object with a few workers, as a GitOps tool
// applying a directory does, and returns the first error.
func parallel(objs []*v1alpha1.ApiServerConfig, fn func(*v1alpha1.ApiServerConfig) error) error {
	const workers = 8
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	next := make(chan *v1alpha1.ApiServerConfig)
	for range workers {
		wg.Go(func() {
			for o := range next {
				if err := fn(o); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	for _, o := range objs {
		next <- o
	}
	close(next)
	wg.Wait()
	return first
}

func createNamespaces(b testing.TB, c client.Client, objs []*v1alpha1.ApiServerConfig) {
	b.Helper()
	err := parallel(objs, func(o *v1alpha1.ApiServerConfig) error {
		return c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.Namespace}})
	})
	if err != nil {
		b.Fatalf("creating the tenants' namespaces: %v", err)
	}
}

func createAll(b testing.TB, c client.Client, objs []*v1alpha1.ApiServerConfig) {
	b.Helper()
	if err := parallel(objs, func(o *v1alpha1.ApiServerConfig) error { return c.Create(context.Background(), o) }); err != nil {
		b.Fatalf("creating the ApiServerConfigs: %v", err)
	}
}

// converged says whether the operator finished with cfg's generation:
// status written for it, certificates issued, etcd checked, no step failed.
// The status is written last, after every owned object was applied.
func converged(cfg *v1alpha1.ApiServerConfig) bool {
	if cfg.Generation == 0 || cfg.Status.ObservedGeneration != cfg.Generation {
		return false
	}
	for t, want := range map[string]metav1.ConditionStatus{
		v1alpha1.ConditionCertificatesReady: metav1.ConditionTrue,
		v1alpha1.ConditionEtcdAvailable:     metav1.ConditionTrue,
		v1alpha1.ConditionDegraded:          metav1.ConditionFalse,
	} {
		if c := meta.FindStatusCondition(cfg.Status.Conditions, t); c == nil || c.Status != want || c.ObservedGeneration != cfg.Generation {
			return false
		}
	}
	return true
}

func ready(cfg *v1alpha1.ApiServerConfig) bool {
	c := meta.FindStatusCondition(cfg.Status.Conditions, v1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == cfg.Generation
}

// watcher records, from watch events, when each ApiServerConfig first
// satisfied a condition and when each apiserver Deployment first appeared.
type watcher struct {
	mu          sync.Mutex
	cond        func(*v1alpha1.ApiServerConfig) bool
	seen        map[string]time.Time // ApiServerConfigs that satisfied cond
	deployments map[string]time.Time // namespace of each Deployment
	changed     chan struct{}
	cache       cache.Cache
}

func key(o client.Object) string { return o.GetNamespace() + "/" + o.GetName() }

// watch starts informers on ApiServerConfigs and Deployments, stopped when
// the benchmark ends.
func watch(b testing.TB, env *envtest.Environment, cond func(*v1alpha1.ApiServerConfig) bool) *watcher {
	b.Helper()
	w := &watcher{cond: cond, seen: map[string]time.Time{}, deployments: map[string]time.Time{}, changed: make(chan struct{}, 1)}
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	w.cache = c
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	cfgs, err := c.GetInformer(ctx, &v1alpha1.ApiServerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	onConfig := func(obj any) {
		cfg, ok := obj.(*v1alpha1.ApiServerConfig)
		if !ok || !w.cond(cfg) {
			return
		}
		w.note(w.seen, key(cfg))
	}
	if _, err := cfgs.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onConfig, UpdateFunc: func(_, obj any) { onConfig(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	deploys, err := c.GetInformer(ctx, &appsv1.Deployment{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := deploys.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if d, ok := obj.(*appsv1.Deployment); ok {
			w.note(w.deployments, d.Namespace)
		}
	}}); err != nil {
		b.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("the benchmark's informers did not sync")
	}
	return w
}

func (w *watcher) note(m map[string]time.Time, k string) {
	now := time.Now()
	w.mu.Lock()
	if _, ok := m[k]; !ok {
		m[k] = now
	}
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// waitFor waits, bounded by timeout, until done holds, checking it on every
// change the informers see.
func (w *watcher) waitFor(b testing.TB, timeout time.Duration, what string, done func() (bool, string)) {
	b.Helper()
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		ok, progress := done()
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-w.changed:
		case <-time.After(time.Second):
		case <-deadline:
			b.Fatalf("%s: not done within %s (%s)", what, timeout, progress)
		}
	}
}

// waitAll waits until every object of objs satisfied the watcher's
// condition.
func (w *watcher) waitAll(b testing.TB, objs []*v1alpha1.ApiServerConfig, timeout time.Duration, what string) {
	b.Helper()
	w.waitFor(b, timeout, what, func() (bool, string) {
		n := 0
		for _, o := range objs {
			if _, ok := w.seen[key(o)]; ok {
				n++
			}
		}
		return n == len(objs), fmt.Sprintf("%d of %d", n, len(objs))
	})
}

// times returns, sorted, how long after start each object satisfied the
// condition.
func (w *watcher) times(objs []*v1alpha1.ApiServerConfig, start time.Time) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]time.Duration, 0, len(objs))
	for _, o := range objs {
		if t, ok := w.seen[key(o)]; ok {
			out = append(out, t.Sub(start))
		}
	}
	slices.Sort(out)
	return out
}

// checkOwnedObjects fails unless every tenant has its Service, ConfigMap,
// Deployment and PKI Secrets: convergence must mean the objects exist.
func checkOwnedObjects(b testing.TB, c client.Client, objs []*v1alpha1.ApiServerConfig) {
	b.Helper()
	ctx := context.Background()
	for _, o := range objs {
		for _, obj := range []client.Object{
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: apiserver.ServiceName(o.Name)}},
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: apiserver.DeploymentName(o.Name)}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: apiserver.CASecretName(o.Name)}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: apiserver.AdminKubeconfigSecretName(o.Name)}},
		} {
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				b.Fatalf("%s converged but its %T %s is missing: %v", key(o), obj, obj.GetName(), err)
			}
		}
	}
}

// actAsDeploymentController marks every tenant's Deployment rolled out and
// available, as kube-controller-manager would once the pods are ready
// (envtest runs no controllers).
func actAsDeploymentController(b testing.TB, c client.Client, objs []*v1alpha1.ApiServerConfig) {
	b.Helper()
	err := parallel(objs, func(o *v1alpha1.ApiServerConfig) error {
		d := &appsv1.Deployment{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: o.Namespace, Name: apiserver.DeploymentName(o.Name)}, d); err != nil {
			return err
		}
		n := *d.Spec.Replicas
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
		return c.Status().Update(context.Background(), d)
	})
	if err != nil {
		b.Fatalf("marking the Deployments available: %v", err)
	}
}

// writeSeries writes one duration per line, in seconds, to $BENCH_OUT/name
// when BENCH_OUT is set: the data behind the README's plot.
func writeSeries(b testing.TB, name string, ds []time.Duration) {
	b.Helper()
	dir := os.Getenv("BENCH_OUT")
	if dir == "" {
		return
	}
	var sb strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&sb, "%.4f\n", d.Seconds())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
}

// percentile of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
