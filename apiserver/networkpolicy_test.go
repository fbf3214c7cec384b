package apiserver

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

func policyConfig(servers, overrides []string, np *v1alpha1.NetworkPolicySpec) *v1alpha1.ApiServerConfig {
	cfg := &v1alpha1.ApiServerConfig{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns"}}
	cfg.Spec.Etcd.Servers = servers
	if len(overrides) > 0 {
		cfg.Spec.Etcd.Overrides = []v1alpha1.EtcdOverride{{Group: "", Resource: "events", Servers: overrides}}
	}
	cfg.Spec.NetworkPolicy = np
	return cfg
}

func tcp(port int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(port))}
}

func TestNetworkPolicy_NoneOrUnsetRendersNothing(t *testing.T) {
	for name, np := range map[string]*v1alpha1.NetworkPolicySpec{"unset": nil, "None": {Mode: v1alpha1.NetworkPolicyNone}} {
		c := complete(t, policyConfig([]string{"https://10.0.0.5:2379"}, nil, np), Inputs{})
		if got, status := desiredNetworkPolicy(c); got != nil || status != nil {
			t.Errorf("%s: got a NetworkPolicy %v, want none", name, got)
		}
	}
}

func TestNetworkPolicy_AllowsTheSpecsRulesEtcdByAddressAndDNSOnly(t *testing.T) {
	webhook := networkingv1.NetworkPolicyEgressRule{
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.10/32"}}},
		Ports: []networkingv1.NetworkPolicyPort{tcp(8443)},
	}
	cfg := policyConfig(
		[]string{"https://10.0.0.5:2379", "https://10.0.0.6:2379", "https://[fd00::7]:2379"},
		[]string{"https://10.0.0.9:2479"},
		&v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyEnforced, Egress: []networkingv1.NetworkPolicyEgressRule{webhook}})
	cfg.Spec.Serving.SecurePort = 8443
	c := complete(t, cfg, Inputs{})
	np, status := desiredNetworkPolicy(c)
	if np == nil {
		t.Fatal("mode Enforced rendered no NetworkPolicy")
	}
	if np.Name != "t-apiserver" || np.Namespace != "ns" {
		t.Errorf("NetworkPolicy is %s/%s, want ns/t-apiserver", np.Namespace, np.Name)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("policy types %v, want Ingress and Egress", np.Spec.PolicyTypes)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || sel.Empty() {
		t.Fatalf("pod selector %v (%v) must select the tenant's pods only", np.Spec.PodSelector, err)
	}
	pods := desiredPodLabels(t, cfg)
	if !sel.Matches(labels.Set(pods)) {
		t.Errorf("pod selector %v does not select the apiserver pods (labels %v)", sel, pods)
	}
	if got := np.Spec.Ingress; len(got) != 1 || len(got[0].From) != 0 || len(got[0].Ports) != 1 || got[0].Ports[0].Port.IntVal != 8443 {
		t.Errorf("ingress %+v, want the serving port 8443 from anywhere", got)
	}

	want := []networkingv1.NetworkPolicyEgressRule{
		webhook,
		ipRule("10.0.0.5/32", 2379), ipRule("10.0.0.6/32", 2379), ipRule("10.0.0.9/32", 2479), ipRule("fd00::7/128", 2379),
	}
	got := np.Spec.Egress
	if len(got) != len(want)+1 {
		t.Fatalf("egress has %d rules, want %d: %s", len(got), len(want)+1, toYAML(t, got))
	}
	for i := range want {
		if !bytes.Equal(toYAML(t, got[i]), toYAML(t, want[i])) {
			t.Errorf("egress[%d] =\n%s\nwant\n%s", i, toYAML(t, got[i]), toYAML(t, want[i]))
		}
	}
	dns := got[len(got)-1]
	if len(dns.To) != 1 || dns.To[0].NamespaceSelector == nil || dns.To[0].PodSelector == nil || dns.To[0].IPBlock != nil {
		t.Errorf("last egress rule %s must reach the cluster DNS pods only", toYAML(t, dns))
	}
	for _, p := range dns.Ports {
		if p.Port.IntVal != 53 {
			t.Errorf("DNS rule allows port %v, want 53 only", p.Port)
		}
	}
	wantStatus := []string{"spec.networkPolicy.egress[0]", "etcd 10.0.0.5:2379", "etcd 10.0.0.6:2379", "etcd 10.0.0.9:2479", "etcd [fd00::7]:2379", "DNS"}
	if !slices.Equal(status.Egress, wantStatus) || status.Name != "t-apiserver" || !strings.Contains(status.Ingress, "8443") {
		t.Errorf("status %+v, want name t-apiserver, ingress on 8443, egress %q", status, wantStatus)
	}
	if w := networkPolicyWarnings(&c.Spec, &c.Etcd); len(w) != 0 {
		t.Errorf("etcd given by address: warnings %q, want none", w)
	}
}

func ipRule(cidr string, port int32) networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}},
		Ports: []networkingv1.NetworkPolicyPort{tcp(port)},
	}
}

func desiredPodLabels(t *testing.T, cfg *v1alpha1.ApiServerConfig) map[string]string {
	t.Helper()
	_, d, _, _ := desiredObjectsOf(t, cfg)
	return d.Spec.Template.Labels
}

func TestNetworkPolicy_EtcdByHostNameIsAllowedByPortUnlessARuleReachesIt(t *testing.T) {
	names := []string{"https://etcd-0.etcd.etcd-system.svc:2379", "https://etcd-1.etcd.etcd-system.svc:2379"}
	c := complete(t, policyConfig(names, nil, &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyEnforced}), Inputs{})
	np, status := desiredNetworkPolicy(c)
	open := 0
	for _, r := range np.Spec.Egress {
		if len(r.To) == 0 {
			open++
			if len(r.Ports) != 1 || r.Ports[0].Port.IntVal != 2379 || *r.Ports[0].Protocol != corev1.ProtocolTCP {
				t.Errorf("a rule to any address allows %s, want TCP 2379 only", toYAML(t, r.Ports))
			}
		}
	}
	if open != 1 {
		t.Errorf("%d rules to any address, want one for the port both servers share: %s", open, toYAML(t, np.Spec.Egress))
	}
	if !strings.Contains(strings.Join(status.Egress, ";"), "etcd etcd-0.etcd.etcd-system.svc:2379 (TCP port 2379 of any address") {
		t.Errorf("status %q does not say that port 2379 is open to any address", status.Egress)
	}
	if w := networkPolicyWarnings(&c.Spec, &c.Etcd); len(w) != 2 || !strings.Contains(w[0], "TCP port 2379 of any address") {
		t.Errorf("warnings %q, want one per server saying that its port is open to any address", w)
	}

	// A rule without ports (every port of one webhook) says nothing of
	// where etcd is: the port stays open.
	webhookOnly := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.10/32"}}}}
	c = complete(t, policyConfig(names, nil, &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyEnforced, Egress: []networkingv1.NetworkPolicyEgressRule{webhookOnly}}), Inputs{})
	np, _ = desiredNetworkPolicy(c)
	if !slices.ContainsFunc(np.Spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) bool { return len(r.To) == 0 }) {
		t.Errorf("a rule without ports replaced the open etcd port, which would cut etcd off: %s", toYAML(t, np.Spec.Egress))
	}

	// A rule of the spec that names the port (here a port range to the
	// etcd namespace) replaces the open one.
	etcdPods := networkingv1.NetworkPolicyEgressRule{
		To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "etcd-system"}}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(2000)), EndPort: ptr.To[int32](3000)}},
	}
	c = complete(t, policyConfig(names, nil, &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyEnforced, Egress: []networkingv1.NetworkPolicyEgressRule{webhookOnly, etcdPods}}), Inputs{})
	np, status = desiredNetworkPolicy(c)
	for _, r := range np.Spec.Egress {
		if len(r.To) == 0 {
			t.Errorf("with a rule reaching 2379, a rule to any address remains: %s", toYAML(t, r))
		}
	}
	if w := networkPolicyWarnings(&c.Spec, &c.Etcd); len(w) != 0 {
		t.Errorf("warnings %q, want none once a rule reaches the port", w)
	}
	if !slices.Contains(status.Egress, "etcd etcd-0.etcd.etcd-system.svc:2379 (by spec.networkPolicy.egress[1])") {
		t.Errorf("status %q does not say which rule reaches etcd", status.Egress)
	}
}

func TestNetworkPolicy_WarnsWhenNoRuleReachesTheOIDCIssuer(t *testing.T) {
	cfg := policyConfig([]string{"https://10.0.0.5:2379"}, nil, &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyEnforced})
	cfg.Spec.Authentication.OIDC = &v1alpha1.OIDCSpec{IssuerURL: "https://login.example.com:8443/realm", ClientID: "k"}
	c := complete(t, cfg, Inputs{})
	if w := networkPolicyWarnings(&c.Spec, &c.Etcd); len(w) != 1 || !strings.Contains(w[0], "TCP port 8443") {
		t.Errorf("warnings %q, want one naming the issuer's port 8443", w)
	}
	cfg.Spec.NetworkPolicy.Egress = []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{tcp(8443)}}}
	c = complete(t, cfg, Inputs{})
	if w := networkPolicyWarnings(&c.Spec, &c.Etcd); len(w) != 0 {
		t.Errorf("warnings %q, want none once a rule reaches the issuer", w)
	}
}

func TestNetworkPolicy_NewTenantsAreEnforcedExistingOnesKeepTheirs(t *testing.T) {
	cfg := policyConfig([]string{"https://10.0.0.5:2379"}, nil, nil)
	SetCreateDefaults(cfg)
	if np := cfg.Spec.NetworkPolicy; np == nil || np.Mode != v1alpha1.NetworkPolicyEnforced {
		t.Errorf("a new tenant gets %+v, want mode Enforced", np)
	}
	none := policyConfig([]string{"https://10.0.0.5:2379"}, nil, &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyNone})
	SetCreateDefaults(none)
	if none.Spec.NetworkPolicy.Mode != v1alpha1.NetworkPolicyNone {
		t.Errorf("a new tenant asking for None gets %s", none.Spec.NetworkPolicy.Mode)
	}
}
