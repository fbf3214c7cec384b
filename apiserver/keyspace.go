package apiserver

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// DefaultEtcdPrefix is spec.etcd.prefix when the spec names none.
const DefaultEtcdPrefix = "/registry"

// EtcdKeyspace is where a tenant's keys are: the etcd servers that hold
// any of its data (overrides included) and the prefix of every key.
// kube-apiserver keys an object as the prefix, cleaned and rooted
// (k8s.io/apiserver's etcd3 store joins "/" and --etcd-prefix), then its
// resource and name: two tenants that share a server and whose prefixes
// are one within the other (or equal) read and write each other's keys.
type EtcdKeyspace struct {
	// Addresses are the servers' host:port, the host in lower case, sorted
	// and distinct. The same etcd reached under two names (a DNS name and
	// an IP) counts as two.
	Addresses []string `json:"addresses"`
	// Prefix is cleaned and rooted: "/registry", "/tenants/a".
	Prefix string `json:"prefix"`
}

// KeyspaceOf is the keyspace of spec.etcd.
func KeyspaceOf(spec *v1alpha1.EtcdSpec) EtcdKeyspace {
	return EtcdKeyspace{Prefix: CleanEtcdPrefix(spec.Prefix), Addresses: EtcdAddresses(newEtcdPlacement(spec).Servers)}
}

// CleanEtcdPrefix is spec.etcd.prefix (unset: the default) as
// kube-apiserver keys objects under it: cleaned and rooted.
func CleanEtcdPrefix(prefix string) string {
	return path.Join("/", cmp.Or(prefix, DefaultEtcdPrefix))
}

// EtcdAddresses are the host:port of the etcd server URLs, the host in
// lower case, sorted and distinct (as EtcdKeyspace.Addresses).
func EtcdAddresses(servers []string) []string {
	var out []string
	for _, s := range servers {
		u, err := url.Parse(s)
		if err != nil || u.Hostname() == "" {
			continue // admission accepts only URLs with a host and a port
		}
		host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
		out = append(out, net.JoinHostPort(host, u.Port()))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// EtcdSetsOf are the etcd clusters spec stores in (EtcdPlacement.Sets):
// each set of server URLs once.
func EtcdSetsOf(spec *v1alpha1.EtcdSpec) [][]string { return newEtcdPlacement(spec).Sets }

// SetsOn are the sets of etcd server URLs (Completed.Etcd.Sets) that have
// one of addresses (EtcdAddresses): the etcd clusters a keyspace of those
// addresses is on.
func SetsOn(sets [][]string, addresses []string) [][]string {
	var out [][]string
	for _, set := range sets {
		if slices.ContainsFunc(EtcdAddresses(set), func(a string) bool { return slices.Contains(addresses, a) }) {
			out = append(out, set)
		}
	}
	return out
}

// Overlaps reports whether k and o share a server and a key.
func (k EtcdKeyspace) Overlaps(o EtcdKeyspace) bool {
	if !within(k.Prefix, o.Prefix) && !within(o.Prefix, k.Prefix) {
		return false
	}
	for _, a := range k.Addresses {
		if slices.Contains(o.Addresses, a) {
			return true
		}
	}
	return false
}

// within reports whether every key under prefix p is under prefix q.
func within(p, q string) bool {
	return q == "/" || p == q || strings.HasPrefix(p, q+"/")
}

// IndexKeys are the keys under which an index holds k: for each address,
// the prefix itself ("=") and every prefix above it ("<"), so that
// OverlapQueries finds every keyspace that overlaps another with one
// exact lookup each.
func (k EtcdKeyspace) IndexKeys() []string {
	var out []string
	for _, a := range k.Addresses {
		out = append(out, a+"|="+k.Prefix)
		for _, above := range ancestors(k.Prefix) {
			out = append(out, a+"|<"+above)
		}
	}
	return out
}

// OverlapQueries are the index keys (IndexKeys) of every keyspace that
// overlaps k: on each of its addresses, its own prefix and those above it,
// and anything below it.
func (k EtcdKeyspace) OverlapQueries() []string {
	var out []string
	for _, a := range k.Addresses {
		out = append(out, a+"|="+k.Prefix, a+"|<"+k.Prefix)
		for _, above := range ancestors(k.Prefix) {
			out = append(out, a+"|="+above)
		}
	}
	return out
}

// ancestors are the prefixes strictly above p, from the root: "/" and
// "/tenants" for "/tenants/a".
func ancestors(p string) []string {
	if p == "/" {
		return nil
	}
	out := []string{"/"}
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// KeysUnder is what every key of a tenant with the cleaned prefix begins
// with: "<prefix>/", and "/" for the root (kube-apiserver joins the prefix
// and "/<resource>/…").
func KeysUnder(prefix string) string {
	return strings.TrimSuffix(prefix, "/") + "/"
}

// Marks of the Secrets a tenant deleted with deletionPolicy Retain kept:
// the label makes them easy to find (the tenant index watches them), the
// annotation says where the data they read is (EtcdKeyspace in JSON). No
// other tenant may store there while they exist; the tenant created again
// with the same namespace and name takes the data back.
const (
	RetainedDataLabel          = "controlplane.apiserver-operator.dev/retained-data"
	RetainedKeyspaceAnnotation = "controlplane.apiserver-operator.dev/retained-keyspace"
)

// Annotation is k as RetainedKeyspaceAnnotation holds it.
func (k EtcdKeyspace) Annotation() string {
	b, _ := json.Marshal(k) // strings only: never fails
	return string(b)
}

// RetainedKeyspace reads the keyspace a retained Secret's annotations
// name; ok is false when they name none.
func RetainedKeyspace(annotations map[string]string) (EtcdKeyspace, bool, error) {
	v, found := annotations[RetainedKeyspaceAnnotation]
	if !found {
		return EtcdKeyspace{}, false, nil
	}
	var k EtcdKeyspace
	if err := json.Unmarshal([]byte(v), &k); err != nil || k.Prefix == "" {
		return EtcdKeyspace{}, false, fmt.Errorf("annotation %s is not a keyspace (%q): restore what the operator wrote", RetainedKeyspaceAnnotation, v)
	}
	return k, true, nil
}

// WhereDataIs is cfg with spec.etcd where its data is: its etcd servers,
// under the prefix it stored under (status.dataPrefix), which may differ
// from the spec's when a change of prefix was held.
func WhereDataIs(cfg *v1alpha1.ApiServerConfig) *v1alpha1.ApiServerConfig {
	held := cfg.DeepCopy()
	if cfg.Status.DataPrefix != "" {
		held.Spec.Etcd.Prefix = cfg.Status.DataPrefix
	}
	if recorded := cfg.Status.DataServers; len(recorded) > 0 {
		// Only the servers the data was proven on (status.dataServers):
		// those a held move added hold someone else's keys.
		on := func(servers []string) []string {
			return slices.DeleteFunc(slices.Clone(servers), func(s string) bool {
				return len(SetsOn([][]string{{s}}, recorded)) == 0
			})
		}
		held.Spec.Etcd.Servers = on(cfg.Spec.Etcd.Servers)
		held.Spec.Etcd.Overrides = slices.DeleteFunc(slices.Clone(held.Spec.Etcd.Overrides), func(o v1alpha1.EtcdOverride) bool { return len(on(o.Servers)) == 0 })
		for i := range held.Spec.Etcd.Overrides {
			held.Spec.Etcd.Overrides[i].Servers = on(held.Spec.Etcd.Overrides[i].Servers)
		}
	}
	return held
}
