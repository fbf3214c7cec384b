package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/test/envtest"
)

// scope collects the cleanups of one benchmark iteration, so that each
// iteration stops its apiserver and operator before the next one starts
// (testing.B runs cleanups only when the whole benchmark ends).
type scope struct {
	testing.TB
	cleanups []func()
}

func (s *scope) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

func (s *scope) close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
}

// sizesFromEnv reads a comma-separated list of object counts.
func sizesFromEnv(b *testing.B, key, def string) []int {
	b.Helper()
	v := os.Getenv(key)
	if v == "" {
		v = def
	}
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want object counts such as 100,1000", key, v)
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkConverge creates N ApiServerConfigs at once against a freshly
// started operator and measures the time until every one has converged
// (all owned objects applied, status written for its generation), the
// operator's CPU time and peak RSS, and the API requests it sent per
// object. One op is one whole batch of N.
func BenchmarkConverge(b *testing.B) {
	for _, n := range sizesFromEnv(b, "BENCH_CONVERGE_OBJECTS", "100,1000") {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			b.StopTimer()
			var cpu, controlPlane, peak, requests, writes, reconciles, restCPU, restWrites, restLooks float64
			for range b.N {
				r := convergeOnce(b, n)
				cpu += r.cpuSeconds
				controlPlane += r.controlPlaneCPU
				peak = max(peak, float64(r.peakRSS))
				requests += r.counters.requests
				writes += r.counters.writes
				reconciles += r.counters.reconciles
				restCPU += r.rest.cpuSeconds / r.rest.window.Seconds()
				restWrites += r.rest.counters.writes
				restLooks += r.rest.counters.etcdLooks / r.rest.counters.etcdRounds
			}
			objects := float64(b.N * n)
			b.ReportMetric(objects/b.Elapsed().Seconds(), "objects/s")
			b.ReportMetric(cpu/float64(b.N), "cpu-s/op")
			b.ReportMetric(controlPlane/float64(b.N), "apiserver+etcd-cpu-s/op")
			b.ReportMetric(peak/(1<<20), "peak-rss-MiB")
			b.ReportMetric(requests/objects, "requests/object")
			b.ReportMetric(writes/objects, "writes/object")
			b.ReportMetric(reconciles/objects, "reconciles/object")
			b.ReportMetric(1000*restCPU/float64(b.N), "rest-millicores")
			b.ReportMetric(restWrites/float64(b.N), "rest-writes")
			b.ReportMetric(restLooks/float64(b.N), "rest-etcd-looks/round")
		})
	}
}

// setUp starts a fresh kube-apiserver and etcd, creates the namespaces of
// n tenants (not the tenants), watches them and starts the operator.
func setUp(s testing.TB, prefix string, n int) (*envtest.Environment, []*v1alpha1.ApiServerConfig, *watcher, *operator) {
	s.Helper()
	env := startEnv(s)
	objs := tenants(env, prefix, n)
	createNamespaces(s, env.Client, objs)
	w := watch(s, env, converged)
	return env, objs, w, startOperator(s, env)
}

// convergeTimeout bounds the wait for n new objects to converge.
func convergeTimeout(n int) time.Duration {
	return 2*time.Minute + time.Duration(n)*200*time.Millisecond
}

type convergeResult struct {
	cpuSeconds      float64
	controlPlaneCPU float64 // kube-apiserver and etcd
	peakRSS         uint64
	counters        counters
	// rest is the operator at rest once every object converged.
	rest restCost
}

func convergeOnce(b *testing.B, n int) convergeResult {
	b.Helper()
	s := &scope{TB: b}
	defer s.close()
	env, objs, w, op := setUp(s, "converge", n)
	u0, c0, cp0 := op.usage(s), op.counters(s), controlPlaneCPU(s)

	start := time.Now()
	prof := startProfiles(s, fmt.Sprintf("converge-%d", n), env, op, time.Duration(n)*30*time.Millisecond)
	b.StartTimer()
	createAll(s, env.Client, objs)
	w.waitAll(s, objs, convergeTimeout(n), fmt.Sprintf("%d ApiServerConfigs converge", n))
	b.StopTimer()

	// Costs include the passes that follow convergence; the time does not.
	c1 := op.waitIdle(s, 2*time.Minute)
	u1, cp1 := op.usage(s), controlPlaneCPU(s)
	atRest := op.atRest(s, time.Minute)
	prof.wait(s)
	saveHeap(s, fmt.Sprintf("converge-%d", n), op)
	checkOwnedObjects(s, env.Client, objs)
	writeSeries(s, fmt.Sprintf("converge-%d.txt", n), w.times(objs, start))
	return convergeResult{cpuSeconds: u1.cpuSeconds - u0.cpuSeconds, controlPlaneCPU: cp1 - cp0, peakRSS: u1.peakRSS, counters: c1.sub(c0), rest: atRest}
}

// BenchmarkApplyToDeployment creates one ApiServerConfig at a time against
// an idle operator and measures the time from the create call to the
// Deployment's ADDED event on a watch: the latency a user sees from
// `kubectl apply` to pods being scheduled. ns/op is the mean; p50 and p99
// are reported too.
func BenchmarkApplyToDeployment(b *testing.B) {
	b.StopTimer()
	s := &scope{TB: b}
	defer s.close()
	env, objs, w, _ := setUp(s, "latency", b.N+1)

	// The first object of a fresh operator is reported apart, as first-ms:
	// created a few milliseconds after the operator's informers started
	// their watches, it reached the operator's watch 2 s late in about half
	// of the runs (the reconcile itself then took the usual 60 ms: seen in
	// the operator's debug log), an effect of a watch that has just begun,
	// not of the reconciler.
	latencies := make([]time.Duration, 0, b.N)
	var first time.Duration
	for i, o := range objs {
		// The timer runs while a create waits for its Deployment, so
		// that -benchtime=1s sizes b.N from the latency.
		b.StartTimer()
		start := time.Now()
		if err := env.Client.Create(context.Background(), o); err != nil {
			b.Fatal(err)
		}
		var created time.Time
		w.waitFor(b, time.Minute, "the Deployment of "+key(o)+" appears", func() (bool, string) {
			created = w.deployments[o.Namespace]
			return !created.IsZero(), "not yet"
		})
		if i == 0 {
			first = created.Sub(start)
		} else {
			latencies = append(latencies, created.Sub(start))
		}
		b.StopTimer()
		// Untimed: the operator finishes this object before the next one.
		w.waitAll(b, []*v1alpha1.ApiServerConfig{o}, time.Minute, key(o)+" converges")
	}
	var sum time.Duration
	for _, l := range latencies {
		sum += l
	}
	sorted := slices.Clone(latencies)
	slices.Sort(sorted)
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(latencies)), "ns/op")
	b.ReportMetric(float64(percentile(sorted, 0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(sorted, 0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(first.Microseconds())/1000, "first-ms")
	writeSeries(s, "apply-to-deployment.txt", sorted)
}

// BenchmarkSteadyState converges N ApiServerConfigs, marks their
// Deployments available so that they turn Ready, and then counts what the
// operator does over a quiet window (5 minutes unless BENCH_STEADY_WINDOW
// says otherwise): its writes, which should be none, its reconciles and
// its requests per minute.
func BenchmarkSteadyState(b *testing.B) {
	n := intFromEnv(b, "BENCH_STEADY_OBJECTS", 100)
	window := durationFromEnv(b, "BENCH_STEADY_WINDOW", 5*time.Minute)
	b.StopTimer()
	var total counters
	for range b.N {
		total = total.add(steadyOnce(b, n, window))
	}
	minutes := window.Minutes() * float64(b.N)
	b.ReportMetric(0, "ns/op") // one op is the window itself: not a measure
	b.ReportMetric(total.writes/float64(b.N), "writes/window")
	b.ReportMetric(total.reconciles/minutes, "reconciles/min")
	b.ReportMetric(total.requests/minutes, "requests/min")
	b.Logf("%d objects, %s window: %.0f writes, %.0f reconciles, %.0f requests", n, window, total.writes, total.reconciles, total.requests)
}

func steadyOnce(b *testing.B, n int, window time.Duration) counters {
	b.Helper()
	s := &scope{TB: b}
	defer s.close()
	env, objs, w, op := setUp(s, "steady", n)
	createAll(s, env.Client, objs)
	w.waitAll(s, objs, convergeTimeout(n), fmt.Sprintf("%d ApiServerConfigs converge", n))
	actAsDeploymentController(s, env.Client, objs)
	waitReady(s, env.Client, objs, time.Minute+time.Duration(n)*100*time.Millisecond)

	c0 := op.counters(s)
	b.StartTimer() // one op is one window, so that b.N stays 1
	time.Sleep(window)
	b.StopTimer()
	return op.counters(s).sub(c0)
}

// waitReady polls, every half second and bounded by timeout, until every
// object reports Ready for its generation.
func waitReady(s testing.TB, c client.Client, objs []*v1alpha1.ApiServerConfig, timeout time.Duration) {
	s.Helper()
	deadline := time.Now().Add(timeout)
	for {
		list := &v1alpha1.ApiServerConfigList{}
		if err := c.List(context.Background(), list); err != nil {
			s.Fatal(err)
		}
		n := 0
		for i := range list.Items {
			if ready(&list.Items[i]) {
				n++
			}
		}
		if n >= len(objs) {
			return
		}
		if time.Now().After(deadline) {
			s.Fatalf("%d of %d ApiServerConfigs Ready after %s", n, len(objs), timeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
