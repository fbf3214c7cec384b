package apiserver

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	netutils "k8s.io/utils/net"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// Inputs are the facts about the world that completion needs and the spec
// does not hold. The controller looks them up; builders never do.
type Inputs struct {
	// ServiceClusterIP is the ClusterIP of the Service in front of the
	// apiservers, once the management cluster allocated it.
	ServiceClusterIP string
	// ServiceIngress are the LoadBalancer addresses (IPs or host names) of
	// that Service, once known.
	ServiceIngress []string
	// ManagementClusterDomain is the DNS domain of the cluster the operator
	// runs in, for the Service's fully qualified name. Defaults to
	// cluster.local.
	ManagementClusterDomain string
	// ObservedNodes and ObservedPods are the object counts last read from
	// the tenant's etcd, for Auto cache sizing.
	ObservedNodes *int64
	ObservedPods  *int64
	// EtcdUser is the tenant's own etcd user when its etcd servers are a
	// datastore of the platform's (EtcdUserName): its apiservers then
	// present a certificate the operator issues for that user
	// (EtcdUserSecretName) instead of spec.etcd.tls's.
	EtcdUser string
}

// SANs are the subject alternative names of the serving certificate.
type SANs struct {
	DNSNames []string
	IPs      []net.IP
}

// Completed is an ApiServerConfig with its defaults applied and every
// derived value worked out: what the flag renderer, the PKI and the object
// builders read. Build it with Complete.
type Completed struct {
	Name      string
	Namespace string
	// UID is the ApiServerConfig's, which its objects name as their owner;
	// empty for a manifest not yet created (admission, render): its
	// objects then name no owner.
	UID types.UID
	// Spec is the defaulted spec.
	Spec v1alpha1.ApiServerConfigSpec
	// Version is the parsed spec.version.
	Version *utilversion.Version
	// Catalog describes the bundled kube-apiserver of Version's minor; nil
	// when the operator has none (a user image of another minor).
	Catalog *Catalog
	// ServiceCIDRs are the parsed service ranges, primary first.
	ServiceCIDRs []netip.Prefix
	// KubernetesServiceIPs are the ClusterIPs of the tenant's `kubernetes`
	// Service: the first address of each service range.
	KubernetesServiceIPs []netip.Addr
	// ServiceName is the name of the Service in front of the apiservers.
	ServiceName string
	// Endpoint is the URL clients use to reach the apiservers.
	Endpoint string
	// SANs of the serving certificate.
	SANs SANs
	// ServiceAccountIssuers are the token issuers, the signing one first.
	ServiceAccountIssuers []string
	// Sizing is the cache sizing in force.
	Sizing Sizing
	// Etcd is where the tenant's data lives: which servers store what.
	Etcd EtcdPlacement
	// Keyspace is where its keys are: its servers' addresses and its
	// prefix, cleaned (KeyspaceOf the spec's etcd).
	Keyspace EtcdKeyspace
	// WatchFilter is the ApiServerConfig's WatchFilterLabel: the operator
	// instance it belongs to, whose objects carry it too.
	WatchFilter string
	// EtcdUser is Inputs.EtcdUser: set, Spec.Etcd.TLS names the Secret
	// the operator issues for it.
	EtcdUser string
}

// WatchFilterLabel, on an ApiServerConfig, names the operator instance
// that reconciles it: the one started with --watch-filter=<its value>
// (instances without a filter reconcile the ApiServerConfigs without the
// label). The objects the operator creates for it carry it as well, so
// that each instance caches only its own. It is not on the apiserver
// pods: moving a tenant to another instance restarts nothing.
const WatchFilterLabel = "controlplane.apiserver-operator.dev/watch-filter"

// ServiceName is the name of the Service the operator creates in front of
// the apiservers of the ApiServerConfig called name.
func ServiceName(name string) string { return name + "-apiserver" }

// Complete defaults a copy of cfg's spec and derives what rendering needs.
// It fails only on values that admission should have refused (the CRD's
// rules make that unreachable for objects read from the API server).
func Complete(cfg *v1alpha1.ApiServerConfig, in Inputs) (*Completed, error) {
	c := &Completed{Name: cfg.Name, Namespace: cfg.Namespace, UID: cfg.UID, Spec: *cfg.Spec.DeepCopy(), WatchFilter: cfg.Labels[WatchFilterLabel]}
	SetDefaults(&c.Spec)

	v, err := utilversion.ParseSemantic(c.Spec.Version)
	if err != nil {
		return nil, fmt.Errorf("parsing spec.version %q: %w", c.Spec.Version, err)
	}
	c.Version = v
	if in.EtcdUser != "" {
		c.EtcdUser = in.EtcdUser
		c.Spec.Etcd.TLS = &v1alpha1.EtcdTLS{SecretName: EtcdUserSecretName(c.Name), CAKey: CABundleKey, CertKey: corev1.TLSCertKey, KeyKey: corev1.TLSPrivateKeyKey}
	}
	c.Etcd = newEtcdPlacement(&c.Spec.Etcd)
	c.Keyspace = KeyspaceOf(&c.Spec.Etcd)
	if c.Catalog, err = CatalogFor(v); err != nil {
		return nil, err
	}

	for i, r := range c.Spec.ServiceClusterIPRange {
		prefix, err := netip.ParsePrefix(r)
		if err != nil {
			return nil, fmt.Errorf("parsing spec.serviceClusterIPRange[%d] %q: %w", i, r, err)
		}
		first, err := FirstServiceIP(prefix)
		if err != nil {
			return nil, fmt.Errorf("spec.serviceClusterIPRange[%d]: %w", i, err)
		}
		c.ServiceCIDRs = append(c.ServiceCIDRs, prefix)
		c.KubernetesServiceIPs = append(c.KubernetesServiceIPs, first)
	}

	c.ServiceName = ServiceName(cfg.Name)
	c.ServiceAccountIssuers = c.Spec.Authentication.ServiceAccount.Issuers
	if len(c.ServiceAccountIssuers) == 0 {
		c.ServiceAccountIssuers = []string{"https://kubernetes.default.svc." + c.Spec.ClusterDomain}
	}
	c.SANs = servingSANs(c, in)
	c.Endpoint = endpoint(c)
	c.Sizing = ComputeSizing(SizingInput{
		Spec:             c.Spec.CacheSizing,
		MemoryLimitBytes: c.Spec.Resources.Limits.Memory().Value(),
		ObservedNodes:    in.ObservedNodes,
		ObservedPods:     in.ObservedPods,
		Requests:         c.Spec.Requests,
	})
	return c, nil
}

// FirstServiceIP is the address kube-apiserver gives the `kubernetes`
// Service in a service range: the network address plus one.
func FirstServiceIP(prefix netip.Prefix) (netip.Addr, error) {
	_, ipnet, err := netutils.ParseCIDRSloppy(prefix.String())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("parsing service range %s: %w", prefix, err)
	}
	ip, err := netutils.GetIndexedIP(ipnet, 1)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("finding the first address of %s: %w", prefix, err)
	}
	addr, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}, fmt.Errorf("finding the first address of %s: %v is not an IP", prefix, ip)
	}
	return addr.Unmap(), nil
}

// servingSANs lists every name and address a client may use to reach the
// apiservers: the tenant's `kubernetes` Service by every name and every
// range's first address, the operator's Service in the management cluster,
// the external host name, the user's extra SANs, and localhost for the
// probes and the apiserver's own loopback client.
func servingSANs(c *Completed, in Inputs) SANs {
	mgmtDomain := in.ManagementClusterDomain
	if mgmtDomain == "" {
		mgmtDomain = "cluster.local"
	}
	dns := []string{
		"kubernetes",
		"kubernetes.default",
		"kubernetes.default.svc",
		"kubernetes.default.svc." + c.Spec.ClusterDomain,
		c.ServiceName,
		c.ServiceName + "." + c.Namespace,
		c.ServiceName + "." + c.Namespace + ".svc",
		c.ServiceName + "." + c.Namespace + ".svc." + mgmtDomain,
		"localhost",
	}
	var ips []net.IP
	for _, a := range c.KubernetesServiceIPs {
		ips = append(ips, net.IP(a.AsSlice()))
	}
	ips = append(ips, net.ParseIP("127.0.0.1"), net.IPv6loopback)

	extra := append([]string{c.Spec.Serving.ExternalHostname, in.ServiceClusterIP}, in.ServiceIngress...)
	extra = append(extra, c.Spec.Serving.ExtraSANs...)
	for _, s := range extra {
		if s == "" {
			continue
		}
		if ip := net.ParseIP(s); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, strings.ToLower(s))
		}
	}
	return SANs{DNSNames: uniqueStrings(dns), IPs: uniqueIPs(ips)}
}

// endpoint is the URL in the admin kubeconfig and in status.
func endpoint(c *Completed) string {
	host := c.ServiceName + "." + c.Namespace + ".svc"
	if h := c.Spec.Serving.ExternalHostname; h != "" {
		host = h
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(int(c.Spec.Serving.Service.Port)))
}

func uniqueStrings(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

func uniqueIPs(in []net.IP) []net.IP {
	seen := map[string]bool{}
	var out []net.IP
	for _, ip := range in {
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		if !seen[ip.String()] {
			seen[ip.String()] = true
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, func(a, b net.IP) int { return strings.Compare(string(a.To16()), string(b.To16())) })
	return out
}
