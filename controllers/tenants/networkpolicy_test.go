package tenants

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// A new tenant is isolated without asking: its NetworkPolicy selects its
// pods, lets them call its etcd and what its spec lists, and status says
// so; mode None removes it, and a policy of its name that is someone
// else's is never taken.
func TestApiServerConfigReconciler_IsolatesTheApiserversWithANetworkPolicy(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "fenced", nil) // no networkPolicy: admission gives it Enforced
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}); got.Spec.NetworkPolicy == nil || got.Spec.NetworkPolicy.Mode != v1alpha1.NetworkPolicyEnforced {
		t.Fatalf("a new tenant's spec.networkPolicy is %+v, want mode Enforced", got.Spec.NetworkPolicy)
	}
	d := waitForDeployment(t, cfg)
	etcdHost := env.ControlPlane.Etcd.URL.Hostname()
	etcdPort := env.ControlPlane.Etcd.URL.Port()
	key := client.ObjectKey{Namespace: ns, Name: apiserver.NetworkPolicyName(cfg.Name)}
	np := &networkingv1.NetworkPolicy{}
	eventually(t, 20*time.Second, "the tenant's NetworkPolicy and its status", func() error {
		if err := env.Client.Get(ctx, key, np); err != nil {
			return err
		}
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if s := got.Status.NetworkPolicy; s == nil || s.Name != key.Name || !slices.Contains(s.Egress, "etcd "+etcdHost+":"+etcdPort) || !slices.Contains(s.Egress, "DNS") {
			return fmt.Errorf("status.networkPolicy is %+v", s)
		}
		return nil
	})
	owner := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
	if !metav1.IsControlledBy(np, owner) {
		t.Errorf("the NetworkPolicy's owners are %v, want the ApiServerConfig", np.OwnerReferences)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("the policy's selector %v (%v) does not select the apiserver pods (%v)", np.Spec.PodSelector, err, d.Spec.Template.Labels)
	}
	etcdAddr := netip.MustParseAddr(etcdHost)
	reachesEtcd := slices.ContainsFunc(np.Spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) bool {
		return len(r.To) == 1 && r.To[0].IPBlock != nil && r.To[0].IPBlock.CIDR == netip.PrefixFrom(etcdAddr, etcdAddr.BitLen()).String() &&
			len(r.Ports) == 1 && r.Ports[0].Port.String() == etcdPort
	})
	if !reachesEtcd {
		t.Errorf("no egress rule reaches etcd %s:%s alone: %v", etcdHost, etcdPort, np.Spec.Egress)
	}

	// A webhook's address added to the spec is added to the policy.
	webhook := networkingv1.NetworkPolicyEgressRule{
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.10/32"}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(8443))}},
	}
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) {
		s.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyEnforced, Egress: []networkingv1.NetworkPolicyEgressRule{webhook}}
	})
	eventually(t, 20*time.Second, "the policy allows the webhook", func() error {
		if err := env.Client.Get(ctx, key, np); err != nil {
			return err
		}
		if len(np.Spec.Egress) == 0 || len(np.Spec.Egress[0].To) != 1 || np.Spec.Egress[0].To[0].IPBlock == nil || np.Spec.Egress[0].To[0].IPBlock.CIDR != "192.0.2.10/32" {
			return fmt.Errorf("egress is %v", np.Spec.Egress)
		}
		got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
		if s := got.Status.NetworkPolicy; s == nil || len(s.Egress) == 0 || s.Egress[0] != "spec.networkPolicy.egress[0]" {
			return fmt.Errorf("status.networkPolicy is %+v", s)
		}
		return nil
	})

	// Mode None removes the policy, and status says there is none.
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) {
		s.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyNone}
	})
	eventually(t, 20*time.Second, "the policy is gone", func() error {
		switch err := env.Client.Get(ctx, key, &networkingv1.NetworkPolicy{}); {
		case err == nil:
			return errors.New("it is still there")
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("reading it: %w", err)
		}
		if s := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}).Status.NetworkPolicy; s != nil {
			return fmt.Errorf("status.networkPolicy is still %+v", s)
		}
		return nil
	})

	// A policy of that name made by someone else is left as it is: the
	// tenant, asking for isolation again, says whose it is.
	theirs := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	if err := env.Client.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	updateTenant(t, cfg, func(s *v1alpha1.ApiServerConfigSpec) {
		s.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyEnforced}
	})
	msg := waitForNameConflict(t, cfg, "NetworkPolicy "+ns+"/"+key.Name)
	if !strings.Contains(msg, "no ApiServerConfig") {
		t.Errorf("the conflict does not say who holds the policy: %q", msg)
	}
	now := get(t, &networkingv1.NetworkPolicy{ObjectMeta: theirs.ObjectMeta})
	if now.ResourceVersion != theirs.ResourceVersion || len(now.OwnerReferences) > 0 {
		t.Errorf("their policy was changed: resourceVersion %s → %s, owners %v", theirs.ResourceVersion, now.ResourceVersion, now.OwnerReferences)
	}
}
