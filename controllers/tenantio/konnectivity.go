package tenantio

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// KonnectivityProbeTimeout bounds one look at a konnectivity server.
const KonnectivityProbeTimeout = 2 * time.Second

// konnectivityProbeClient keeps no connection: a server is looked at only
// while its pod waits for an agent, and 10 000 tenants must not hold one
// each. A server that redirects is not a konnectivity server.
var konnectivityProbeClient = &http.Client{
	Timeout:       KonnectivityProbeTimeout,
	Transport:     &http.Transport{DisableKeepAlives: true, Proxy: nil},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// KonnectivityReady reads the /readyz of the konnectivity server at
// podIP:port (its health port): upstream answers 200 once an agent holds
// a tunnel to it. At most a few KiB are read of what a pod, which may run
// any image, answers.
func KonnectivityReady(ctx context.Context, podIP string, port int) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, KonnectivityProbeTimeout)
	defer cancel()
	url := "http://" + net.JoinHostPort(podIP, strconv.Itoa(port)) + "/readyz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return false, err
	}
	resp, err := konnectivityProbeClient.Do(req)
	if err != nil {
		return false, fmt.Errorf("reading the konnectivity server's readiness at %s: %w", url, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}
