package controllers

import (
	"context"
	"fmt"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ManagementServiceRanges are the management cluster's Service ranges (its
// ServiceCIDRs), which no tenant's apiserver may call: a tenant's Service
// range is often the same (10.96.0.0/12 is everyone's default), so that a
// Service of the tenant given to a webhook names an address of the
// management cluster's. None, and no error, where the cluster does not
// serve the API (before Kubernetes 1.33) or the operator may not list it:
// the platform then gives the ranges (--tenant-egress-deny).
func ManagementServiceRanges(ctx context.Context, c client.Reader) ([]netip.Prefix, error) {
	var list networkingv1.ServiceCIDRList
	if err := c.List(ctx, &list); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing the management cluster's ServiceCIDRs, the Service ranges no tenant may call: %w", err)
	}
	var out []netip.Prefix
	for _, sc := range list.Items {
		for _, cidr := range sc.Spec.CIDRs {
			p, err := netip.ParsePrefix(cidr)
			if err != nil {
				continue // the apiserver validated it: not ours to judge
			}
			out = append(out, p.Masked())
		}
	}
	return out, nil
}
