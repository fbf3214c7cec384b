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
	k := EtcdKeyspace{Prefix: path.Join("/", cmp.Or(spec.Prefix, DefaultEtcdPrefix))}
	for _, s := range newEtcdPlacement(spec).Servers {
		u, err := url.Parse(s)
		if err != nil || u.Hostname() == "" {
			continue // admission accepts only URLs with a host and a port
		}
		host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
		k.Addresses = append(k.Addresses, net.JoinHostPort(host, u.Port()))
	}
	slices.Sort(k.Addresses)
	k.Addresses = slices.Compact(k.Addresses)
	return k
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
