//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/test/burst"
	"github.com/apiserver-operator/apiserver-operator/test/testport"
)

// readyzClient probes /readyz, which answers anonymous requests. It only
// times readiness, so it does not verify the serving certificate.
var readyzClient = &http.Client{
	Timeout: 2 * time.Second,
	Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a readiness timer, not a trust decision
		DisableKeepAlives: true,
	},
}

// waitReadyz polls url every 50 ms until it answers 200, and returns when
// it did.
func waitReadyz(ctx context.Context, url string) (time.Time, error) {
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
		if err != nil {
			return time.Time{}, err
		}
		resp, err := readyzClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s did not answer 200 (last: %s): %w", url, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tenantReadyz waits for cfg's Service to get its NodePort and then for
// /readyz through it, bounded by ctx.
func tenantReadyz(ctx context.Context, c client.Client, cfg *v1alpha1.ApiServerConfig) (time.Time, error) {
	svc := &corev1.Service{}
	for {
		err := c.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.ServiceName(cfg.Name)}, svc)
		if err == nil && len(svc.Spec.Ports) > 0 && svc.Spec.Ports[0].NodePort != 0 {
			break
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("the Service of %s/%s has no NodePort: %w", cfg.Namespace, cfg.Name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return waitReadyz(ctx, fmt.Sprintf("https://%s:%d/readyz", cluster.NodeIP(), svc.Spec.Ports[0].NodePort))
}

// whenPodReady polls, every 50 ms, until a pod of cfg is Ready in the API,
// and returns when it saw that (zero when ctx ends first).
func whenPodReady(ctx context.Context, c client.Client, cfg *v1alpha1.ApiServerConfig) time.Time {
	for {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(cfg.Namespace), client.MatchingLabels(apiserver.SelectorLabels(cfg.Name))); err == nil {
			for _, p := range pods.Items {
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
						return time.Now()
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// removeTenant deletes cfg and waits, bounded, until its pods are gone, so
// that the next measurement runs on an idle node.
func removeTenant(b testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) {
	b.Helper()
	ctx := context.Background()
	if err := client.IgnoreNotFound(c.Delete(ctx, cfg)); err != nil {
		b.Fatal(err)
	}
	waitNoPods(b, c, cfg)
}

func waitNoPods(b testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig) {
	b.Helper()
	waitNoPodsLabelled(b, c, cfg.Namespace, apiserver.SelectorLabels(cfg.Name), fmt.Sprintf("the apiserver pods of %s/%s", cfg.Namespace, cfg.Name))
}

// waitNoPodsLabelled waits, bounded, until no pod of namespace ns carries
// labels.
func waitNoPodsLabelled(b testing.TB, c client.Client, ns string, labels map[string]string, what string) {
	b.Helper()
	for range 240 {
		pods := &corev1.PodList{}
		if err := c.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			b.Fatal(err)
		}
		if len(pods.Items) == 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	b.Fatalf("%s did not go away within 2 minutes", what)
}

// BenchmarkTenantReadyz compares, in the same run, the time from applying
// an ApiServerConfig to its /readyz answering 200 through the NodePort,
// with the time the same kube-apiserver binary takes to answer /readyz
// when started by hand on the host with the same flags and files (ratio:
// what the operator and the platform add: reconciling, scheduling, the
// container start, probes and Service routing), and with the time the
// same pod takes applied by hand as a Deployment and a Service
// (ratio-to-pod: what the operator adds).
func BenchmarkTenantReadyz(b *testing.B) {
	installOperator(b)
	c := ctrlClient(b)
	b.StopTimer()
	var viaOperator, podByHand, byHand time.Duration
	for range b.N {
		// Timed, cleanup included, only so that a plain -bench run keeps
		// b.N at 1: the figures are the metrics.
		b.StartTimer()
		op, pod, hand := tenantAgainstHand(b, c)
		b.StopTimer()
		viaOperator += op
		podByHand += pod
		byHand += hand
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(viaOperator.Seconds()/n, "operator-s/op")
	b.ReportMetric(podByHand.Seconds()/n, "pod-by-hand-s/op")
	b.ReportMetric(byHand.Seconds()/n, "by-hand-s/op")
	b.ReportMetric(viaOperator.Seconds()/byHand.Seconds(), "ratio")
	b.ReportMetric(viaOperator.Seconds()/podByHand.Seconds(), "ratio-to-pod")
}

// tenantAgainstHand times one tenant three ways: applied as an
// ApiServerConfig; its pod (the operator's Deployment, copied) and a
// NodePort Service applied by hand, as a platform without the operator
// would; and its kube-apiserver started by hand on the host. Each starts on
// an idle node and on an etcd prefix of its own.
func tenantAgainstHand(b *testing.B, c client.Client) (viaOperator, podByHand, byHand time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := localTenant(b, tenantNamespace(b), "bench")
	// The hand-started apiservers' data: the operator deletes only the
	// tenant's own.
	b.Cleanup(func() { dropKeys(b, cfg.Spec.Etcd.Prefix+"-pod-by-hand/", cfg.Spec.Etcd.Prefix+"-by-hand/") })

	start := time.Now()
	podReady := make(chan time.Time, 1)
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	go func() { podReady <- whenPodReady(watchCtx, c, cfg) }()
	if err := c.Create(ctx, cfg); err != nil {
		b.Fatal(err)
	}
	ready, err := tenantReadyz(ctx, c, cfg)
	if err != nil {
		b.Fatal(err)
	}
	viaOperator = ready.Sub(start)
	stopWatching()
	if t := <-podReady; !t.IsZero() {
		b.Logf("pod Ready in the API after %s, /readyz through the NodePort after %s", t.Sub(start).Round(time.Millisecond), viaOperator.Round(time.Millisecond))
	}

	// The same flags and files, read from what the operator rendered.
	deploy := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: apiserver.DeploymentName(cfg.Name)}, deploy); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	args, env := handArgs(b, c, deploy, dir)
	// The operator's pod goes first, so that the others run on an idle
	// node too; hibernated, the tenant keeps the Secrets and ConfigMap the
	// copied pod mounts.
	if err := c.Patch(ctx, cfg, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"masterCount":0}}`))); err != nil {
		b.Fatal(err)
	}
	waitNoPods(b, c, cfg)
	podByHand = runPodByHand(b, ctx, c, deploy)
	removeTenant(b, c, cfg)

	byHand = runByHand(b, ctx, args, env)
	return viaOperator, podByHand, byHand
}

// dropKeys deletes every key under each prefix on both tenant etcds.
func dropKeys(t testing.TB, prefixes ...string) {
	t.Helper()
	etcd := cluster.TenantEtcd()
	for _, endpoint := range []string{etcd.MainURL, etcd.EventsURL} {
		cli := tenantEtcd(t, endpoint)
		for _, p := range prefixes {
			if _, err := cli.Delete(context.Background(), p, clientv3.WithPrefix()); err != nil {
				t.Errorf("deleting the keys under %s on %s: %v", p, endpoint, err)
			}
		}
	}
}

// runPodByHand creates a copy of the operator's Deployment d (its own
// name, labels and etcd prefix, one replica, no owner) and a NodePort
// Service for it, and returns how long they took to answer /readyz
// through the NodePort; it deletes both before returning.
func runPodByHand(b testing.TB, ctx context.Context, c client.Client, d *appsv1.Deployment) time.Duration {
	b.Helper()
	labels := map[string]string{"bench": "pod-by-hand"}
	pod := d.Spec.Template.DeepCopy()
	pod.Labels, pod.Annotations = labels, nil
	for i, a := range pod.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--etcd-prefix=") {
			pod.Spec.Containers[0].Args[i] = a + "-pod-by-hand"
		}
	}
	copied := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: "pod-by-hand"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: *pod,
		},
	}
	port := intstr.FromString(pod.Spec.Containers[0].Ports[0].Name)
	if port.StrVal == "" {
		port = intstr.FromInt32(pod.Spec.Containers[0].Ports[0].ContainerPort)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: "pod-by-hand"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, Selector: labels,
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: port}},
		},
	}
	start := time.Now()
	for _, o := range []client.Object{svc, copied} {
		if err := c.Create(ctx, o); err != nil {
			b.Fatalf("applying the tenant's pod by hand: %v", err)
		}
	}
	ready, err := waitReadyz(ctx, fmt.Sprintf("https://%s:%d/readyz", cluster.NodeIP(), svc.Spec.Ports[0].NodePort))
	if err != nil {
		b.Fatalf("the tenant's pod applied by hand: %v", err)
	}
	for _, o := range []client.Object{copied, svc} {
		if err := c.Delete(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	waitNoPodsLabelled(b, c, d.Namespace, labels, "the pod applied by hand")
	return ready.Sub(start)
}

// handArgs writes the files of the Deployment's volumes under dir and
// returns its kube-apiserver arguments and environment for a process on
// the host: paths under dir, the host's address for $(POD_IP), a free port,
// an etcd prefix of its own, so that it starts on empty storage as the
// operator's tenant did, and etcd dialed directly.
func handArgs(b testing.TB, c client.Client, d *appsv1.Deployment, dir string) ([]string, []string) {
	b.Helper()
	ctx := context.Background()
	pod := d.Spec.Template.Spec
	container := pod.Containers[0]
	mounts := map[string]string{}
	for _, m := range container.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	write := func(path string, data []byte) {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	for _, v := range pod.Volumes {
		root := filepath.Join(dir, mounts[v.Name])
		if err := os.MkdirAll(root, 0o700); err != nil {
			b.Fatal(err)
		}
		if v.Secret != nil {
			s := &corev1.Secret{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: v.Secret.SecretName}, s); err != nil {
				b.Fatal(err)
			}
			for _, item := range v.Secret.Items {
				write(filepath.Join(root, item.Path), s.Data[item.Key])
			}
			continue
		}
		if v.Projected == nil {
			continue // the audit log's emptyDir
		}
		for _, src := range v.Projected.Sources {
			switch {
			case src.Secret != nil:
				s := &corev1.Secret{}
				if err := c.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: src.Secret.Name}, s); err != nil {
					b.Fatal(err)
				}
				for _, item := range src.Secret.Items {
					write(filepath.Join(root, item.Path), s.Data[item.Key])
				}
			case src.ConfigMap != nil:
				cm := &corev1.ConfigMap{}
				if err := c.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: src.ConfigMap.Name}, cm); err != nil {
					b.Fatal(err)
				}
				for k, v := range cm.Data {
					write(filepath.Join(root, k), []byte(v))
				}
			}
		}
	}

	port := strconv.Itoa(testport.Get(b))
	var args []string
	for _, a := range container.Args {
		for _, path := range mounts {
			a = strings.ReplaceAll(a, "="+path, "="+filepath.Join(dir, path))
			a = strings.ReplaceAll(a, ","+path, ","+filepath.Join(dir, path))
		}
		a = strings.ReplaceAll(a, "$("+apiserver.PodIPEnv+")", cluster.HostIP())
		switch {
		case strings.HasPrefix(a, "--egress-selector-config-file="):
			// By hand, as kubeadm runs it: etcd dialed directly, without
			// the pod's etcd dialer.
			continue
		case strings.HasPrefix(a, "--secure-port="):
			a = "--secure-port=" + port
		case strings.HasPrefix(a, "--etcd-prefix="):
			a += "-by-hand"
		}
		args = append(args, a)
	}
	var env []string
	for _, e := range container.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	return append(args, "--bind-address=127.0.0.1"), env
}

// runByHand starts bin/kube-apiserver with args and returns how long it
// took to answer /readyz; it stops the process before returning.
func runByHand(b testing.TB, ctx context.Context, args, env []string) time.Duration {
	b.Helper()
	var port string
	for _, a := range args {
		if p, ok := strings.CutPrefix(a, "--secure-port="); ok {
			port = p
		}
	}
	logFile, err := os.Create(filepath.Join(b.TempDir(), "kube-apiserver.log"))
	if err != nil {
		b.Fatal(err)
	}
	// kube-apiserver writes the log through its own descriptors; closing
	// ours loses nothing.
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(filepath.Join(repo, "bin", "kube-apiserver"), args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting kube-apiserver by hand: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	ready, err := waitReadyz(ctx, "https://127.0.0.1:"+port+"/readyz")
	if err != nil {
		log, _ := os.ReadFile(logFile.Name())
		b.Fatalf("kube-apiserver started by hand: %v\n%s", err, tail(string(log), 30))
	}
	return ready.Sub(start)
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// BenchmarkTenantsAtOnce applies BENCH_TENANTS (10) ApiServerConfigs at
// once and measures when the first, the median and the last answer /readyz
// through their NodePorts, and the memory the node uses with all of them
// running.
func BenchmarkTenantsAtOnce(b *testing.B) {
	n := 10
	if v := os.Getenv("BENCH_TENANTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("BENCH_TENANTS=%q: want a positive number", v)
		}
	}
	installOperator(b)
	c := ctrlClient(b)
	b.StopTimer()
	var first, median, last, rss float64
	for range b.N {
		b.StartTimer() // see BenchmarkTenantReadyz
		times, mem := tenantsAtOnce(b, c, n)
		b.StopTimer()
		first += times[0].Seconds()
		median += times[len(times)/2].Seconds()
		last += times[len(times)-1].Seconds()
		rss += float64(mem)
	}
	per := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(first/per, "first-ready-s")
	b.ReportMetric(median/per, "median-ready-s")
	b.ReportMetric(last/per, "all-ready-s")
	b.ReportMetric(rss/per/(1<<20), "node-rss-MiB")
}

func tenantsAtOnce(b *testing.B, c client.Client, n int) ([]time.Duration, int64) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfgs := make([]*v1alpha1.ApiServerConfig, n)
	for i := range cfgs {
		cfgs[i] = localTenant(b, tenantNamespace(b), fmt.Sprintf("at-once-%d", i))
	}
	times := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i, cfg := range cfgs {
		wg.Go(func() {
			if errs[i] = c.Create(ctx, cfg); errs[i] != nil {
				return
			}
			var ready time.Time
			ready, errs[i] = tenantReadyz(ctx, c, cfg)
			times[i] = ready.Sub(start)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	mem, err := cluster.MemoryUsage()
	if err != nil {
		b.Fatal(err)
	}
	for _, cfg := range cfgs {
		if err := client.IgnoreNotFound(c.Delete(ctx, cfg)); err != nil {
			b.Fatal(err)
		}
	}
	for _, cfg := range cfgs {
		waitNoPods(b, c, cfg)
	}
	slices.Sort(times)
	return times, mem.RSS
}

// BenchmarkTenantAdmissionBurst is a fleet's first sync against the
// operator as installed from config/default (both replicas serve the
// webhook, behind its Service): BENCH_BURST_SPECS distinct specs (1 000;
// each tenant with its own name, etcd servers, prefix and serving names)
// applied as server-side dry runs by BENCH_BURST_CLIENTS parallel clients
// (32). Every spec must be admitted, none refused for lack of time.
func BenchmarkTenantAdmissionBurst(b *testing.B) {
	specs, clients := 1000, 32
	for name, v := range map[string]*int{"BENCH_BURST_SPECS": &specs, "BENCH_BURST_CLIENTS": &clients} {
		if s := os.Getenv(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				b.Fatalf("%s=%q: want a positive number", name, s)
			}
			*v = n
		}
	}
	installOperator(b)
	cfg, err := cluster.RESTConfig()
	if err != nil {
		b.Fatal(err)
	}
	// The clients' own rate limit is not what is measured.
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: ctrlClient(b).Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	ns := tenantNamespace(b)
	template := localTenant(b, ns, "burst")
	b.StopTimer()
	for run := range b.N {
		fleet := make([]*v1alpha1.ApiServerConfig, specs)
		for i := range fleet {
			fleet[i] = burst.Tenant(template, ns, fmt.Sprintf("r%d", run), i)
		}
		b.StartTimer()
		res := burst.Run(context.Background(), c, fleet, clients)
		b.StopTimer()
		if len(res.Failures) > 0 {
			b.Fatalf("%d of %d distinct valid specs were refused; the first: %v", len(res.Failures), specs, res.Failures[0])
		}
		res.Report(b.ReportMetric)
	}
}

// BenchmarkTenantAdmissionOne is one new spec at a time against the
// operator as installed: BENCH_ONE_SPECS (50) dry runs, each spec of a kind
// of its own (a distinct extra argument, which kube-apiserver judges), so
// that every one is judged by a validator process of its own.
func BenchmarkTenantAdmissionOne(b *testing.B) {
	n := 50
	if s := os.Getenv("BENCH_ONE_SPECS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("BENCH_ONE_SPECS=%q: want a positive number", s)
		}
		n = v
	}
	installOperator(b)
	c := ctrlClient(b)
	ns := tenantNamespace(b)
	template := localTenant(b, ns, "one")
	b.StopTimer()
	for run := range b.N {
		specs := make([]*v1alpha1.ApiServerConfig, n)
		for i := range specs {
			specs[i] = burst.Tenant(template, ns, fmt.Sprintf("one%d", run), i)
			specs[i].Spec.ExtraArgs = append(specs[i].Spec.ExtraArgs,
				v1alpha1.ExtraArg{Name: "max-connection-bytes-per-sec", Value: strconv.Itoa(1<<20 + run*n + i)})
		}
		b.StartTimer()
		res := burst.Run(context.Background(), c, specs, 1)
		b.StopTimer()
		if len(res.Failures) > 0 {
			b.Fatalf("%d of %d valid specs were refused; the first: %v", len(res.Failures), n, res.Failures[0])
		}
		res.Report(b.ReportMetric)
	}
}
