package etcddialer

import (
	"bufio"
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// The egress filter: the other socket of the sidecar. kube-apiserver's
// "controlplane" egress selection (admission and conversion webhooks given
// by URL, the authentication, authorization and audit webhooks, the JWT
// issuers) and, for a tenant without the network proxy, its "cluster"
// selection (webhooks and aggregated APIs given by Service, kubelets,
// the proxy subresources) are pointed at it. A tenant's administrator aims
// most of these calls (a webhook's URL, a Service's endpoints, a Node's
// address), and the spec's author the others: the filter refuses every
// destination of the pod's own node, the management cluster's networks,
// the pod itself and the link-local and metadata addresses, whatever the
// network plugin lets a pod reach. A NetworkPolicy cannot say this: upstream
// leaves traffic between a pod and its own node to the plugin, and many let
// it through.
//
// A host name is resolved here, once: every address it resolves to is
// checked, and the connection goes to one of those addresses, so that a
// second resolution cannot answer differently (DNS rebinding).

// HostIPsEnv and PodIPsEnv hold, in the sidecar's environment, the
// addresses of the pod's node and of the pod (the downward API's
// status.hostIPs and status.podIPs): the filter refuses them.
const (
	HostIPsEnv = "HOST_IPS"
	PodIPsEnv  = "POD_IPS"
)

// DefaultEgressDialTimeout bounds a dial to an allowed destination; the
// caller's own deadline (a webhook's timeout) usually comes first.
const DefaultEgressDialTimeout = 10 * time.Second

// DefaultEgressMaxConnections bounds the connections a filter handles at
// once: each costs two goroutines and a file descriptor a side.
const DefaultEgressMaxConnections = 1024

// resolveTimeout bounds the resolution of a host name.
const resolveTimeout = 5 * time.Second

// refusedLogInterval spaces the lines that say a destination was refused:
// a tenant that calls a refused webhook a thousand times a second gets a
// line every interval, with the count.
const refusedLogInterval = 10 * time.Second

// DeniedRange is a range of addresses the egress filter refuses, and why
// (the reason is in the refusal, where the tenant's administrator reads
// it: a webhook's failure).
type DeniedRange struct {
	Prefix netip.Prefix
	Why    string
}

// DefaultDeniedRanges are refused by every filter: the pod itself, the
// link-local range where clouds serve instance metadata (and the metadata
// addresses outside it), and what is no destination at all.
func DefaultDeniedRanges() []DeniedRange {
	ranges := []struct{ cidr, why string }{
		{"0.0.0.0/8", "the unspecified address, which reaches the pod itself"},
		{"::/128", "the unspecified address, which reaches the pod itself"},
		{"127.0.0.0/8", "loopback, the pod itself"},
		{"::1/128", "loopback, the pod itself"},
		{"169.254.0.0/16", "link-local, where clouds serve instance metadata"},
		{"fe80::/10", "link-local"},
		{"fd00:ec2::/32", "a cloud's instance metadata range"},
		{"100.100.100.200/32", "a cloud's instance metadata address"},
		{"224.0.0.0/4", "multicast"},
		{"ff00::/8", "multicast"},
		{"240.0.0.0/4", "reserved, and the broadcast address"},
	}
	out := make([]DeniedRange, 0, len(ranges))
	for _, r := range ranges {
		out = append(out, DeniedRange{Prefix: netip.MustParsePrefix(r.cidr), Why: r.why})
	}
	return out
}

// nat64 is the well-known NAT64 prefix (RFC 6052): its addresses carry an
// IPv4 address, which a NAT64 gateway reaches; the filter checks that one
// too.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// EgressFilter answers HTTP CONNECT requests for any destination that none
// of Denied holds, unless one of Allowed holds it.
type EgressFilter struct {
	// Denied are refused: DefaultDeniedRanges, the pod's node and its own
	// addresses, the management cluster's networks.
	Denied []DeniedRange
	// Allowed are taken although a range of Denied holds them: the
	// platform's exceptions (a webhook service it runs in the management
	// cluster, say).
	Allowed []netip.Prefix
	// Resolve resolves a host name; nil means net.DefaultResolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial connects to an allowed address; nil means (&net.Dialer{}).DialContext.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DialTimeout bounds a dial; 0 means DefaultEgressDialTimeout.
	DialTimeout time.Duration
	// MaxConnections bounds the connections handled at once (more are
	// answered 503); 0 means DefaultEgressMaxConnections.
	MaxConnections int
	// Log receives a line for refused destinations (one every
	// refusedLogInterval at most, with the count) and, at V(1), one per
	// failed dial; the zero Logger discards.
	Log logr.Logger

	active atomic.Int64
	// refused counts refusals since refusedLogged, the last line's time
	// in Unix nanoseconds.
	refused       atomic.Int64
	refusedLogged atomic.Int64
	// connDone, if set, is called when a connection has been handled;
	// tests wait on it.
	connDone func()
}

// Active returns the number of client connections being handled.
func (f *EgressFilter) Active() int {
	return int(f.active.Load())
}

// Serve answers the connections l accepts until ctx is done (then it
// closes l and returns nil) or Accept fails. Spliced connections outlive
// Serve and end when either side closes.
func (f *EgressFilter) Serve(ctx context.Context, l net.Listener) error {
	return serveConns(ctx, l, f.Log, &f.active, f.connDone, func(conn net.Conn) {
		f.handle(ctx, conn, int(f.active.Load()) > cmp.Or(f.MaxConnections, DefaultEgressMaxConnections))
	})
}

// Refusal says why addr is refused, or "" when it is not.
func (f *EgressFilter) Refusal(addr netip.Addr) string {
	addr = addr.Unmap().WithZone("")
	checked := []netip.Addr{addr}
	if nat64.Contains(addr) {
		b := addr.As16()
		checked = append(checked, netip.AddrFrom4([4]byte(b[12:16])))
	}
	for _, a := range checked {
		if f.allowed(a) {
			continue
		}
		for _, d := range f.Denied {
			if d.Prefix.Contains(a) {
				if a != addr {
					return fmt.Sprintf("%s carries %s, which is %s", addr, a, d.Why)
				}
				return fmt.Sprintf("%s is %s", addr, d.Why)
			}
		}
	}
	return ""
}

func (f *EgressFilter) allowed(a netip.Addr) bool {
	for _, p := range f.Allowed {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// handle answers one CONNECT request: refused, or spliced to the
// destination; 503 when the filter has too many connections.
func (f *EgressFilter) handle(ctx context.Context, conn net.Conn, tooMany bool) {
	defer func() { _ = conn.Close() }()

	_ = conn.SetDeadline(time.Now().Add(requestTimeout))
	br := bufio.NewReader(io.LimitReader(conn, maxRequestBytes))
	req, err := http.ReadRequest(br)
	switch {
	case err != nil:
		answer(conn, answerBadRequest)
		return
	case req.Method != http.MethodConnect:
		answer(conn, answerNotAllowed)
		return
	case br.Buffered() > 0:
		answer(conn, answerBadRequest)
		return
	case tooMany:
		answer(conn, statusLine(http.StatusServiceUnavailable, "the egress filter handles too many connections"))
		return
	}
	target := req.RequestURI
	host, port, err := net.SplitHostPort(target)
	if err != nil || host == "" || port == "" {
		answer(conn, answerBadRequest)
		return
	}
	// A name's answer says neither whether it resolved nor to what: the
	// management cluster's DNS answers it, and a tenant's administrator
	// must not map the management network by asking.
	_, literal := parseAddr(host)
	refuse := func(why string) {
		f.logRefused(target, why)
		if !literal {
			why = host + " does not resolve, as a fully qualified name, to an address the tenant's apiservers may call"
		}
		answer(conn, statusLine(http.StatusForbidden, fmt.Sprintf("the egress filter of the tenant's apiservers refuses %s: %s", target, why)))
	}
	addrs, err := f.resolve(ctx, host)
	if err != nil {
		refuse(fmt.Sprintf("%s does not resolve: %v", host, err))
		return
	}
	for _, a := range addrs {
		if why := f.Refusal(a); why != "" {
			refuse(why)
			return
		}
	}
	up, err := f.dial(ctx, addrs, port)
	if err != nil {
		f.Log.V(1).Info("Dial failed", "target", target, "err", err)
		answer(conn, statusLine(http.StatusBadGateway, fmt.Sprintf("the egress filter could not connect to %s", target)))
		return
	}
	_ = conn.SetDeadline(time.Time{})
	if answer(conn, answerEstablished) {
		splice(conn, up)
	} else {
		_ = up.Close()
	}
}

// parseAddr is host as an address, when it is one.
func parseAddr(host string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(host)
	return a, err == nil
}

// resolve returns the addresses of host: itself when it is an address. A
// name is resolved as fully qualified (no search list of the pod's
// resolv.conf: "kubernetes" must not become the management cluster's
// kubernetes.default.svc).
func (f *EgressFilter) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, ok := parseAddr(host); ok {
		return []netip.Addr{a}, nil
	}
	if !strings.HasSuffix(host, ".") {
		host += "."
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	resolve := f.Resolve
	if resolve == nil {
		resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	addrs, err := resolve(ctx, host)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no address")
	}
	return addrs, err
}

// dial connects to the first of addrs that accepts, on port.
func (f *EgressFilter) dial(ctx context.Context, addrs []netip.Addr, port string) (net.Conn, error) {
	dial := f.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(f.DialTimeout, DefaultEgressDialTimeout))
	defer cancel()
	var errs []error
	for _, a := range addrs {
		conn, err := dial(ctx, "tcp", net.JoinHostPort(a.Unmap().WithZone("").String(), port))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// logRefused logs a refusal, one line every refusedLogInterval at most.
func (f *EgressFilter) logRefused(target, why string) {
	n := f.refused.Add(1)
	last := f.refusedLogged.Load()
	if time.Since(time.Unix(0, last)) < refusedLogInterval || !f.refusedLogged.CompareAndSwap(last, time.Now().UnixNano()) {
		return
	}
	f.refused.Add(-n)
	f.Log.Info("Refused a destination of the tenant's apiserver", "target", target, "why", why, "refusedSinceLastLine", n)
}

// statusLine is an answer without a body whose reason phrase says why:
// kube-apiserver's egress dialer puts the status line in its error, which
// is what the tenant's administrator reads (a webhook's failure).
func statusLine(code int, reason string) string {
	reason = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, reason)
	return fmt.Sprintf("HTTP/1.1 %d %s: %s\r\n\r\n", code, http.StatusText(code), reason)
}

// Gateways are the next hops of the routes in a Linux routing table as
// /proc/net/route (IPv4) and /proc/net/ipv6_route (IPv6) print them: in a
// pod, its default gateway is an address of its node (a bridge's, a
// veth's), which status.hostIPs does not name.
func Gateways(route4, route6 io.Reader) []netip.Addr {
	var out []netip.Addr
	add := func(a netip.Addr) {
		if a.IsValid() && !a.IsUnspecified() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	if route4 != nil {
		sc := bufio.NewScanner(route4)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 3 || len(f[2]) != 8 {
				continue
			}
			b, err := hex.DecodeString(f[2])
			if err != nil {
				continue
			}
			// The kernel prints the address in host order: little-endian.
			add(netip.AddrFrom4([4]byte{b[3], b[2], b[1], b[0]}))
		}
	}
	if route6 != nil {
		sc := bufio.NewScanner(route6)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 5 || len(f[4]) != 32 {
				continue
			}
			b, err := hex.DecodeString(f[4])
			if err != nil {
				continue
			}
			add(netip.AddrFrom16([16]byte(b)))
		}
	}
	return out
}

// UnmapPrefix is p with an IPv4-mapped IPv6 range (::ffff:10.0.0.0/104)
// written as the IPv4 range it maps (10.0.0.0/8): the filter judges
// addresses unmapped, and would never find one in the mapped spelling.
func UnmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}
