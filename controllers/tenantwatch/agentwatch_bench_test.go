package tenantwatch

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// konnectivityServerMetrics is a /metrics of upstream's server (v0.36) of
// about the size it serves: Go runtime and process families, then its own.
func konnectivityServerMetrics(agents int) string {
	var b strings.Builder
	for i := 0; b.Len() < 10<<10; i++ {
		fmt.Fprintf(&b, "# HELP go_family_%d A runtime family.\n# TYPE go_family_%d gauge\ngo_family_%d{quantile=\"0.5\"} %d\n", i, i, i, i)
	}
	fmt.Fprintf(&b, "# HELP %s Number of konnectivity agent connected to the proxy server\n# TYPE %s gauge\n%s{proxy_strategy=\"default\"} %d\n%s{proxy_strategy=\"destHost\"} %d\n",
		tenantio.KonnectivityAgentsMetric, tenantio.KonnectivityAgentsMetric, tenantio.KonnectivityAgentsMetric, agents, tenantio.KonnectivityAgentsMetric, agents)
	return b.String()
}

// BenchmarkAgentWatch measures one round of the agent watch over 1 000
// tenants of two apiservers each (2 000 servers, every one holding an
// agent, so no node is counted), each look a GET of a server's /metrics
// over a new loopback connection, as the operator reads a pod's: what a
// look costs the operator in CPU, and how many it can make a second with
// the budget lifted. At 10 000 tenants of two apiservers and the default
// interval, the watch makes about 67 looks a second.
func BenchmarkAgentWatch(b *testing.B) {
	const tenants, perTenant = 1000, 2
	body := konnectivityServerMetrics(3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	probe := func(ctx context.Context, ip string) (int32, error) { return tenantio.KonnectivityAgents(ctx, ip, p) }
	w := NewAgents(probe, time.Millisecond)
	w.budget = rate.Inf
	for i := range tenants {
		key := types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("t%04d", i)}
		var servers []Server
		for j := range perTenant {
			servers = append(servers, Server{Pod: fmt.Sprintf("%s-%d", key.Name, j), IP: "127.0.0.1", Ready: true})
		}
		w.Record(key, servers, nil, AgentLook{})
	}
	defer func() {
		for i := range tenants {
			w.ForgetPods(types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("t%04d", i)})
		}
	}()
	// The first round brings every tenant back (its look differs from the
	// empty one recorded): drain those events.
	go func() {
		for range w.Events() {
		}
	}()
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		w.Round(context.Background())
	}
	took := time.Since(start)
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	looks := float64(b.N * tenants * perTenant)
	// The server's side runs in this process too: the CPU per look
	// includes serving it, an upper bound of the operator's.
	b.ReportMetric(float64(cpu.Microseconds())/looks, "cpu-us/look")
	b.ReportMetric(looks/took.Seconds(), "looks/s")
	b.ReportMetric(67*float64(cpu.Microseconds())/looks/1e3, "millicores@10k")
}
