package etcddialer

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/server/egressselector"
)

// serveFilter runs f on a fresh socket until the test ends and returns
// the dial functions of kube-apiserver's "controlplane" and "cluster"
// egress selections pointed at it, as the operator renders them.
func serveFilter(t *testing.T, f *EgressFilter) (path string, controlplane, cluster func(ctx context.Context, network, addr string) (net.Conn, error)) {
	t.Helper()
	f.Log = testr.New(t)
	path = filepath.Join(t.TempDir(), "egress.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	connect := apiserver.Connection{
		ProxyProtocol: apiserver.ProtocolHTTPConnect,
		Transport:     &apiserver.Transport{UDS: &apiserver.UDSTransport{UDSName: path}},
	}
	sel, err := egressselector.NewEgressSelector(&apiserver.EgressSelectorConfiguration{
		EgressSelections: []apiserver.EgressSelection{{Name: "controlplane", Connection: connect}, {Name: "cluster", Connection: connect}},
	})
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(n egressselector.EgressType) func(ctx context.Context, network, addr string) (net.Conn, error) {
		dial, err := sel.Lookup(n.AsNetworkContext())
		if err != nil {
			t.Fatal(err)
		}
		return dial
	}
	return path, lookup(egressselector.ControlPlane), lookup(egressselector.Cluster)
}

// countingListener counts the connections a listener at addr accepts.
func countingListener(t *testing.T, addr string) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listening on %s: %v", addr, err)
	}
	var accepted atomic.Int64
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = conn.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	return l.Addr().String(), &accepted
}

func deny(cidr, why string) DeniedRange {
	return DeniedRange{Prefix: netip.MustParsePrefix(cidr), Why: why}
}

// A destination no range refuses is spliced through either selection; one
// the node's range holds is refused before any dial, and kube-apiserver's
// error (what the tenant's administrator reads in a webhook's failure)
// says which range and why.
func TestEgressFilterRefusesTheNodeAndSplicesTheRest(t *testing.T) {
	allowed := freeAddr(t)
	listenTarget(t, allowed)
	node, nodeAccepted := countingListener(t, "127.0.0.2:0")
	_, controlplane, cluster := serveFilter(t, &EgressFilter{Denied: []DeniedRange{deny("127.0.0.2/32", "an address of the node this apiserver runs on")}})

	conn, err := controlplane(context.Background(), "tcp", allowed)
	if err != nil {
		t.Fatalf("dialing %s, which no range refuses, through the controlplane selection: %v", allowed, err)
	}
	checkEcho(t, conn)
	_ = conn.Close()

	for name, dial := range map[string]func(context.Context, string, string) (net.Conn, error){"controlplane": controlplane, "cluster": cluster} {
		conn, err := dial(context.Background(), "tcp", node)
		if err == nil {
			_ = conn.Close()
			t.Fatalf("the %s selection reached %s, the node's address", name, node)
		}
		for _, want := range []string{"code 403", "refuses " + node, "127.0.0.2 is an address of the node this apiserver runs on"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the %s selection's error %q does not say %q", name, err, want)
			}
		}
	}
	if n := nodeAccepted.Load(); n != 0 {
		t.Errorf("the node's listener accepted %d connections, want none", n)
	}
}

// A host name is resolved once, by the filter: refused when any of its
// addresses is refused, and dialed at the address checked, so that a
// second answer of the resolver (DNS rebinding) cannot be dialed.
func TestEgressFilterChecksEveryAddressOfAName(t *testing.T) {
	good, goodAccepted := countingListener(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(good)
	_, nodeAccepted := countingListener(t, "127.0.0.2:"+port)
	var lookups atomic.Int64
	answers := map[string][]netip.Addr{
		"webhook.example.com": {netip.MustParseAddr("127.0.0.1")},
		"mixed.example.com":   {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")},
		// The second lookup of rebind answers the node.
		"rebind.example.com": {netip.MustParseAddr("127.0.0.1")},
	}
	_, _, cluster := serveFilter(t, &EgressFilter{
		Denied: []DeniedRange{deny("127.0.0.2/32", "an address of the node this apiserver runs on")},
		Resolve: func(_ context.Context, fqdn string) ([]netip.Addr, error) {
			host, ok := strings.CutSuffix(fqdn, ".")
			if !ok {
				return nil, fmt.Errorf("%s was looked up with the search list", fqdn)
			}
			if lookups.Add(1) > 1 && host == "rebind.example.com" {
				return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
			}
			return answers[host], nil
		},
	})

	conn, err := cluster(context.Background(), "tcp", net.JoinHostPort("webhook.example.com", port))
	if err != nil {
		t.Fatalf("a name of an allowed address: %v", err)
	}
	_ = conn.Close()

	// A name's refusal says the same whether it resolves to a refused
	// address or not at all, and names no address.
	same := "does not resolve, as a fully qualified name, to an address the tenant's apiservers may call"
	_, err = cluster(context.Background(), "tcp", net.JoinHostPort("mixed.example.com", port))
	if err == nil || !strings.Contains(err.Error(), "code 403") || !strings.Contains(err.Error(), "mixed.example.com "+same) || strings.Contains(err.Error(), "127.0.0.2") {
		t.Errorf("a name with an address of the node among its answers: %v, want a refusal that names no address", err)
	}
	lookups.Store(0)
	conn, err = cluster(context.Background(), "tcp", net.JoinHostPort("rebind.example.com", port))
	if err != nil {
		t.Fatalf("a name that answers the node's address only on a second lookup: %v", err)
	}
	_ = conn.Close()
	if n := lookups.Load(); n != 1 {
		t.Errorf("the name was looked up %d times, want once", n)
	}
	waitAccepted(t, goodAccepted, 2)
	if n := nodeAccepted.Load(); n != 0 {
		t.Errorf("the node's listener accepted %d connections, want none", n)
	}
	if _, err := cluster(context.Background(), "tcp", net.JoinHostPort("unknown.example.com", port)); err == nil || !strings.Contains(err.Error(), "unknown.example.com "+same) {
		t.Errorf("a name that does not resolve: %v, want the same refusal as a refused one", err)
	}
}

// waitAccepted waits until a counting listener accepted n connections.
func waitAccepted(t *testing.T, accepted *atomic.Int64, n int64) {
	t.Helper()
	for range 200 {
		if accepted.Load() >= n {
			return
		}
		sleepBriefly()
	}
	t.Fatalf("the listener accepted %d connections, want %d", accepted.Load(), n)
}

func sleepBriefly() { time.Sleep(10 * time.Millisecond) }

// The refusal holds for every spelling of an address, and the platform's
// exceptions win over the ranges.
func TestEgressFilterRefusal(t *testing.T) {
	f := &EgressFilter{
		Denied: append(DefaultDeniedRanges(),
			deny("10.88.0.0/16", "in a network of the management cluster"),
			deny("192.168.50.2/32", "an address of the node this apiserver runs on")),
		Allowed: []netip.Prefix{netip.MustParsePrefix("10.88.7.0/24")},
	}
	for _, tt := range []struct {
		addr, want string
	}{
		{"192.168.50.2", "192.168.50.2 is an address of the node this apiserver runs on"},
		{"::ffff:192.168.50.2", "192.168.50.2 is an address of the node"},
		{"64:ff9b::c0a8:3202", "64:ff9b::c0a8:3202 carries 192.168.50.2, which is an address of the node"},
		{"169.254.169.254", "link-local, where clouds serve instance metadata"},
		{"fd00:ec2::254", "instance metadata"},
		{"100.100.100.200", "instance metadata"},
		{"127.0.0.1", "loopback"},
		{"::1", "loopback"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"fe80::1%eth0", "link-local"},
		{"224.0.0.1", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"10.88.3.4", "in a network of the management cluster"},
		{"10.88.7.9", ""},
		{"192.168.50.3", ""},
		{"2001:db8::1", ""},
		{"64:ff9b::808:808", ""},
	} {
		got := f.Refusal(netip.MustParseAddr(tt.addr))
		if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("Refusal(%s) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}

// Connections past MaxConnections are answered 503 at once.
func TestEgressFilterBoundsItsConnections(t *testing.T) {
	path, _, _ := serveFilter(t, &EgressFilter{MaxConnections: 1})
	// The first connection is held: its request is never sent.
	first, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Close() }()
	for range 200 {
		conn := request(t, path, "127.0.0.1:1")
		code := answerStatus(t, conn)
		_ = conn.Close()
		if code == http.StatusServiceUnavailable {
			return
		}
		sleepBriefly()
	}
	t.Fatal("a second connection beside a held one was never answered 503")
}

// BenchmarkEgressFilter_Connect is what the filter adds to each call of a
// tenant's apiserver: a CONNECT over its socket, the check of the
// destination and the dial, through kube-apiserver's own egress dialer.
func BenchmarkEgressFilter_Connect(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	f := &EgressFilter{Denied: append(DefaultDeniedRanges(), deny("10.0.0.0/8", "in a network of the management cluster")), Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	path := filepath.Join(b.TempDir(), "egress.sock")
	sl, err := Listen(path)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = f.Serve(ctx, sl) }()
	connect := apiserver.Connection{ProxyProtocol: apiserver.ProtocolHTTPConnect, Transport: &apiserver.Transport{UDS: &apiserver.UDSTransport{UDSName: path}}}
	sel, err := egressselector.NewEgressSelector(&apiserver.EgressSelectorConfiguration{EgressSelections: []apiserver.EgressSelection{{Name: "controlplane", Connection: connect}}})
	if err != nil {
		b.Fatal(err)
	}
	dial, err := sel.Lookup(egressselector.ControlPlane.AsNetworkContext())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		conn, err := dial(context.Background(), "tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		_ = conn.Close()
	}
}

func TestGateways(t *testing.T) {
	route4 := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth0\t00000000\t0100580A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" +
		"eth0\t0000580A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
	route6 := "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000002 00000000 00000003     eth0\n" +
		"fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000002 00000000 00000001     eth0\n"
	got := Gateways(strings.NewReader(route4), strings.NewReader(route6))
	want := []netip.Addr{netip.MustParseAddr("10.88.0.1"), netip.MustParseAddr("fd00::1")}
	if !slices.Equal(got, want) {
		t.Errorf("Gateways = %v, want %v", got, want)
	}
}

func TestUnmapPrefix(t *testing.T) {
	for in, want := range map[string]string{"::ffff:10.0.0.0/104": "10.0.0.0/8", "10.0.0.0/8": "10.0.0.0/8", "fd00::/8": "fd00::/8", "::ffff:0.0.0.0/80": "::ffff:0.0.0.0/80"} {
		if got := UnmapPrefix(netip.MustParsePrefix(in)); got.String() != want {
			t.Errorf("UnmapPrefix(%s) = %s, want %s", in, got, want)
		}
	}
	f := &EgressFilter{Denied: []DeniedRange{{Prefix: UnmapPrefix(netip.MustParsePrefix("::ffff:10.0.0.0/104")), Why: "mapped"}}}
	if f.Refusal(netip.MustParseAddr("10.1.2.3")) == "" {
		t.Error("a range given IPv4-mapped does not refuse its IPv4 addresses")
	}
}
