//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// repo is the root of the repository.
const repo = "../.."

var (
	installOnce sync.Once
	installErr  error
)

// run runs a bundled tool (bin/NAME) with the cluster's kubeconfig and
// returns its combined output.
func run(t testing.TB, stdin []byte, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "bin", name), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.KubeconfigPath())
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// operatorDeployments are the operator's Deployments as config/default
// installs them: the controllers and the webhook.
var operatorDeployments = []string{"apiserver-operator-controller-manager", "apiserver-operator-webhook"}

// installOperator installs the operator the way a user does,
// `kustomize build config/default | kubectl apply -f -` (through the overlay
// test/e2e/config, which only shortens --stall-after), once per run, and
// waits for its Deployment.
func installOperator(t testing.TB) {
	t.Helper()
	installOnce.Do(func() {
		start := time.Now()
		manifests, err := run(t, nil, "kustomize", "build", filepath.Join(repo, "test", "e2e", "config"))
		if err != nil {
			installErr = fmt.Errorf("kustomize build test/e2e/config (config/default): %w\n%s", err, manifests)
			return
		}
		// On a kept cluster the operator already runs, from an image of the
		// same tag that Up has just imported anew: restart it, or the tests
		// would exercise the previous build.
		_, getErr := run(t, nil, "kubectl", "-n", "apiserver-operator-system", "get", "deployment/apiserver-operator-controller-manager")
		if out, err := run(t, []byte(manifests), "kubectl", "apply", "--server-side", "-f", "-"); err != nil {
			installErr = fmt.Errorf("kubectl apply: %w\n%s", err, out)
			return
		}
		if getErr == nil {
			for _, d := range operatorDeployments {
				if out, err := run(t, nil, "kubectl", "-n", "apiserver-operator-system", "rollout", "restart", "deployment/"+d); err != nil {
					installErr = fmt.Errorf("restarting the operator: %w\n%s", err, out)
					return
				}
			}
		}
		for _, d := range operatorDeployments {
			if out, err := run(t, nil, "kubectl", "-n", "apiserver-operator-system", "rollout", "status",
				"deployment/"+d, "--timeout=180s"); err != nil {
				installErr = fmt.Errorf("the operator did not become available: %w\n%s", err, out)
				return
			}
		}
		fmt.Printf("Operator installed from config/default and available in %s\n", time.Since(start).Round(100*time.Millisecond))
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
	waitForWebhook(t)
}

// waitForWebhook waits until the operator's admission webhook answers (a
// server-side dry run of a valid object passes): after the operator's pods
// restart, creates fail until it does.
func waitForWebhook(t testing.TB) {
	t.Helper()
	c := ctrlClient(t)
	probe := localTenant(t, "default", "webhook-probe")
	var err error
	for range 120 {
		if err = c.Create(context.Background(), probe.DeepCopy(), client.DryRunAll); err == nil {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("the operator's webhook does not answer: %v", err)
}

// ctrlClient is a controller-runtime client of the management cluster.
func ctrlClient(t testing.TB) client.Client {
	t.Helper()
	cfg, err := cluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	// Waiting on ten tenants at once polls more than client-go's default
	// 5 requests a second: its throttling would be measured, not them.
	cfg.QPS, cfg.Burst = 100, 200
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// readSample decodes the file of config/samples called name into obj,
// strictly: a sample the tests use must say what its API takes.
func readSample(t testing.TB, name string, obj any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "config", "samples", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatalf("reading config/samples/%s: %v", name, err)
	}
}

// localTenant reads the local-cluster sample, renamed into namespace ns.
func localTenant(t testing.TB, ns, name string) *v1alpha1.ApiServerConfig {
	t.Helper()
	cfg := &v1alpha1.ApiServerConfig{}
	readSample(t, "controlplane_v1alpha1_apiserverconfig_localcluster.yaml", cfg)
	cfg.Namespace, cfg.Name = ns, name
	cfg.Spec.Etcd.Prefix = "/tenants/" + ns + "/" + name
	return cfg
}

// tenantNamespace creates a namespace with a copy of the tenant etcd's
// client Secret.
func tenantNamespace(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	cs := clientset(t)
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-tenant-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	etcd := cluster.TenantEtcd()
	copySecret(ctx, t, cs, etcd.SecretNamespace, etcd.SecretName, ns.Name)
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	return ns.Name
}

// waitReady waits for the Ready condition of the current generation.
func waitReady(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < timeout {
		got := &v1alpha1.ApiServerConfig{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(cfg), got); err == nil {
			r := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
			if r != nil && r.Status == metav1.ConditionTrue && r.ObservedGeneration == got.Generation && got.Status.ObservedGeneration == got.Generation {
				return time.Since(start)
			}
			if r != nil {
				last = r.Reason + ": " + r.Message
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s/%s was not Ready within %s (last: %s)", cfg.Namespace, cfg.Name, timeout, last)
	return 0
}

// tenantClient reaches a tenant through its NodePort on the node address,
// with the admin kubeconfig the operator wrote, verifying the serving
// certificate as the Service's name.
func tenantClient(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) (*kubernetes.Clientset, *rest.Config) {
	t.Helper()
	cs, rc, err := tenantClientE(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, rc
}

// tenantClientE is tenantClient for goroutines, which may not call t.Fatal.
func tenantClientE(c client.Client, cfg *v1alpha1.ApiServerConfig) (*kubernetes.Clientset, *rest.Config, error) {
	ctx := context.Background()
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.AdminKubeconfigSecretName(cfg.Name)}, secret); err != nil {
		return nil, nil, err
	}
	return kubeconfigClient(c, cfg, secret.Data[apiserver.KubeconfigKey])
}

// kubeconfigClient is a client of cfg's tenant with the credential of a
// kubeconfig the operator wrote, through the tenant's NodePort.
func kubeconfigClient(c client.Client, cfg *v1alpha1.ApiServerConfig, kubeconfig []byte) (*kubernetes.Clientset, *rest.Config, error) {
	ctx := context.Background()
	rc, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	svc := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.ServiceName(cfg.Name)}, svc); err != nil {
		return nil, nil, err
	}
	rc.TLSClientConfig.ServerName = apiserver.ServiceName(cfg.Name) + "." + cfg.Namespace + ".svc"
	rc.Host = fmt.Sprintf("https://%s:%d", cluster.NodeIP(), svc.Spec.Ports[0].NodePort)
	// Generous: on 2 shared cores, a rollout of apiservers can make one
	// request slow; a slow request is not a failed one.
	rc.Timeout = 15 * time.Second
	// Tests create hundreds of objects; client-go's default of 5 requests a
	// second would make them crawl.
	rc.QPS, rc.Burst = 200, 400
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	return cs, rc, nil
}

// clientLoop calls the tenant every interval until stopped and counts the
// failed calls, as a user's client would notice them.
type clientLoop struct {
	ok, failed atomic.Int64
	slowest    atomic.Int64 // nanoseconds
	lastErr    atomic.Value
	stop       chan struct{}
	done       chan struct{}
	// took is every call's duration, in order.
	mu   sync.Mutex
	took []time.Duration
}

func startClientLoop(call func(context.Context) error, interval time.Duration) *clientLoop {
	l := &clientLoop{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for range 100000 { // bounded: stop() ends it long before
			select {
			case <-l.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			start := time.Now()
			err := call(ctx)
			d := time.Since(start)
			if int64(d) > l.slowest.Load() {
				l.slowest.Store(int64(d))
			}
			l.mu.Lock()
			l.took = append(l.took, d)
			l.mu.Unlock()
			if err != nil {
				l.failed.Add(1)
				l.lastErr.Store(err.Error())
			} else {
				l.ok.Add(1)
			}
			cancel()
			time.Sleep(interval)
		}
	}()
	return l
}

// calls is how many calls the loop has made so far.
func (l *clientLoop) calls() int64 { return l.ok.Load() + l.failed.Load() }

// stopped ends the loop.
func (l *clientLoop) stopped() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// quantile is the q-quantile (0.99 for p99) of the calls' durations.
func (l *clientLoop) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.took) == 0 {
		return 0
	}
	sorted := slices.Clone(l.took)
	slices.Sort(sorted)
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func (l *clientLoop) finish(t testing.TB, what string) {
	t.Helper()
	l.stopped()
	t.Logf("%s: %d requests, %d failed, p99 %s, slowest %s", what, l.ok.Load()+l.failed.Load(), l.failed.Load(),
		l.quantile(0.99).Round(time.Millisecond), time.Duration(l.slowest.Load()).Round(time.Millisecond))
	if l.failed.Load() > 0 {
		t.Errorf("%s: %d of %d requests failed (last: %v)", what, l.failed.Load(), l.ok.Load()+l.failed.Load(), l.lastErr.Load())
	}
	if l.ok.Load() == 0 {
		t.Errorf("%s: no request succeeded", what)
	}
}

// apiserverPods are the apiserver pods of cfg, as the management cluster
// lists them.
func apiserverPods(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := c.List(context.Background(), pods, client.InNamespace(cfg.Namespace), client.MatchingLabels(apiserver.SelectorLabels(cfg.Name))); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// startPolling calls read every interval, in a goroutine, until the
// returned stop is called; stop waits for the last call to end.
func startPolling(interval time.Duration, read func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			read(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// managementKubectl is kubectl against the management cluster.
func managementKubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := run(t, nil, "kubectl", args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func yamlOf(obj any) ([]byte, error) { return yaml.Marshal(obj) }

func clientKey(obj client.Object) client.ObjectKey { return client.ObjectKeyFromObject(obj) }

// getTenant is cfg as the management cluster has it now.
func getTenant(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) *v1alpha1.ApiServerConfig {
	t.Helper()
	got := &v1alpha1.ApiServerConfig{}
	if err := c.Get(context.Background(), clientKey(cfg), got); err != nil {
		t.Fatalf("reading ApiServerConfig %s/%s: %v", cfg.Namespace, cfg.Name, err)
	}
	return got
}

// tenantKubectl runs kubectl against a tenant with its admin kubeconfig,
// through the NodePort.
func tenantKubectl(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, args ...string) string {
	t.Helper()
	out, err := run(t, nil, "kubectl", append(tenantKubectlArgs(t, c, cfg), args...)...)
	if err != nil {
		t.Fatalf("kubectl %s against the tenant: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// tenantKubectlArgs are kubectl's flags that reach the tenant through its
// NodePort with the admin kubeconfig the operator wrote.
func tenantKubectlArgs(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) []string {
	t.Helper()
	ctx := context.Background()
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.AdminKubeconfigSecretName(cfg.Name)}, secret); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tenant.kubeconfig")
	if err := os.WriteFile(path, secret.Data[apiserver.KubeconfigKey], 0o600); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.ServiceName(cfg.Name)}, svc); err != nil {
		t.Fatal(err)
	}
	return []string{"--kubeconfig", path,
		"--server", fmt.Sprintf("https://%s:%d", cluster.NodeIP(), svc.Spec.Ports[0].NodePort),
		"--tls-server-name", apiserver.ServiceName(cfg.Name) + "." + cfg.Namespace + ".svc"}
}

// waitReachable waits until the tenant answers through its NodePort:
// kube-proxy programs a new Service's rules a moment after its pods are
// ready.
func waitReachable(t testing.TB, tenant *kubernetes.Clientset) {
	t.Helper()
	var err error
	for range 60 {
		if _, err = tenant.Discovery().ServerVersion(); err == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("the tenant is not reachable through its NodePort: %v", err)
}

// startTenant installs the operator if needed, creates the local-cluster
// sample as name in a namespace of its own (changed by mutate), and waits
// until it is Ready and reachable through its NodePort.
func startTenant(t testing.TB, name string, mutate func(*v1alpha1.ApiServerConfig)) (client.Client, *v1alpha1.ApiServerConfig, *kubernetes.Clientset) {
	t.Helper()
	c, cfgs, tenants := startTenants(t, tenantSpec{name, mutate})
	return c, cfgs[0], tenants[0]
}

// tenantSpec names a tenant of startTenants and changes the sample for it.
type tenantSpec struct {
	name   string
	mutate func(*v1alpha1.ApiServerConfig)
}

// startTenants is startTenant for several tenants: it creates them all,
// then waits for each, so that their apiservers start side by side.
func startTenants(t testing.TB, specs ...tenantSpec) (client.Client, []*v1alpha1.ApiServerConfig, []*kubernetes.Clientset) {
	t.Helper()
	installOperator(t)
	c := ctrlClient(t)
	var cfgs []*v1alpha1.ApiServerConfig
	for _, s := range specs {
		cfg := localTenant(t, tenantNamespace(t), s.name)
		if s.mutate != nil {
			s.mutate(cfg)
		}
		if err := c.Create(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, cfg)
	}
	var tenants []*kubernetes.Clientset
	for _, cfg := range cfgs {
		waitReady(t, c, cfg, 3*time.Minute)
		tenant, _ := tenantClient(t, c, cfg)
		waitReachable(t, tenant)
		tenants = append(tenants, tenant)
	}
	return c, cfgs, tenants
}
