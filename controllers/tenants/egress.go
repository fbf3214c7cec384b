package tenants

import (
	"context"
	"fmt"
	"net/netip"

	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ManagementRanges are what of the management cluster no tenant's
// apiserver may call, as the operator can read it: its Service ranges
// (ServiceCIDRs; a tenant's Service range is often the same, 10.96.0.0/12
// being everyone's default, so that a Service of the tenant given to a
// webhook names an address of the management cluster's) and the
// addresses its kube-apiserver serves on (the EndpointSlice of
// default/kubernetes). missing says what could not be read (an API the
// cluster does not serve, a right the operator was not given): the
// platform then gives those ranges (--tenant-egress-deny).
func ManagementRanges(ctx context.Context, c client.Reader) (ranges []netip.Prefix, missing []string, err error) {
	unreadable := func(err error) bool {
		return meta.IsNoMatchError(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsMethodNotSupported(err)
	}
	var list networkingv1.ServiceCIDRList
	switch err := c.List(ctx, &list); {
	case err != nil && unreadable(err):
		missing = append(missing, fmt.Sprintf("the Service ranges (ServiceCIDRs: %v)", err))
	case err != nil:
		return nil, nil, fmt.Errorf("listing the management cluster's ServiceCIDRs, the Service ranges no tenant may call: %w", err)
	}
	for _, sc := range list.Items {
		for _, cidr := range sc.Spec.CIDRs {
			if p, err := netip.ParsePrefix(cidr); err == nil {
				ranges = append(ranges, p.Masked())
			}
		}
	}
	var slice discoveryv1.EndpointSlice
	switch err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "kubernetes"}, &slice); {
	case err != nil && unreadable(err):
		missing = append(missing, fmt.Sprintf("the management kube-apiserver's addresses (EndpointSlice default/kubernetes: %v)", err))
	case err != nil:
		return nil, nil, fmt.Errorf("reading the management kube-apiserver's addresses (EndpointSlice default/kubernetes), which no tenant may call: %w", err)
	}
	for _, e := range slice.Endpoints {
		for _, a := range e.Addresses {
			if addr, err := netip.ParseAddr(a); err == nil {
				addr = addr.Unmap()
				ranges = append(ranges, netip.PrefixFrom(addr, addr.BitLen()))
			}
		}
	}
	return ranges, missing, nil
}
