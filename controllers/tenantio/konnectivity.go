package tenantio

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// KonnectivityProbeTimeout bounds one look at a konnectivity server.
const KonnectivityProbeTimeout = 2 * time.Second

// MaxKonnectivityMetricsBytes caps what is read of a konnectivity
// server's /metrics: upstream's (v0.36) is about 10 KiB, and grows with
// its dial histograms, not with the number of agents.
const MaxKonnectivityMetricsBytes = 1 << 20

// KonnectivityAgentsMetric is upstream's gauge of the agents that hold a
// tunnel to a server, one series per proxy strategy: each agent is in
// the default strategy's once.
const (
	KonnectivityAgentsMetric = "konnectivity_network_proxy_server_ready_backends"
	konnectivityAgentsSeries = "default"
)

// konnectivityProbeClient keeps no connection: 10 000 tenants' servers
// must not hold one each between looks. A server that redirects is not a
// konnectivity server.
var konnectivityProbeClient = &http.Client{
	Timeout: KonnectivityProbeTimeout,
	Transport: capResponses(MaxKonnectivityMetricsBytes, nil, true)(&http.Transport{
		DisableKeepAlives: true, Proxy: nil,
		// Not Go's 10 MiB: upstream's server sends a few headers.
		MaxResponseHeaderBytes: 16 << 10,
	}),
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// KonnectivityAgents counts the agents that hold a tunnel to the
// konnectivity server at podIP:port (its health port, which serves
// /metrics without authentication). At most MaxKonnectivityMetricsBytes
// are read of what a pod, which may run any image, answers, and only the
// one metric family is kept.
func KonnectivityAgents(ctx context.Context, podIP string, port int) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, KonnectivityProbeTimeout)
	defer cancel()
	url := "http://" + net.JoinHostPort(podIP, strconv.Itoa(port)) + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return 0, err
	}
	resp, err := konnectivityProbeClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading the konnectivity server's metrics at %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("reading the konnectivity server's metrics at %s: %s", url, resp.Status)
	}
	kept, err := metricFamilies(resp.Body, []string{KonnectivityAgentsMetric})
	if err != nil {
		return 0, fmt.Errorf("reading the konnectivity server's metrics at %s: %w", url, err)
	}
	n, err := ParseKonnectivityAgents(kept)
	if err != nil {
		return 0, fmt.Errorf("reading the konnectivity server's metrics at %s: %w", url, err)
	}
	return n, nil
}

// ParseKonnectivityAgents reads the number of agents from a konnectivity
// server's metrics in the text format: the default strategy's series of
// KonnectivityAgentsMetric, which upstream's server sets (to 0) when it
// starts. A server without it is not one whose agents can be counted.
func ParseKonnectivityAgents(metrics []byte) (int32, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(metrics))
	if err != nil {
		return 0, fmt.Errorf("parsing %s: %w", KonnectivityAgentsMetric, err)
	}
	f := families[KonnectivityAgentsMetric]
	if f == nil {
		return 0, fmt.Errorf("no %s: not a konnectivity server whose agents can be counted", KonnectivityAgentsMetric)
	}
	if f.GetType() != dto.MetricType_GAUGE {
		return 0, fmt.Errorf("%s is a %s, not a gauge", KonnectivityAgentsMetric, f.GetType())
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "proxy_strategy" && l.GetValue() == konnectivityAgentsSeries {
				v := m.GetGauge().GetValue()
				if math.IsNaN(v) || v < 0 || v > 1<<30 || v != math.Trunc(v) {
					return 0, fmt.Errorf("%s is %g, not a number of agents", KonnectivityAgentsMetric, v)
				}
				return int32(v), nil
			}
		}
	}
	return 0, fmt.Errorf("no %s{proxy_strategy=%q}: the server does not proxy with that strategy", KonnectivityAgentsMetric, konnectivityAgentsSeries)
}
