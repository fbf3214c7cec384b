package apiserver

// Each tenant on an etcd that the platform runs with authentication gets
// a user of its own, whose role may read and write only the tenant's keys:
// etcd itself then keeps tenants apart, whatever a tenant's apiserver (or
// a certificate taken from its pod) asks for. The user is the common name
// of the tenant's etcd client certificate, which the etcd checks with
// --client-cert-auth.

// Such a user may not compact the etcd: etcd grants Compact to root alone.
// The platform compacts it (etcd's --auto-compaction-retention), and the
// tenant's apiservers run with --etcd-compaction-interval=0, which starts
// no compactor (k8s.io/apiserver's storage/etcd3), so that they neither
// fail every interval nor touch compact_rev_key, a key outside every
// prefix.

// EtcdUserName is the etcd user (and role) of the tenant namespace/name:
// unique among tenants, since namespace and name are, and the same for the
// tenant created again with that name, which takes back what it kept.
func EtcdUserName(namespace, name string) string {
	return "apiserver-operator:" + namespace + ":" + name
}

// EtcdKeyRange is a range of keys a role may read and write: Key alone
// when End is empty, [Key, End) otherwise.
type EtcdKeyRange struct {
	Key, End string
}

// EtcdRolePermissions are the key ranges the role of a tenant with the
// etcd prefix may read and write: every key under it, nothing else. Not
// the prefix's own key, not a neighbour whose prefix begins with the same
// characters (/tenants/a and /tenants/ab).
func EtcdRolePermissions(prefix string) []EtcdKeyRange {
	under := KeysUnder(CleanEtcdPrefix(prefix))
	return []EtcdKeyRange{{Key: under, End: prefixRangeEnd(under)}}
}

// prefixRangeEnd is the first key after every key that begins with p
// (etcd's own rule: the last byte below 0xff incremented, the rest cut).
func prefixRangeEnd(p string) string {
	end := []byte(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return string(end[:i+1])
		}
	}
	return "\x00" // every key: p is all 0xff bytes
}
