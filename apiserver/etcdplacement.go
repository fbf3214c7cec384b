package apiserver

import (
	"net/url"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// EtcdPlacement is where a tenant's data lives: which etcd servers store
// which resource. Complete computes it once from spec.etcd; the flags, the
// probes, the etcd dialer's allow list, the encryption scan and the
// operator's checks and counts all read it.
type EtcdPlacement struct {
	// Main are the servers of every resource without an override.
	Main []string
	// Overrides are the per-resource servers, in the spec's order.
	Overrides []EtcdOverride
	// OverrideSets are the distinct sets of override servers, as
	// kube-apiserver counts them for its health checks (etcd-override-N,
	// k8s.io/apiserver's EtcdOptions.addEtcdHealthEndpoint): two sets are
	// one when they hold the same servers in any order; in the order of
	// first appearance.
	OverrideSets [][]string
	// Sets are the main servers, then every override set that is not the
	// same servers: each etcd the tenant stores in, once, for what visits
	// every stored value (the encryption proof).
	Sets [][]string
	// Servers are every server once, in the order of first appearance:
	// what the operator checks.
	Servers []string
	// Addresses are the host:port of every server, sorted, without
	// duplicates: the only addresses the etcd dialer connects to.
	Addresses []string
}

// EtcdOverride is where one resource is stored apart.
type EtcdOverride struct {
	Resource schema.GroupResource
	Servers  []string
}

// newEtcdPlacement places spec's resources.
func newEtcdPlacement(spec *v1alpha1.EtcdSpec) EtcdPlacement {
	e := EtcdPlacement{Main: spec.Servers, Sets: [][]string{spec.Servers}}
	seen := map[string]bool{serverSetKey(spec.Servers): true}
	overrideSeen := map[string]bool{}
	for _, o := range spec.Overrides {
		e.Overrides = append(e.Overrides, EtcdOverride{Resource: schema.GroupResource{Group: o.Group, Resource: o.Resource}, Servers: o.Servers})
		key := serverSetKey(o.Servers)
		if !overrideSeen[key] {
			overrideSeen[key] = true
			e.OverrideSets = append(e.OverrideSets, o.Servers)
		}
		if !seen[key] {
			seen[key] = true
			e.Sets = append(e.Sets, o.Servers)
		}
	}
	for _, set := range e.Sets {
		for _, s := range set {
			if !slices.Contains(e.Servers, s) {
				e.Servers = append(e.Servers, s)
			}
		}
	}
	for _, s := range e.Servers {
		// Admission accepts only URLs with a host.
		if u, err := url.Parse(s); err == nil && u.Host != "" {
			e.Addresses = append(e.Addresses, u.Host)
		}
	}
	slices.Sort(e.Addresses)
	e.Addresses = slices.Compact(e.Addresses)
	return e
}

// serverSetKey names a set of servers whatever their order, as
// kube-apiserver compares override sets.
func serverSetKey(servers []string) string {
	return strings.Join(slices.Sorted(slices.Values(servers)), ";")
}

// ServersOf are the servers that store gr: its override's, or the main
// ones.
func (e *EtcdPlacement) ServersOf(gr schema.GroupResource) []string {
	for _, o := range e.Overrides {
		if o.Resource == gr {
			return o.Servers
		}
	}
	return e.Main
}

// ServersAt are the servers that store the values under the catalog prefix
// prefix: the override of a resource stored there (a custom resource
// under group/resource), or the main ones.
func (e *EtcdPlacement) ServersAt(catalog *Catalog, prefix string) []string {
	for _, o := range e.Overrides {
		p, ok := catalog.EtcdPrefixes[o.Resource]
		if !ok {
			p = o.Resource.Group + "/" + o.Resource.Resource
		}
		if p == prefix {
			return o.Servers
		}
	}
	return e.Main
}

// OverridesFlag renders --etcd-servers-overrides: group/resource#url;url,
// comma separated, sorted, with an empty group for the core group
// ("/events#https://e:2379").
func (e *EtcdPlacement) OverridesFlag() string {
	parts := make([]string, 0, len(e.Overrides))
	for _, o := range e.Overrides {
		parts = append(parts, o.Resource.Group+"/"+o.Resource.Resource+"#"+strings.Join(o.Servers, ";"))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// SetResources are, for each of Sets, the resources an override places
// there: none for the main servers (Sets[0]), unless an override names
// the main servers themselves.
func (e EtcdPlacement) SetResources() [][]schema.GroupResource {
	out := make([][]schema.GroupResource, len(e.Sets))
	for _, o := range e.Overrides {
		i := e.SetOf(o.Resource)
		out[i] = append(out[i], o.Resource)
	}
	return out
}

// SetOf is the index in Sets of the servers that store gr.
func (e EtcdPlacement) SetOf(gr schema.GroupResource) int {
	for _, o := range e.Overrides {
		if o.Resource == gr {
			key := serverSetKey(o.Servers)
			for i, set := range e.Sets {
				if serverSetKey(set) == key {
					return i
				}
			}
		}
	}
	return 0
}
