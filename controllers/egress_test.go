package controllers

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The operator reads the management cluster's Service ranges, every
// ServiceCIDR's, for the tenants' egress filter; where it may not list
// them it goes on without them.
func TestManagementServiceRanges_ReadsEveryServiceCIDR(t *testing.T) {
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
	got, err := ManagementServiceRanges(ctx, env.Client)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append([]netip.Prefix{netip.MustParsePrefix("10.250.0.0/24"), netip.MustParsePrefix("fd00:250::/112")}, want...) {
		if !slices.Contains(got, p) {
			t.Errorf("the management Service ranges %v lack %s", got, p)
		}
	}
	if len(list.Items) < 2 {
		t.Errorf("the cluster has %d ServiceCIDRs, want its own and the test's", len(list.Items))
	}

	// A user without the right to list them: none, and no error.
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "someone-without-rights"}
	restricted, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ManagementServiceRanges(ctx, restricted); err != nil || len(got) != 0 {
		t.Errorf("without the right to list ServiceCIDRs: %v, %v; want none and no error", got, err)
	}
}
