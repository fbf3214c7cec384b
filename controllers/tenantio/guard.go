package tenantio

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
)

// metadataRanges are where clouds serve a node's instance metadata (its
// credentials among it): link-local, and the metadata addresses outside
// it. The operator reaches addresses a spec names (etcd servers, S3
// endpoints) from its own pods, whose node's identity those endpoints
// would hand out.
var metadataRanges = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fd00:ec2::/32"),
	netip.MustParsePrefix("100.100.100.200/32"),
}

// RefuseMetadata is a net.Dialer's Control: it refuses to connect to an
// address of metadataRanges, after resolution, so that neither a literal
// address nor a name that resolves to one gets through.
func RefuseMetadata(network, address string, _ syscall.RawConn) error {
	ap, perr := netip.ParseAddrPort(address)
	if perr != nil || !strings.HasPrefix(network, "tcp") && !strings.HasPrefix(network, "udp") {
		return nil //nolint:nilerr // not an IP socket: nothing to refuse
	}
	a := ap.Addr().Unmap().WithZone("")
	for _, p := range metadataRanges {
		if p.Contains(a) {
			return fmt.Errorf("the operator does not connect to %s: it is link-local or a cloud's metadata address, where the node's credentials are served", a)
		}
	}
	return nil
}
