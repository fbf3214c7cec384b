package tenantio

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// konnectivityMetrics is the agents' part of what upstream's server
// (v0.36) serves on its health port, with other families around it.
const konnectivityMetrics = `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 42
# HELP konnectivity_network_proxy_server_ready_backend_connections Number of konnectivity agent connected to the proxy server. DEPRECATED, please use ready_backends
# TYPE konnectivity_network_proxy_server_ready_backend_connections gauge
konnectivity_network_proxy_server_ready_backend_connections 9
# HELP konnectivity_network_proxy_server_ready_backends Number of konnectivity agent connected to the proxy server
# TYPE konnectivity_network_proxy_server_ready_backends gauge
konnectivity_network_proxy_server_ready_backends{proxy_strategy="default"} 3
konnectivity_network_proxy_server_ready_backends{proxy_strategy="destHost"} 5
`

// serveKonnectivity serves handler as a server's health port on
// loopback, and returns its address and port.
func serveKonnectivity(t *testing.T, handler http.HandlerFunc) (string, int) {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	host, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	return host, n
}

// TestKonnectivityAgents_CountsTheDefaultStrategysAgents: an agent is in
// each strategy's count once; the default strategy counts each once.
func TestKonnectivityAgents_CountsTheDefaultStrategysAgents(t *testing.T) {
	host, port := serveKonnectivity(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(konnectivityMetrics))
	})
	n, err := KonnectivityAgents(context.Background(), host, port)
	if err != nil || n != 3 {
		t.Fatalf("counted %d agents (%v), want 3", n, err)
	}
	idle := "# TYPE " + KonnectivityAgentsMetric + " gauge\n" + KonnectivityAgentsMetric + "{proxy_strategy=\"default\"} 0\n"
	if n, err := ParseKonnectivityAgents([]byte(idle)); err != nil || n != 0 {
		t.Fatalf("a server that never had an agent counts %d (%v), want 0", n, err)
	}
}

// TestKonnectivityAgents_AHostileServerIsNotBelieved: a pod may run any
// image; what it answers is capped and checked.
func TestKonnectivityAgents_AHostileServerIsNotBelieved(t *testing.T) {
	// A server that answers well, where a redirect sends the operator.
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(konnectivityMetrics)) }))
	defer elsewhere.Close()
	gauge := func(v string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("# TYPE " + KonnectivityAgentsMetric + " gauge\n" + KonnectivityAgentsMetric + "{proxy_strategy=\"default\"} " + v + "\n"))
		}
	}
	for name, handler := range map[string]http.HandlerFunc{
		"an answer past the cap": func(w http.ResponseWriter, _ *http.Request) {
			line := []byte("# " + strings.Repeat("x", 1000) + "\n")
			for range MaxKonnectivityMetricsBytes/len(line) + 2 {
				if _, err := w.Write(line); err != nil {
					return
				}
			}
		},
		"an error": func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "no", http.StatusInternalServerError)
		},
		"a redirect to a server that answers": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL+"/metrics", http.StatusFound)
		},
		"a negative count": gauge("-1"),
		"not a count":      gauge("NaN"),
		"a fraction":       gauge("2.5"),
		"no count": func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("# TYPE go_goroutines gauge\ngo_goroutines 3\n"))
		},
		"another strategy's count alone": func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("# TYPE " + KonnectivityAgentsMetric + " gauge\n" + KonnectivityAgentsMetric + "{proxy_strategy=\"destHost\"} 4\n"))
		},
		"headers past the cap": func(w http.ResponseWriter, _ *http.Request) {
			for i := range 64 {
				w.Header().Set(fmt.Sprintf("X-Padding-%d", i), strings.Repeat("x", 1000))
			}
			_, _ = w.Write([]byte(konnectivityMetrics))
		},
		"not the text format": func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(KonnectivityAgentsMetric + "{proxy_strategy=\"default\" 1\n"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			host, port := serveKonnectivity(t, handler)
			if n, err := KonnectivityAgents(context.Background(), host, port); err == nil {
				t.Fatalf("counted %d agents, want an error", n)
			}
		})
	}
}
