package tenants

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The operator reads the management cluster's Service ranges, every
// ServiceCIDR's, for the tenants' egress filter; where it may not list
// them it goes on without them.
func TestManagementRanges_ReadsEveryServiceCIDRAndTheAPIServersAddresses(t *testing.T) {
	ctx := context.Background()
	extra := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "egress-test-extra"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.250.0.0/24", "fd00:250::/112"}}}
	if err := env.Client.Create(ctx, extra); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), extra) })
	var list networkingv1.ServiceCIDRList
	if err := env.Client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	var want []netip.Prefix
	for _, sc := range list.Items {
		for _, c := range sc.Spec.CIDRs {
			want = append(want, netip.MustParsePrefix(c))
		}
	}
	got, missing, err := ManagementRanges(ctx, env.Client)
	if err != nil || len(missing) > 0 {
		t.Fatal(err, missing)
	}
	var slice discoveryv1.EndpointSlice
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &slice); err != nil {
		t.Fatal(err)
	}
	for _, e := range slice.Endpoints {
		for _, a := range e.Addresses {
			want = append(want, netip.PrefixFrom(netip.MustParseAddr(a), netip.MustParseAddr(a).BitLen()))
		}
	}
	if len(slice.Endpoints) == 0 {
		t.Error("the management kube-apiserver's EndpointSlice has no endpoint")
	}
	for _, p := range append([]netip.Prefix{netip.MustParsePrefix("10.250.0.0/24"), netip.MustParsePrefix("fd00:250::/112")}, want...) {
		if !slices.Contains(got, p) {
			t.Errorf("the management Service ranges %v lack %s", got, p)
		}
	}
	if len(list.Items) < 2 {
		t.Errorf("the cluster has %d ServiceCIDRs, want its own and the test's", len(list.Items))
	}

	// A user without the rights: none, no error, and both said missing.
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "someone-without-rights"}
	restricted, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if got, missing, err := ManagementRanges(ctx, restricted); err != nil || len(got) != 0 || len(missing) != 2 {
		t.Errorf("without the rights to read them: %v, missing %q, %v; want none, both missing and no error", got, missing, err)
	}
}
