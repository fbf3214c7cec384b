// Command etcd-dialer is the etcd dialer sidecar of a kube-apiserver pod. It
// answers the HTTP CONNECT requests of kube-apiserver's egress selector on a
// Unix socket and holds them while etcd is down (see package etcddialer).
// It needs no cgo: built with CGO_ENABLED=0 it is a static binary.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/apiserver-operator/apiserver-operator/apiserver/etcddialer"
)

// idleBeforeExit is how long no connection must have been open after
// SIGTERM before the dialer exits. Short: as a native sidecar it is sent
// SIGTERM only once kube-apiserver has exited, and every moment it lingers
// is a moment the old pod keeps a rollout waiting.
const idleBeforeExit = 200 * time.Millisecond

// maxHold is gRPC's minimum connect timeout: a CONNECT held longer would be
// answered after kube-apiserver's attempt had already timed out.
const maxHold = 20 * time.Second

func main() {
	socket := flag.String("socket", "", "Path of the Unix socket kube-apiserver's egress selector connects to (required).")
	allow := flag.String("allow", "", "Comma-separated host:port of the etcd servers that may be dialed (required).")
	hold := flag.Duration("hold", etcddialer.DefaultHold, "How long a CONNECT waits for etcd before it is answered 503; below 20s.")
	retryInterval := flag.Duration("retry-interval", etcddialer.DefaultRetryInterval, "Pause between failed dials to etcd.")
	var waitFor [][]string
	flag.Func("wait-for", "Comma-separated host:port of the servers of one etcd kube-apiserver needs at start (the main one, each override's); once per etcd. "+
		"GET "+etcddialer.ReadyPath+" on the socket answers 200 only when a server of each accepts. Default: every --allow server.", func(v string) error {
		set, err := parseAllowed(v)
		if err != nil {
			return errors.New("names no server: give the host:port of one etcd's servers")
		}
		waitFor = append(waitFor, set)
		return nil
	})
	egressSocket := flag.String("egress-socket", "", "Path of the Unix socket of the egress filter of kube-apiserver's controlplane egress selection (webhooks by URL, authentication, authorization and audit webhooks, issuers); none when empty.")
	clusterSocket := flag.String("egress-cluster-socket", "", "Path of the Unix socket of the egress filter of kube-apiserver's cluster egress selection (webhooks and aggregated APIs by Service, kubelets, proxy): its own connections, so that long exec and log streams do not take the controlplane's; none when empty.")
	var egressDeny, egressAllow []netip.Prefix
	flag.Func("egress-deny", "Comma-separated address ranges of the management cluster (its nodes, pods and Services) the egress filter refuses, besides "+
		"the pod's node ($"+etcddialer.HostIPsEnv+"), the pod ($"+etcddialer.PodIPsEnv+"), the management kube-apiserver's Service ($KUBERNETES_SERVICE_HOST) and the link-local, loopback and metadata ranges.", prefixList(&egressDeny))
	flag.Func("egress-allow", "Comma-separated address ranges the egress filter lets through although it refuses a range that holds them.", prefixList(&egressAllow))
	probe := flag.Bool("probe", false, "Ask the dialer serving on --socket whether every etcd of --wait-for accepts connections, exit 0 if so and 1 if not.")
	wait := flag.Duration("wait", 0, "With --probe: ask again (every "+notReadyRetryInterval.String()+" while etcd does not answer) until the answer is yes or this long has passed, "+
		"then mark the pod started, so that the question is not asked again in it: the sidecar's postStart hook, which kubelet waits for before it starts kube-apiserver.")
	flag.Parse()

	if *wait != 0 && !*probe {
		_, _ = fmt.Fprintln(os.Stderr, "--wait is a setting of --probe: give both")
		os.Exit(2)
	}
	if *probe {
		if err := awaitReady(*socket, *wait); err != nil {
			_, _ = fmt.Fprintln(os.Stdout, err)
			os.Exit(1)
		}
		return
	}
	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil))
	egress := map[string]*etcddialer.EgressFilter{}
	for _, sock := range []string{*egressSocket, *clusterSocket} {
		if sock == "" {
			continue
		}
		filter, err := egressFilter(log, egressDeny, egressAllow)
		if err != nil {
			log.Error(err, "Stopped")
			os.Exit(1)
		}
		egress[sock] = filter
	}
	if err := run(log, *socket, *allow, waitFor, *hold, *retryInterval, egress); err != nil {
		log.Error(err, "Stopped")
		os.Exit(1)
	}
}

func run(log logr.Logger, socket, allow string, waitFor [][]string, hold, retryInterval time.Duration, egress map[string]*etcddialer.EgressFilter) error {
	if socket == "" {
		return errors.New("--socket is required")
	}
	allowed, err := parseAllowed(allow)
	if err != nil {
		return err
	}
	for _, set := range waitFor {
		for _, a := range set {
			if !slices.Contains(allowed, a) {
				return fmt.Errorf("--wait-for=%s: %s is not in --allow, the only servers the dialer connects to", strings.Join(set, ","), a)
			}
		}
	}
	if hold <= 0 || hold >= maxHold {
		return fmt.Errorf("--hold=%s: must be above 0 and below %s, gRPC's minimum connect timeout", hold, maxHold)
	}
	if retryInterval <= 0 {
		return fmt.Errorf("--retry-interval=%s: must be above 0", retryInterval)
	}

	s := &etcddialer.Server{
		Allowed:       allowed,
		Hold:          hold,
		RetryInterval: retryInterval,
		WaitFor:       waitFor,
		Log:           log,
	}
	// Every socket is served until a signal, or until one of them fails:
	// then the others stop too, and the sidecar exits, so that kubelet
	// restarts it whole rather than leave a part of it dead.
	type server struct {
		socket string
		serve  func(context.Context, net.Listener) error
		active func() int
	}
	servers := []server{{socket, s.Serve, s.Active}}
	for _, sock := range slices.Sorted(maps.Keys(egress)) {
		f := egress[sock]
		servers = append(servers, server{sock, f.Serve, f.Active})
		log.Info("Filtering egress", "socket", sock, "denied", len(f.Denied), "allowed", f.Allowed)
	}
	listeners := make([]net.Listener, 0, len(servers))
	for _, srv := range servers {
		l, err := etcddialer.Listen(srv.socket)
		if err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			return err
		}
		listeners = append(listeners, l)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	active := func() int {
		n := 0
		for _, srv := range servers {
			n += srv.active()
		}
		return n
	}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		stopWhenIdle(log, active, signals)
		cancel()
	}()
	log.Info("Serving", "socket", socket, "allowed", allowed, "waitFor", waitFor, "hold", hold, "retryInterval", retryInterval)
	errs := make(chan error, len(servers))
	for i, srv := range servers {
		go func() {
			err := srv.serve(ctx, listeners[i])
			cancel()
			errs <- err
		}()
	}
	var first error
	for range servers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// egressFilter is the filter of the given ranges and of the pod's own
// addresses, which the environment gives.
func egressFilter(log logr.Logger, deny, allow []netip.Prefix) (*etcddialer.EgressFilter, error) {
	denied := etcddialer.DefaultDeniedRanges()
	for _, v := range []struct{ env, why string }{
		{etcddialer.HostIPsEnv, "an address of the node this apiserver runs on"},
		{etcddialer.PodIPsEnv, "an address of this apiserver's pod"},
		{"KUBERNETES_SERVICE_HOST", "the management cluster's kube-apiserver"},
	} {
		for a := range strings.SplitSeq(os.Getenv(v.env), ",") {
			if a = strings.TrimSpace(a); a == "" {
				continue
			}
			addr, err := netip.ParseAddr(a)
			if err != nil {
				return nil, fmt.Errorf("$%s: %q is no IP address", v.env, a)
			}
			addr = addr.Unmap()
			denied = append(denied, etcddialer.DeniedRange{Prefix: netip.PrefixFrom(addr, addr.BitLen()), Why: v.why})
		}
	}
	// The pod's gateways are its node's too (the bridge or veth end that
	// routes it), on an address of the pod network.
	route4, _ := os.Open("/proc/net/route")
	route6, _ := os.Open("/proc/net/ipv6_route")
	for _, gw := range etcddialer.Gateways(route4, route6) {
		denied = append(denied, etcddialer.DeniedRange{Prefix: netip.PrefixFrom(gw, gw.BitLen()), Why: "the pod's gateway, an address of its node"})
	}
	for _, f := range []*os.File{route4, route6} {
		if f != nil {
			_ = f.Close()
		}
	}
	if os.Getenv(etcddialer.HostIPsEnv) == "" {
		log.Info("$" + etcddialer.HostIPsEnv + " is empty: the egress filter does not know the node's addresses")
	}
	for _, p := range deny {
		denied = append(denied, etcddialer.DeniedRange{Prefix: p, Why: "in a network of the management cluster"})
	}
	return &etcddialer.EgressFilter{Denied: denied, Allowed: allow, Log: log}, nil
}

// prefixList parses a comma-separated list of address ranges (an address
// is a range of one) into *into.
func prefixList(into *[]netip.Prefix) func(string) error {
	return func(v string) error {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			prefix, err := netip.ParsePrefix(p)
			if err != nil {
				addr, aerr := netip.ParseAddr(p)
				if aerr != nil {
					return fmt.Errorf("%q is no address range (CIDR) nor address", p)
				}
				prefix = netip.PrefixFrom(addr, addr.BitLen())
			}
			*into = append(*into, etcddialer.UnmapPrefix(prefix).Masked())
		}
		return nil
	}
}

// stopWhenIdle returns after a termination signal once no connection has been
// open for idleBeforeExit, or at once on a second signal.
//
// SIGTERM does not stop the dialer while connections are open, nor does it
// refuse new ones: kube-apiserver, terminated alongside it, keeps using etcd
// during its own graceful shutdown and may reconnect meanwhile. As a native
// sidecar the dialer is stopped only after kube-apiserver has exited, and its
// connections end with it, so the wait is short; otherwise the kubelet's
// SIGKILL at the end of the grace period bounds it.
func stopWhenIdle(log logr.Logger, active func() int, signals <-chan os.Signal) {
	sig := <-signals
	log.Info("Stopping once no connection has been open for a while", "signal", sig.String(), "idle", idleBeforeExit)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	idleSince := time.Now()
	for {
		select {
		case sig := <-signals:
			log.Info("Stopping at once", "signal", sig.String())
			return
		case now := <-tick.C:
			if active() > 0 {
				idleSince = now
			} else if now.Sub(idleSince) >= idleBeforeExit {
				return
			}
		}
	}
}

// parseAllowed splits the --allow list. Entries are taken as given: they are
// the hosts of the etcd URLs, as kube-apiserver names them in its CONNECT
// requests.
func parseAllowed(allow string) ([]string, error) {
	var allowed []string
	for a := range strings.SplitSeq(allow, ",") {
		if a = strings.TrimSpace(a); a != "" {
			allowed = append(allowed, a)
		}
	}
	if len(allowed) == 0 {
		return nil, errors.New("--allow is required")
	}
	return allowed, nil
}

// probeTimeout bounds the probe's question: the dialer dials the servers
// of each etcd in turn, a second each at most.
const probeTimeout = 10 * time.Second

// Pauses between two questions of --probe --wait: short while the dialer
// does not listen yet (it has just started, beside the hook), and while
// etcd does not answer as often as a probe would ask, so that pods waiting
// during an outage do not dial etcd more than once a second each.
const (
	notListeningRetryInterval = 50 * time.Millisecond
	notReadyRetryInterval     = time.Second
)

// startedMarker is the file, beside the socket in the pod's emptyDir, that
// says this pod's kube-apiserver was let start once. A sidecar restarted
// later runs its postStart hook again: kube-apiserver already runs then,
// and a hook that waited would only hold kubelet's work on the pod.
const startedMarker = "kube-apiserver-started"

// awaitReady asks the dialer on socket until it says that etcd is
// reachable or wait has passed (0: asks once), and marks the pod started;
// it returns the last answer when the dialer never said so, and at once
// when the pod was marked before.
func awaitReady(socket string, wait time.Duration) error {
	if socket == "" {
		return errors.New("--socket is required")
	}
	marker := filepath.Join(filepath.Dir(socket), startedMarker)
	if wait > 0 {
		if _, err := os.Stat(marker); err == nil {
			return nil
		}
	}
	deadline := time.Now().Add(wait)
	for {
		err := askReady(socket)
		if err == nil {
			if wait > 0 {
				// Best effort: without the marker a restarted sidecar waits
				// for etcd again, as on the pod's start.
				_ = os.WriteFile(marker, nil, 0o600)
			}
			return nil
		}
		interval := notReadyRetryInterval
		if errors.Is(err, errNotListening) {
			interval = notListeningRetryInterval
		}
		if !time.Now().Add(interval).Before(deadline) {
			if wait > 0 {
				return fmt.Errorf("after %s: %w", wait, err)
			}
			return err
		}
		time.Sleep(interval)
	}
}

// errNotListening: nothing answers on the socket yet.
var errNotListening = errors.New("the etcd dialer does not answer")

// askReady asks the dialer on socket whether etcd is reachable; nil when
// it is.
func askReady(socket string) error {
	conn, err := net.DialTimeout("unix", socket, probeTimeout)
	if err != nil {
		return fmt.Errorf("%w on %s: %w", errNotListening, socket, err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(probeTimeout))
	if _, err := io.WriteString(conn, "GET "+etcddialer.ReadyPath+" HTTP/1.1\r\nHost: etcd-dialer\r\n\r\n"); err != nil {
		return fmt.Errorf("asking the etcd dialer on %s: %w", socket, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return fmt.Errorf("reading the etcd dialer's answer on %s: %w", socket, err)
	}
	why, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd does not accept connections yet (%s: %s): kube-apiserver starts once it does", resp.Status, why)
	}
	return nil
}
