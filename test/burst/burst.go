// Package burst applies many ApiServerConfigs at once, as a platform's
// first sync of a fleet does, and measures what admission made each apply
// wait. The envtest and end-to-end benchmarks share it.
package burst

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// Tenant is the spec of tenant i of a fleet named run in namespace: its
// own name, etcd servers, prefix and serving names, the rest of template.
func Tenant(template *v1alpha1.ApiServerConfig, namespace, run string, i int) *v1alpha1.ApiServerConfig {
	cfg := template.DeepCopy()
	name := fmt.Sprintf("%s-t%d", run, i)
	cfg.ObjectMeta = metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: template.Labels}
	cfg.Spec.Etcd.Servers = []string{fmt.Sprintf("https://etcd-%s.tenants:2379", name)}
	cfg.Spec.Etcd.Prefix = "/tenants/" + name
	cfg.Spec.Serving.ExtraSANs = []string{name + ".api.example.com"}
	return cfg
}

// Result is what one burst measured.
type Result struct {
	// Latencies of every apply, sorted.
	Latencies []time.Duration
	Elapsed   time.Duration
	// Failures are the applies refused (for lack of time included).
	Failures []error
}

// Run applies specs as server-side dry runs from clients parallel clients.
func Run(ctx context.Context, c client.Client, specs []*v1alpha1.ApiServerConfig, clients int) Result {
	latencies := make([]time.Duration, len(specs))
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var res Result
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for i := range work {
				t0 := time.Now()
				err := c.Create(ctx, specs[i].DeepCopy(), client.DryRunAll)
				latencies[i] = time.Since(t0)
				if err != nil {
					mu.Lock()
					res.Failures = append(res.Failures, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range specs {
		work <- i
	}
	close(work)
	wg.Wait()
	res.Elapsed = time.Since(start)
	slices.Sort(latencies)
	res.Latencies = latencies
	return res
}

// Percentile of the latencies, nearest rank.
func (r Result) Percentile(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(p*float64(len(r.Latencies))+0.5) - 1
	return r.Latencies[min(max(i, 0), len(r.Latencies)-1)]
}

// Report reports the figures of r on b: p50, p99 and max in ms, specs
// admitted per second.
func (r Result) Report(report func(float64, string)) {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	report(ms(r.Percentile(0.50)), "p50-ms")
	report(ms(r.Percentile(0.99)), "p99-ms")
	report(ms(r.Latencies[len(r.Latencies)-1]), "max-ms")
	report(float64(len(r.Latencies))/r.Elapsed.Seconds(), "specs/s")
}
