package apiserver

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// DNS is where the tenant's apiservers resolve names (OIDC issuers, etcd
// servers, webhooks given by host name): the cluster DNS as kubeadm and
// most distributions label it. A DNS cache on the node (NodeLocal
// DNSCache) is on the node's address: whether a pod may reach its own node
// under a policy depends on the network plugin (some always allow it,
// Calico and Cilium police it), so it needs a rule of the spec there.
var (
	dnsNamespaceSelector = map[string]string{corev1.LabelMetadataName: "kube-system"}
	dnsPodSelector       = map[string]string{"k8s-app": "kube-dns"}
)

// NetworkPolicyName is the name of the NetworkPolicy of the ApiServerConfig
// called name: its workload's, like the Deployment and the budget.
func NetworkPolicyName(name string) string { return DeploymentName(name) }

// desiredNetworkPolicy isolates the apiserver pods when the spec asks for
// it (nil otherwise, and the controller deletes the one it made): anyone
// may reach their serving port (clients come through the Service, a load
// balancer or a node port, from addresses nobody knows ahead), and they
// may call only the spec's egress rules, each etcd server given by IP
// address on its port, and the cluster DNS. An etcd server given by host
// name is allowed by its port alone, on any address, unless a rule of the
// spec reaches that port: admission warns. The spec's rules come first,
// so that a refusal of the management cluster names them by their index.
// Kubelet's probes come from the node, which every plugin lets in.
func desiredNetworkPolicy(c *Completed) (*networkingv1.NetworkPolicy, *v1alpha1.NetworkPolicyStatus) {
	np := c.Spec.NetworkPolicy
	if np == nil || np.Mode != v1alpha1.NetworkPolicyEnforced {
		return nil, nil
	}
	name := NetworkPolicyName(c.Name)
	status := &v1alpha1.NetworkPolicyStatus{Name: name, Ingress: fmt.Sprintf("any source, TCP port %d", c.Spec.Serving.SecurePort)}
	ingressPorts := []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(c.Spec.Serving.SecurePort))}}
	if k := c.Spec.Konnectivity; k != nil {
		// The agents dial in: the tunnels are opened from the nodes. The
		// operator reads the server's readiness for the pod's gate.
		status.Ingress = fmt.Sprintf("any source, TCP ports %d (apiserver), %d (konnectivity agents) and %d (konnectivity server's health, which the operator reads)",
			c.Spec.Serving.SecurePort, k.Port, KonnectivityHealthPort)
		ingressPorts = append(ingressPorts,
			networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(k.Port))},
			networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(KonnectivityHealthPort))})
	}
	egress := make([]networkingv1.NetworkPolicyEgressRule, 0, len(np.Egress)+len(c.Etcd.Addresses)+1)
	for i, r := range np.Egress {
		egress = append(egress, *r.DeepCopy())
		status.Egress = append(status.Egress, fmt.Sprintf("spec.networkPolicy.egress[%d]", i))
	}
	anyTo := map[int32]bool{}
	for _, a := range c.Etcd.Addresses {
		prefix, port, ok := etcdAddressPeer(a)
		if !ok {
			port, ok = etcdNamePort(a)
			if !ok {
				continue
			}
			if i := egressRuleForPort(np.Egress, port); i >= 0 {
				status.Egress = append(status.Egress, fmt.Sprintf("etcd %s (by spec.networkPolicy.egress[%d])", a, i))
				continue
			}
			if !anyTo[port] {
				anyTo[port] = true
				egress = append(egress, networkingv1.NetworkPolicyEgressRule{
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(port))}},
				})
			}
			status.Egress = append(status.Egress, fmt.Sprintf("etcd %s (TCP port %d of any address: a host name)", a, port))
			continue
		}
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{
			To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: prefix.String()}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(port))}},
		})
		status.Egress = append(status.Egress, "etcd "+a)
	}
	dns := intstr.FromInt32(53)
	egress = append(egress, networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: dnsNamespaceSelector},
			PodSelector:       &metav1.LabelSelector{MatchLabels: dnsPodSelector},
		}},
		Ports: []networkingv1.NetworkPolicyPort{
			{Protocol: ptr.To(corev1.ProtocolUDP), Port: &dns},
			{Protocol: ptr.To(corev1.ProtocolTCP), Port: &dns},
		},
	})
	status.Egress = append(status.Egress, "DNS")
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: objectMeta(c, name),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: SelectorLabels(c.Name)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: ingressPorts}},
			Egress:      egress,
		},
	}, status
}

// DesiredNetworkPolicyStatus is what the tenant's NetworkPolicy lets
// through, for status; nil when it has none.
func DesiredNetworkPolicyStatus(c *Completed) *v1alpha1.NetworkPolicyStatus {
	_, s := desiredNetworkPolicy(c)
	return s
}

// etcdAddressPeer is the address block (one address) and port of an etcd
// server's host:port; ok is false for a host name, which a NetworkPolicy
// cannot name.
func etcdAddressPeer(hostPort string) (netip.Prefix, int32, bool) {
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return netip.Prefix{}, 0, false
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}, 0, false
	}
	p, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		return netip.Prefix{}, 0, false
	}
	addr = addr.WithZone("")
	return netip.PrefixFrom(addr, addr.BitLen()), int32(p), true
}

// etcdNamePort is the port of an etcd server's host:port.
func etcdNamePort(hostPort string) (int32, bool) {
	_, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return 0, false
	}
	p, err := strconv.ParseInt(port, 10, 32)
	return int32(p), err == nil
}

// networkPolicyWarnings says what an enforced policy leaves open for etcd
// servers given by host name, which a NetworkPolicy cannot name: their
// port, on any address, unless a rule of the spec reaches that port.
func networkPolicyWarnings(spec *v1alpha1.ApiServerConfigSpec, etcd *EtcdPlacement) []string {
	np := spec.NetworkPolicy
	if np == nil || np.Mode != v1alpha1.NetworkPolicyEnforced {
		return nil
	}
	var warnings []string
	for _, a := range etcd.Addresses {
		if _, _, ok := etcdAddressPeer(a); ok {
			continue
		}
		if port, ok := etcdNamePort(a); ok && egressRuleForPort(np.Egress, port) < 0 {
			warnings = append(warnings, fmt.Sprintf(
				"spec.networkPolicy: etcd server %s is given by host name, which a NetworkPolicy cannot name, so the apiservers may call TCP port %d of any address: add a rule to spec.networkPolicy.egress that names that port and reaches the server (its pods by selector, its addresses by ipBlock), or give the server by IP address",
				a, port))
		}
	}
	type issuer struct{ name, url string }
	var issuers []issuer
	if o := spec.Authentication.OIDC; o != nil {
		issuers = append(issuers, issuer{"the OIDC issuer " + o.IssuerURL, o.IssuerURL})
	}
	for i, j := range spec.Authentication.JWT {
		if j.Issuer.EgressSelectorType == "cluster" {
			continue // called through the konnectivity tunnel
		}
		u := j.Issuer.URL
		if d := j.Issuer.DiscoveryURL; d != nil {
			u = *d
		}
		issuers = append(issuers, issuer{fmt.Sprintf("the issuer of spec.authentication.jwt[%d] (%s)", i, u), u})
	}
	for _, is := range issuers {
		u, err := url.Parse(is.url)
		if err != nil {
			continue
		}
		port := int64(443)
		if p := u.Port(); p != "" {
			port, err = strconv.ParseInt(p, 10, 32)
		}
		if err == nil && egressRuleForPort(np.Egress, int32(port)) < 0 {
			warnings = append(warnings, fmt.Sprintf(
				"spec.networkPolicy: no rule of spec.networkPolicy.egress reaches TCP port %d, where %s serves: the apiservers cannot fetch its keys, and refuse its tokens",
				port, is.name))
		}
	}
	return warnings
}

// egressRuleForPort is the index of the first rule that names TCP port
// (by number, or in a range), -1 when none does. A rule without ports
// opens every port of its destinations, which says nothing of where etcd
// is: it does not count.
func egressRuleForPort(rules []networkingv1.NetworkPolicyEgressRule, port int32) int {
	for i, r := range rules {
		for _, p := range r.Ports {
			if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
				continue
			}
			if p.Port == nil || p.Port.Type != intstr.Int {
				continue // every port, or a container's named port
			}
			end := p.Port.IntVal
			if p.EndPort != nil {
				end = *p.EndPort
			}
			if p.Port.IntVal <= port && port <= end {
				return i
			}
		}
	}
	return -1
}
